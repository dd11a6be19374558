"""The figures of ``codity bench --cost-model`` (codity.bench.cost_model) and what it runs."""

from __future__ import annotations

from dataclasses import dataclass

from codity.bench._against_model import CODITY, GRAPHILE, PGQUEUER, Config
from codity.bench._model import Machine
from codity.bench._wal_records import WalSpan
from codity.db.locate import SERVER_SETTINGS

__all__ = [
    "BEST",
    "DRAIN",
    "ENQUEUE",
    "ENQUEUE_BATCHED",
    "OBSERVER",
    "PHASES",
    "SETTINGS",
    "CostOptions",
    "CostReport",
    "PhaseCost",
]

SETTINGS = (
    *SERVER_SETTINGS,
    "fsync=on",
    "synchronous_commit=on",
    "full_page_writes=on",
    # A pass over another system's database would be charged to whichever phase it fell in;
    # each phase is a few seconds on tables that were just VACUUMed or created.
    "autovacuum=off",
    "shared_preload_libraries=pg_stat_statements",
    "pg_stat_statements.track=top",
)
OBSERVER = "codity_bench_observer"
"""The bench's own login: its reads and polls are not the system's statements."""
BEST = {
    CODITY: Config(CODITY, 2, 500),
    GRAPHILE: Config(GRAPHILE, 2, 8, 500),
    PGQUEUER: Config(PGQUEUER, 2, 200, 400),
}
"""Each system's fastest two-process drain in the last ``--against`` runs
(docs/PERFORMANCE.md)."""
ENQUEUE = "enqueue, one by one"
ENQUEUE_BATCHED = "enqueue, 1,000 per call"
DRAIN = "drain"
PHASES = (ENQUEUE, ENQUEUE_BATCHED, DRAIN)


@dataclass(frozen=True, slots=True)
class CostOptions:
    jobs: int = 20_000
    """Jobs of the batched enqueue and of the drain."""
    single: int = 2_000
    """Jobs enqueued one by one."""

    @classmethod
    def quick_defaults(cls) -> CostOptions:
        return cls(jobs=1_000, single=100)


@dataclass(frozen=True, slots=True)
class PhaseCost:
    system: str
    phase: str
    jobs: int
    wal_bytes: int
    statements: int | None
    span: WalSpan
    config: str = ""

    def per_job(self, value: float) -> float:
        return value / self.jobs


@dataclass(frozen=True, slots=True)
class CostReport:
    options: CostOptions
    phases: tuple[PhaseCost, ...]
    versions: tuple[tuple[str, str], ...]
    unavailable: tuple[tuple[str, str], ...]
    machine: Machine
    commit: str
    started_at: str
    seconds: float

    def phase(self, system: str, phase: str) -> PhaseCost | None:
        return next((p for p in self.phases if p.system == system and p.phase == phase), None)

    @property
    def systems(self) -> list[str]:
        return list(dict.fromkeys(p.system for p in self.phases))
