"""What a soak run found, and the verdicts on it: the model of ``codity soak`` (the run is
codity.bench.soak) and its rendering, the rows printed as they come, the verdicts and the
machine. The verdict rules are explained in codity.bench.soak's docstring and in
docs/PERFORMANCE.md, "Retention soak"."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from codity.bench._model import Machine
from codity.bench._workers import BenchError

__all__ = [
    "HEADER", "Outcome", "Sample", "SoakOptions", "SoakReport", "Verdict", "render_machine",
    "render_verdicts", "row", "verdicts",
]  # fmt: skip

PRUNE_LAG_S = 75
"""roll_up closes a minute 15 s after it ends and prune keeps what is not rolled up yet."""
THROUGHPUT_TOLERANCE, SIZE_GROWTH, CLAIM_GROWTH = 0.10, 1.10, 1.5
MIB = 2**20


@dataclass(frozen=True, slots=True)
class SoakOptions:
    minutes: float = 10.0
    rate: float | None = None
    """Jobs per second offered; None: half the rate of a drain measured first."""
    workers: int = 2
    concurrency: int = 100
    keep: int = 60
    """The soak queue's keep_completed_seconds."""
    sample: float = 30.0

    @property
    def windows(self) -> int:
        return round(self.minutes * 60 / self.sample)

    def checked(self) -> SoakOptions:
        """Itself, or BenchError saying which option is out of range."""
        if self.rate is not None and self.rate <= 0:
            raise BenchError("--rate must be positive")
        if self.workers < 1 or not 1 <= self.concurrency <= 1000:
            raise BenchError("--workers must be positive; --concurrency from 1 to 1000")
        if not 60 <= self.keep <= 315_360_000:
            raise BenchError("--keep must be from 60 s (the least a queue keeps) to 10 years")
        if not 0 < self.sample < self.keep:
            raise BenchError(
                "--sample must be positive and shorter than --keep, or pruning would delete "
                "a window's completions before they are counted"
            )
        if self.windows < 2:
            raise BenchError("--minutes must hold at least two --sample windows")
        return self


@dataclass(frozen=True, slots=True)
class Sample:
    elapsed_s: float
    per_second: float
    backlog: int
    jobs: int
    executions: int
    pruned: int
    jobs_bytes: int
    executions_bytes: int
    claim_index_bytes: int
    jobs_indexes_bytes: int
    claim_ms: float
    autovacuums: int
    """Autovacuum runs on codity.jobs so far: what frees the space and the claim index's
    dead entries that pruning and every claim leave behind."""
    server_cpu: float | None
    """The whole server's CPU over the window (every database, autovacuum), as a share of one
    core; None when it runs on another machine."""
    workers_cpu: float


@dataclass(frozen=True, slots=True)
class Outcome:
    """Counted once everything stopped."""

    enqueued: int
    left: int
    left_completed: int
    executions: int
    executions_completed: int
    claimed_twice: int
    """Jobs seen with execution_seq > 1 at any sample or at the end."""

    @property
    def pruned(self) -> int:
        return self.enqueued - self.left

    @property
    def exactly_once(self) -> bool:
        counts = {self.left, self.left_completed, self.executions, self.executions_completed}
        return len(counts) == 1 and self.claimed_twice == 0


@dataclass(frozen=True, slots=True)
class SoakReport:
    options: SoakOptions
    rate: float
    measured_rate: float | None
    samples: tuple[Sample, ...]
    outcome: Outcome
    machine: Machine
    started_at: str
    seconds: float


HEADER = (
    "| s | completed/s | backlog | jobs rows | executions rows | pruned | jobs MiB "
    "| executions MiB | claim index KiB | jobs indexes MiB | claim ms | jobs autovacuums "
    "| server CPU | workers CPU |\n" + "| ---: " * 14 + "|"
)


def _cpu(share: float | None) -> str:
    return "n/a" if share is None else f"{share:.0%}"


def row(s: Sample) -> str:
    return (
        f"| {s.elapsed_s:.0f} | {s.per_second:,.0f} | {s.backlog:,} | {s.jobs:,} "
        f"| {s.executions:,} | {s.pruned:,} | {s.jobs_bytes / MIB:.1f} "
        f"| {s.executions_bytes / MIB:.1f} | {s.claim_index_bytes / 1024:,.0f} "
        f"| {s.jobs_indexes_bytes / MIB:.1f} | {s.claim_ms:.3f} | {s.autovacuums} "
        f"| {_cpu(s.server_cpu)} | {_cpu(s.workers_cpu)} |"
    )


