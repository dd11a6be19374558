"""What the benchmark is asked to do and what it found: plain frozen dataclasses."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

__all__ = [
    "BenchOptions",
    "ClaimCost",
    "Drain",
    "Enqueue",
    "Machine",
    "Pickup",
    "Report",
    "percentile",
]


@dataclass(frozen=True, slots=True)
class BenchOptions:
    workers: int = 2
    concurrency: int = 100
    jobs: int = 20_000
    """Jobs drained by the workers, and by the raw-SQL client for the ceiling."""
    enqueue_single: int = 5_000
    enqueue_batched: int = 100_000
    enqueue_batch: int = 1_000
    pickup_samples: int = 200
    poll_interval_ms: int = 5_000
    """WORKER_POLL_INTERVAL_MS as the worker processes will read it."""
    claim_sizes: tuple[int, int] = (10_000, 1_000_000)
    claim_runs: int = 200
    rounds: int = 5
    """Drain and ceiling are measured this many times, alternately; medians are reported."""
    quick: bool = False

    @classmethod
    def quick_defaults(cls) -> BenchOptions:
        """Small sizes, for tests and a first look: seconds, not minutes."""
        return cls(
            jobs=2_000,
            enqueue_single=300,
            enqueue_batched=10_000,
            pickup_samples=30,
            claim_sizes=(1_000, 20_000),
            claim_runs=30,
            rounds=1,
            quick=True,
        )


@dataclass(frozen=True, slots=True)
class Enqueue:
    jobs: int
    batch: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.jobs / self.seconds


@dataclass(frozen=True, slots=True)
class Drain:
    """N jobs run to completion, by the worker processes or by the raw-SQL client."""

    jobs: int
    seconds: float
    completed: int
    """Jobs whose status is completed afterwards."""
    executions: int
    """Execution rows of those jobs: one per job when each ran exactly once."""
    claims: int
    """Claim calls that returned jobs (distinct claim times per worker)."""
    completions: int
    """complete_many calls (distinct finish times per worker)."""
    exit_codes: tuple[int, ...] = ()

    @property
    def per_second(self) -> float:
        return self.completed / self.seconds

    @property
    def mean_claim_batch(self) -> float:
        return self.executions / self.claims if self.claims else 0.0

    @property
    def mean_complete_batch(self) -> float:
        return self.completed / self.completions if self.completions else 0.0


@dataclass(frozen=True, slots=True)
class Pickup:
    listen: bool
    synchronous_commit: bool
    """False: the worker's sessions do not wait for their commits to be flushed (diagnostic)."""
    samples_ms: tuple[float, ...]
    """Enqueue COMMIT acknowledged -> handler start, per job."""
    wake_ms: tuple[float, ...]
    """Enqueue COMMIT acknowledged -> start of the worker's claim statement (its now())."""
    commit_ms: tuple[float, ...]
    """The enqueue's own round trip, a commit with its WAL flush, in the same minutes."""

    @property
    def p50(self) -> float:
        return percentile(self.samples_ms, 50)

    @property
    def p95(self) -> float:
        return percentile(self.samples_ms, 95)

    @property
    def p99(self) -> float:
        return percentile(self.samples_ms, 99)


@dataclass(frozen=True, slots=True)
class ClaimCost:
    queued: int
    limit: int
    samples_ms: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples_ms)


@dataclass(frozen=True, slots=True)
class Machine:
    cpus: int
    cpu_model: str
    memory_gib: float
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    python: str
    postgres: str
    settings: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Report:
    options: BenchOptions
    machine: Machine
    enqueue_single: Enqueue
    enqueue_batched: Enqueue
    pickup_notify: Pickup
    pickup_poll: Pickup
    pickup_unflushed: Pickup
    drains: tuple[Drain, ...]
    ceilings: tuple[Drain, ...]
    """One per round, in the order measured: ceiling then drain, round after round."""
    ceiling_clients: int
    claim_small: ClaimCost
    claim_large: ClaimCost
    started_at: str
    seconds: float

    @property
    def drain(self) -> Drain:
        """The round with the median worker throughput."""
        return _median_run(self.drains)

    @property
    def ceiling(self) -> Drain:
        return _median_run(self.ceilings)

    @property
    def ratios(self) -> tuple[float, ...]:
        """Worker throughput over the ceiling of the same round."""
        return tuple(
            d.per_second / c.per_second for d, c in zip(self.drains, self.ceilings, strict=True)
        )

    @property
    def drain_ratio(self) -> float:
        """The median of the rounds' ratios: each compares two runs minutes apart at most."""
        return statistics.median(self.ratios)

    @property
    def claim_ratio(self) -> float:
        return self.claim_large.median / self.claim_small.median


def _median_run(runs: tuple[Drain, ...]) -> Drain:
    ordered = sorted(runs, key=lambda r: r.per_second)
    return ordered[(len(ordered) - 1) // 2]


def percentile(samples: tuple[float, ...], pct: float) -> float:
    """The pct-th percentile, linearly interpolated between closest ranks (numpy's default)."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * pct / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
