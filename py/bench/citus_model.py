"""What ``codity bench --citus`` runs and what it found: plain frozen dataclasses.

Both sides, one plain PostgreSQL server and a Citus cluster of three nodes, are described
by the same records (a drain is a set of :class:`NodeSpent`, one per server), so that every
figure of one has its counterpart in the other and a ratio is a division.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from codity.bench._model import Pickup

__all__ = [
    "CITUS",
    "PLAIN",
    "CitusOptions",
    "CitusReport",
    "DrainRound",
    "MultiTask",
    "NodeSpent",
    "Placement",
    "ServerInfo",
    "StatementCount",
]

PLAIN = "plain"
CITUS = "citus"


@dataclass(frozen=True, slots=True)
class CitusOptions:
    jobs: int = 40_000
    """Jobs per drain, spread evenly over the queues."""
    queues: int = 8
    workers: int = 2
    """``codity worker`` processes, each serving every queue."""
    concurrency: int = 100
    rounds: int = 5
    """Drains per side, alternating plain and Citus; medians reported."""
    pickup_samples: int = 200
    """Per side, spread over the rounds."""
    quick: bool = False

    @classmethod
    def quick_defaults(cls) -> CitusOptions:
        """A few hundred jobs, one round: proves the command end to end, not figures."""
        return cls(jobs=400, rounds=1, pickup_samples=20, quick=True)

    @property
    def per_queue(self) -> int:
        return -(-self.jobs // self.queues)

    @property
    def total_jobs(self) -> int:
        """Jobs per drain, after rounding up to whole queues."""
        return self.per_queue * self.queues


@dataclass(frozen=True, slots=True)
class StatementCount:
    """One normalised statement of pg_stat_statements on one node, over a drain."""

    query: str
    calls: int
    toplevel: bool


@dataclass(frozen=True, slots=True)
class MultiTask:
    """A statement Citus logged as "multi-task query about to be executed" on a node."""

    node: str
    statement: str
    context: str


@dataclass(frozen=True, slots=True)
class NodeSpent:
    """What one server did over one drain, from its own counters."""

    node: str
    cpu_s: float | None
    """Every process of its postmaster (backends, background workers, reaped children)."""
    wal_bytes: int
    statements: tuple[StatementCount, ...]
    """The drain's statements (the bench's own taken out), most called first."""
    multi_task: tuple[MultiTask, ...] = ()

    @property
    def toplevel_calls(self) -> int:
        """Statements received from a client: a worker process, or another node."""
        return sum(s.calls for s in self.statements if s.toplevel)

    @property
    def nested_calls(self) -> int:
        """Statements run inside functions on this node."""
        return sum(s.calls for s in self.statements if not s.toplevel)

    def calls_containing(self, text: str) -> int:
        """Top-level calls of the statements whose text holds ``text``."""
        return sum(s.calls for s in self.statements if s.toplevel and text in s.query)

    def calls_of(self, prefix: str) -> int:
        return sum(s.calls for s in self.statements if s.toplevel and s.query.startswith(prefix))

    @property
    def prepared(self) -> int:
        """Two-phase commits this node took part in (``PREPARE TRANSACTION`` received)."""
        return self.calls_of("PREPARE TRANSACTION")


@dataclass(frozen=True, slots=True)
class DrainRound:
    """One drain of N jobs over the queues by the worker processes, on one side."""

    side: str
    round: int
    jobs: int
    seconds: float
    """First claim to last completion, on the database's clock."""
    nodes: tuple[NodeSpent, ...]
    workers_cpu_s: float
    claims: int
    """Claim calls that returned jobs (distinct claim times per worker and queue)."""
    failing: int = 0
    """Jobs of a task with no handler among them: failed once each, then dead letters."""
    heartbeat_ms: int | None = None
    """WORKER_HEARTBEAT_MS given to the workers; None: their default."""
    router_or_delegated: int = 0
    """citus_stat_statements on the coordinator: calls carrying a distribution key value."""
    unkeyed: tuple[StatementCount, ...] = ()
    """citus_stat_statements on the coordinator: statements with no partition key."""

    @property
    def per_second(self) -> float:
        return self.jobs / self.seconds

    @property
    def cpu_s(self) -> float | None:
        """Every server of the side together."""
        values = [n.cpu_s for n in self.nodes]
        return None if any(v is None for v in values) else sum(v for v in values if v)

    @property
    def wal_bytes(self) -> int:
        return sum(n.wal_bytes for n in self.nodes)

    @property
    def multi_task(self) -> tuple[MultiTask, ...]:
        return tuple(m for n in self.nodes for m in n.multi_task)

    def node(self, name: str) -> NodeSpent:
        return next(n for n in self.nodes if n.node == name)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a queue's shard group lives on the cluster."""

    queue: str
    queue_id: int
    node: str


@dataclass(frozen=True, slots=True)
class ServerInfo:
    name: str
    version: str
    settings: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class CitusReport:
    options: CitusOptions
    drains: tuple[DrainRound, ...]
    """In the order measured: plain, Citus, plain, Citus..."""
    pickups: dict[str, Pickup]
    """Each side's pickups, every round's but the first job of each round's new worker."""
    first_pickups: dict[str, tuple[float, ...]]
    """The first job of each round's new worker, in ms: its first claim on a new session."""
    coverage: DrainRound | None
    """The cluster's extra drain with failing jobs and a short heartbeat: the proof's reach."""
    placements: tuple[Placement, ...]
    servers: tuple[ServerInfo, ...]
    citus_version: str
    cpus: int
    cpu_model: str
    memory_gib: float
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    python: str
    commit: str
    command: str
    started_at: str
    seconds: float

    def rounds(self, side: str) -> tuple[DrainRound, ...]:
        return tuple(d for d in self.drains if d.side == side)

    def median(self, side: str) -> DrainRound:
        """The round of that side with the median throughput."""
        ordered = sorted(self.rounds(side), key=lambda d: d.per_second)
        return ordered[(len(ordered) - 1) // 2]

    @property
    def ratios(self) -> tuple[float, ...]:
        """Citus over plain, round by round (each pair taken a minute apart)."""
        pairs = zip(self.rounds(PLAIN), self.rounds(CITUS), strict=True)
        return tuple(c.per_second / p.per_second for p, c in pairs)

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)
