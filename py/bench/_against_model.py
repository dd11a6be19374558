"""What ``codity bench --against`` runs and what it found: plain frozen dataclasses.

Both systems are described by the same records, so that every figure of one has its
counterpart in the other and the ratio is a division, not an interpretation.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from codity.bench._model import Machine, percentile

__all__ = [
    "CODITY",
    "GRAPHILE",
    "PGBOSS",
    "PGBOSS_DEFAULT_POLL_S",
    "PGBOSS_TUNED_POLL_S",
    "PGQUEUER",
    "AgainstOptions",
    "AgainstReport",
    "Ceiling",
    "Config",
    "DrainRun",
    "EnqueueRun",
    "PickupRun",
    "Series",
]

CODITY = "Codity"
PGQUEUER = "PGQueuer"
GRAPHILE = "Graphile Worker"
PGBOSS = "pg-boss"
PGBOSS_TUNED_POLL_S = 0.5
"""pg-boss's shortest polling interval (its ``pollingIntervalSeconds`` must be >= 0.5)."""
PGBOSS_DEFAULT_POLL_S = 2.0


@dataclass(frozen=True, slots=True)
class AgainstOptions:
    jobs: int = 20_000
    """No-op jobs enqueued up front, then drained, per drain."""
    rounds: int = 3
    """Every configuration is drained this many times, round after round; medians reported."""
    enqueue_single: int = 5_000
    enqueue_batched: int = 100_000
    enqueue_batch: int = 1_000
    pickup_samples: int = 200
    quick: bool = False

    @classmethod
    def quick_defaults(cls) -> AgainstOptions:
        """Small sizes, one round, a small matrix: a smoke test, not figures."""
        return cls(
            jobs=2_000,
            rounds=1,
            enqueue_single=200,
            enqueue_batched=5_000,
            pickup_samples=20,
            quick=True,
        )


@dataclass(frozen=True, slots=True)
class Config:
    """How one system's workers were run for a drain.

    ``batch`` is what one claim asks for (Codity: the worker's concurrency, which is its
    claim size; PGQueuer: ``--batch-size``; pg-boss: ``batchSize``), or Graphile Worker's
    ``concurrentJobs``; ``limit`` is PGQueuer's ``--max-concurrent-tasks`` (None: unlimited,
    its default), Graphile Worker's local queue size (None: none, its default) or the
    number of pg-boss ``work()`` loops per process, and unused for Codity. A Graphile
    Worker with a local queue also batches its completions (``completeJobBatchDelay`` 0);
    a tuned pg-boss polls every 0.5 s, its default every 2 s.
    """

    system: str
    processes: int
    batch: int
    limit: int | None = None
    default: bool = False

    @property
    def label(self) -> str:
        if self.system == CODITY:
            shape = f"concurrency {self.batch}"
        elif self.system == GRAPHILE:
            shape = f"concurrency {self.batch}"
            if self.limit is not None:
                shape += f", local queue {self.limit}, batched completion"
        elif self.system == PGBOSS:
            loops = f"{self.limit} work() loop{'s' if self.limit != 1 else ''}"
            poll = PGBOSS_DEFAULT_POLL_S if self.default else PGBOSS_TUNED_POLL_S
            shape = f"batchSize {self.batch}, {loops}, poll {poll:g} s"
        else:
            limit = "unlimited" if self.limit is None else str(self.limit)
            shape = f"batch {self.batch}, max {limit}"
        return f"{shape}, defaults" if self.default else shape


@dataclass(frozen=True, slots=True)
class DrainRun:
    """N jobs drained once: first claim to last completion, on the database's clock."""

    jobs: int
    seconds: float
    wal_bytes: int
    """pg_current_wal_insert_lsn() just before the workers were let go and after the last job."""
    server_cpu_s: float | None
    """CPU of every PostgreSQL process over the same span (None: the server is not local)."""
    workers_cpu_s: float
    """CPU of the worker processes over the same span."""
    wal_window: tuple[str, str] | None = None
    """The WAL insert positions of that span (codity.bench.cost_model reads the records)."""
    statements: int | None = None
    """Statements the system's processes sent in that span (with pg_stat_statements only)."""

    @property
    def per_second(self) -> float:
        return self.jobs / self.seconds

    @property
    def wal_per_job(self) -> float:
        return self.wal_bytes / self.jobs


class _Medians:
    """Medians over the rounds of ``runs``, for Series and Ceiling alike."""

    __slots__ = ()
    runs: tuple[DrainRun, ...]

    @property
    def per_second(self) -> float:
        return statistics.median(r.per_second for r in self.runs)

    @property
    def wal_per_job(self) -> float:
        return statistics.median(r.wal_per_job for r in self.runs)

    @property
    def server_us_per_job(self) -> float | None:
        known = [r.server_cpu_s / r.jobs * 1e6 for r in self.runs if r.server_cpu_s is not None]
        return statistics.median(known) if known else None

    @property
    def workers_us_per_job(self) -> float:
        return statistics.median(r.workers_cpu_s / r.jobs * 1e6 for r in self.runs)


@dataclass(frozen=True, slots=True)
class Series(_Medians):
    """Every round of one configuration."""

    config: Config
    runs: tuple[DrainRun, ...]


@dataclass(frozen=True, slots=True)
class Ceiling(_Medians):
    """Every round of one pgbench drain of the machine's ceiling (codity.bench._ceiling)."""

    name: str
    runs: tuple[DrainRun, ...]


@dataclass(frozen=True, slots=True)
class EnqueueRun:
    system: str
    jobs: int
    batch: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.jobs / self.seconds


@dataclass(frozen=True, slots=True)
class PickupRun:
    """One idle worker at its defaults; jobs enqueued one at a time, 10-50 ms apart."""

    system: str
    total_ms: tuple[float, ...]
    """From just before the producer's enqueue (its commit included) to the handler's start."""
    after_commit_ms: tuple[float, ...]
    """From the producer seeing its commit acknowledged to the handler's start."""

    def p(self, pct: float) -> float:
        return percentile(self.total_ms, pct)


@dataclass(frozen=True, slots=True)
class AgainstReport:
    options: AgainstOptions
    machine: Machine
    commit: str
    pgqueuer_version: str
    series: tuple[Series, ...]
    enqueues: tuple[EnqueueRun, ...]
    pickups: tuple[PickupRun, ...]
    ceilings: tuple[Ceiling, ...]
    started_at: str
    seconds: float

    def best(self, system: str, processes: int) -> Series:
        """The configuration with the highest median drain for that system and process count."""
        found = [s for s in self.series
                 if s.config.system == system and s.config.processes == processes]  # fmt: skip
        return max(found, key=lambda s: s.per_second)

    def defaults(self, system: str) -> Series:
        return next(s for s in self.series if s.config.system == system and s.config.default)

    def enqueue(self, system: str, batch: int) -> float:
        """Median jobs/s of that system's enqueue rounds at that batch size."""
        return statistics.median(
            e.per_second for e in self.enqueues if e.system == system and e.batch == batch
        )

    def pickup(self, system: str) -> PickupRun:
        return next(p for p in self.pickups if p.system == system)

    def ceiling(self, name: str) -> Ceiling | None:
        return next((c for c in self.ceilings if c.name == name), None)
