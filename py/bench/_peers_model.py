"""What ``codity bench --against graphile-worker|pg-boss|all`` found: one report for Codity
and every peer that ran, in the records of ``--against pgqueuer`` (codity.bench._against_model).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from codity.bench._against_model import AgainstOptions, EnqueueRun, PickupRun, Series
from codity.bench._model import Machine

__all__ = ["PeersReport"]


@dataclass(frozen=True, slots=True)
class PeersReport:
    options: AgainstOptions
    machine: Machine
    commit: str
    versions: tuple[tuple[str, str], ...]
    """(system, version) of every peer that ran, in the report's column order."""
    unavailable: tuple[tuple[str, str], ...]
    """(system, one sentence) of every peer asked for that could not run."""
    series: tuple[Series, ...]
    enqueues: tuple[EnqueueRun, ...]
    pickups: tuple[PickupRun, ...]
    started_at: str
    seconds: float

    @property
    def peers(self) -> tuple[str, ...]:
        return tuple(system for system, _ in self.versions)

    def version(self, system: str) -> str:
        return dict(self.versions)[system]

    def best(self, system: str, processes: int) -> Series:
        """The configuration with the highest median drain for that system and process count."""
        found = [s for s in self.series if s.config.system == system
                 and s.config.processes == processes and not s.config.default]  # fmt: skip
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