@dataclass(frozen=True, slots=True)
class Verdict:
    check: str
    measured: str
    holds: bool | None
    """None: the run was too short to judge."""

    @property
    def word(self) -> str:
        return {True: "pass", False: "**fail**", None: "not judged"}[self.holds]


_SIZES = (
    ("codity.jobs, table and indexes", "jobs_bytes", MIB, "MiB"),
    ("codity.job_executions, table and indexes", "executions_bytes", MIB, "MiB"),
    ("jobs_claim_idx", "claim_index_bytes", 1024, "KiB"),
    ("every index of codity.jobs", "jobs_indexes_bytes", MIB, "MiB"),
)


def verdicts(r: SoakReport) -> list[Verdict]:
    s, o, out = r.samples, r.options, r.outcome
    first, last = s[0], s[-1]
    change = last.per_second / first.per_second - 1 if first.per_second else float("inf")
    found = [Verdict(
        f"Throughput, last window vs first (within {THROUGHPUT_TOLERANCE:.0%})",
        f"{last.per_second:,.0f} vs {first.per_second:,.0f} jobs/s ({change:+.1%}); "
        f"offered {r.rate:,.0f}", abs(change) <= THROUGHPUT_TOLERANCE,
    )]  # fmt: skip
    # The first half of the windows, judged only when it reaches past one keep period and
    # pruning's lag: before that the tables are still filling up.
    early = s[: len(s) // 2]
    judged = early[-1].elapsed_s >= o.keep + PRUNE_LAG_S
    for name, attr, unit, label in _SIZES:
        peak, end = max(getattr(x, attr) for x in early), getattr(last, attr)
        found.append(Verdict(
            f"{name}: end vs largest to {early[-1].elapsed_s:.0f} s "
            f"(at most +{SIZE_GROWTH - 1:.0%})",
            f"{end / unit:,.1f} vs {peak / unit:,.1f} {label}",
            end <= SIZE_GROWTH * peak if judged else None,
        ))  # fmt: skip
    # A window's claim cost rises and falls with autovacuum's cycle (the dead entries at the
    # head of the claim index since its last run): one window against another compares two
    # points of that saw-tooth, a third of the run against a third its level.
    third = max(1, len(s) // 3)
    early_ms = statistics.median(x.claim_ms for x in s[:third])
    late_ms = statistics.median(x.claim_ms for x in s[-third:])
    found.append(Verdict(
        f"Claim cost, median of the last {third} window(s) vs the first {third} "
        f"(at most {CLAIM_GROWTH:g}x)",
        f"{late_ms:.3f} vs {early_ms:.3f} ms ({late_ms / early_ms:.2f}x); single windows "
        f"{min(x.claim_ms for x in s):.3f} to {max(x.claim_ms for x in s):.3f} ms",
        late_ms <= CLAIM_GROWTH * early_ms,
    ))  # fmt: skip
    found.append(Verdict(
        "Every job enqueued completed exactly once",
        f"{out.enqueued:,} enqueued = {out.pruned:,} pruned + {out.left:,} left "
        f"({out.left_completed:,} completed, {out.executions_completed:,} of "
        f"{out.executions:,} executions completed); {out.claimed_twice} claimed twice",
        out.exactly_once,
    ))  # fmt: skip
    return found


def render_verdicts(r: SoakReport) -> str:
    rows = [f"| {v.check} | {v.measured} | {v.word} |" for v in verdicts(r)]
    return "\n".join(["| Check | Measured | Verdict |", "| --- | --- | --- |", *rows])


def render_machine(r: SoakReport) -> str:
    m = r.machine
    load = "; ".join(", ".join(f"{x:.2f}" for x in t) for t in (m.load_before, m.load_after))
    settings = ", ".join(f"`{name}` {value}" for name, value in m.settings)
    return (
        f"- Started {r.started_at}, took {r.seconds:.0f} s.\n"
        f"- Machine: {m.cpus} x {m.cpu_model}, {m.memory_gib:.1f} GiB; load average (1, 5, "
        f"15 min) {load} (before; after).\n- Client: {m.python}.\n- {m.postgres}; {settings}."
    )
