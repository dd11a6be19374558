"""``codity bench --against graphile-worker|pg-boss|all`` as tables, printed and written
into docs/PERFORMANCE.md.

Only the block between this command's BEGIN and END markers is rewritten; the analysis
around it is written by hand. The peers' own published figures are quoted beside ours,
each with its source and marked as theirs: they were taken on their machines, by their
method, and are no ratio of ours.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from codity.bench._against_model import CODITY, GRAPHILE, PGBOSS, PGQUEUER, Series
from codity.bench._against_report import series_table
from codity.bench._boss_runs import PGBOSS_DEFAULTS_JOBS, PGBOSS_PICKUP_SAMPLES
from codity.bench._model import percentile
from codity.bench._peers_model import PeersReport
from codity.bench._report import write_section

__all__ = ["BEGIN", "END", "HEADING", "PUBLISHED", "render_peers", "write_peers"]

BEGIN = "<!-- BEGIN codity bench against peers: generated; rerun the command below -->"
END = "<!-- END codity bench against peers -->"
HEADING = "## Against Graphile Worker and pg-boss (issue 28)"
X = "\N{MULTIPLICATION SIGN}"

PUBLISHED = {
    GRAPHILE: (
        "Graphile Worker's own figures (theirs, not ours; their machine, their method — "
        "perfTest/run.js, 200,000 jobs, 4 `--once` processes): ~183,000 jobs executed per "
        "second, average latency from `add_job` to job start 4.16 ms (max 13.84 ms), "
        "~202,000 jobs queued per second from one `add_jobs` call, with `concurrentJobs` 24, "
        "`maxPoolSize` 25, `localQueue: { size: 500 }`, `completeJobBatchDelay` and "
        "`failJobBatchDelay` 0 — <https://worker.graphile.org/docs/performance> (the same "
        'page says "around 196k jobs per second using a pool of 4 Graphile Worker '
        'instances").'
    ),
    PGBOSS: (
        "pg-boss publishes no throughput or latency figure of its own for 10.x; its docs "
        'state the shape of its defaults (theirs, not ours): "The default options for '
        'work() is 1 job every 2 seconds" — '
        "<https://github.com/timgit/pg-boss/blob/10.4.0/docs/api/workers.md>."
    ),
    PGQUEUER: (
        "PGQueuer's own figures are not quoted here; `./codity bench --against pgqueuer` "
        "holds the side-by-side history with it."
    ),
}


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _ratio(ours: float | None, theirs: float | None) -> str:
    if ours is None or theirs is None or theirs == 0:
        return "—"
    return f"{ours / theirs:.2f}"


def _cpu(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f} µs"


def _drain(s: Series) -> str:
    return f"{_n(s.per_second)} jobs/s ({s.config.label})"


def _row(r: PeersReport, label: str, cell: Callable[[str], str],
         number: Callable[[str], float | None]) -> str:  # fmt: skip
    """One summary row: Codity's cell, then each peer's cell and Codity / peer."""
    cells = [cell(CODITY)]
    for peer in r.peers:
        cells += [cell(peer), _ratio(number(CODITY), number(peer))]
    return f"| {label} | " + " | ".join(cells) + " |"


def _measured(
    r: PeersReport,
    label: str,
    pick: Callable[[str], Series],
    cell: Callable[[Series], str],
    number: Callable[[Series], float | None],
) -> str:
    """A row of one figure of a drain series that ``pick`` chooses per system."""
    return _row(r, label, lambda system: cell(pick(system)), lambda system: number(pick(system)))


def _kb(s: Series) -> str:
    return f"{s.wal_per_job / 1000:.2f} kB"


def _summary(r: PeersReport) -> str:
    head = [f"Codity ({r.commit})"]
    for peer in r.peers:
        head += [f"{peer} {r.version(peer)}", f"Codity / {peer}"]
    lines = ["| | " + " | ".join(head) + " |", "| --- |" + " ---: |" * len(head)]
    best2, best1 = partial(r.best, processes=2), partial(r.best, processes=1)
    lines += [
        _measured(r, "drain, 2 processes, best configuration", best2, _drain,
                  lambda s: s.per_second),
        _measured(r, "drain, 1 process, best configuration", best1, _drain,
                  lambda s: s.per_second),
        _measured(r, "drain at each system's defaults, 2 processes", r.defaults, _drain,
                  lambda s: s.per_second),
    ]  # fmt: skip
    for name, pick in (("best configuration", best2), ("defaults", r.defaults)):
        lines += [
            _measured(r, f"WAL written per job during the drain, 2 processes, {name}", pick,
                      _kb, lambda s: s.wal_per_job),
            _measured(r, f"PostgreSQL CPU per job, 2 processes, {name}", pick,
                      lambda s: _cpu(s.server_us_per_job), lambda s: s.server_us_per_job),
        ]  # fmt: skip
    batch = r.options.enqueue_batch
    lines += [
        _row(r, f"enqueue, batches of {_n(batch)}",
             lambda s: f"{_n(r.enqueue(s, batch))} jobs/s", lambda s: r.enqueue(s, batch)),
        _row(r, "enqueue, one by one",
             lambda s: f"{_n(r.enqueue(s, 1))} jobs/s", lambda s: r.enqueue(s, 1)),
        _row(r, "pickup p50 / p99, producer's commit included",
             lambda s: f"{r.pickup(s).p(50):.2f} / {r.pickup(s).p(99):.2f} ms",
             lambda s: r.pickup(s).p(50)),
    ]  # fmt: skip
    return "\n".join(lines)


def _targets(r: PeersReport) -> str:
    """Issue 28's goals, where Graphile Worker ran beside Codity."""
    if GRAPHILE not in r.peers:
        return "Graphile Worker did not run: issue 28's targets are not judged."

    def verdict(ok: bool) -> str:
        return "pass" if ok else "**miss**"

    best = r.best(CODITY, 2).per_second / r.best(GRAPHILE, 2).per_second
    wal = r.best(CODITY, 2).wal_per_job / r.best(GRAPHILE, 2).wal_per_job
    batch = r.options.enqueue_batch
    batched = r.enqueue(CODITY, batch) / r.enqueue(GRAPHILE, batch)
    single = r.enqueue(CODITY, 1) / r.enqueue(GRAPHILE, 1)
    po, pg = r.pickup(CODITY), r.pickup(GRAPHILE)
    rows = [
        (f"best drain ≥ 1.2{X} Graphile Worker's (2 processes)", f"{best:.2f}{X}", best >= 1.2),
        (f"WAL per job ≤ 1.0{X} Graphile Worker's (best, 2 processes)", f"{wal:.2f}{X}",
         wal <= 1),
    ]  # fmt: skip
    if PGQUEUER in r.peers:
        vs_pgq = r.best(CODITY, 2).per_second / r.best(PGQUEUER, 2).per_second
        rows.append((f"best drain ≥ 2.5{X} PGQueuer's (2 processes)", f"{vs_pgq:.2f}{X}",
                     vs_pgq >= 2.5))  # fmt: skip
    for peer in r.peers:
        ratio = r.defaults(CODITY).per_second / r.defaults(peer).per_second
        rows.append((f"defaults ≥ {peer}'s defaults", f"{ratio:.2f}{X}", ratio >= 1))
    rows += [
        ("pickup p50 ≤ Graphile Worker's", f"{po.p(50):.2f} vs {pg.p(50):.2f} ms",
         po.p(50) <= pg.p(50)),
        ("pickup p99 ≤ 10 ms", f"{po.p(99):.2f} ms", po.p(99) <= 10),
        ("batched enqueue ≥ Graphile Worker's", f"{batched:.2f}{X}", batched >= 1),
        ("one-by-one enqueue ≥ Graphile Worker's", f"{single:.2f}{X}", single >= 1),
    ]  # fmt: skip
    lines = ["| Target (issue 28) | Measured | Verdict |", "| --- | ---: | --- |"]
    lines += [f"| {a} | {b} | {verdict(ok)} |" for a, b, ok in rows]
    return "\n".join(lines)


_TIMED = {
    CODITY: "Codity: `codity worker`, first claim to last completion on the database's clock.",
    PGQUEUER: "PGQueuer: `pgqueuer.run`, first pick to last completion from its log table.",
    GRAPHILE: "Graphile Worker: `runOnce` (what `graphile-worker --once` and its perfTest run), "
    "which deletes each job as it completes it: from the first handler's start to the last "
    "process's `runOnce` returning (every completion batch committed), on the machine's clock.",
    PGBOSS: "pg-boss: `work()`, its `started_on` (first fetch) to its `completed_on` (last "
    "completion), on the database's clock.",
}
_ONCE = {
    CODITY: "Codity one completed job and one execution per job",
    PGQUEUER: "PGQueuer one pick and one completion per job in its log",
    GRAPHILE: "Graphile Worker an empty jobs table and N handler runs of N distinct ids",
    PGBOSS: "pg-boss N completed rows, none retried, and N handler runs of N distinct ids",
}
_CLIENT = {
    CODITY: "Codity: psycopg, `codity.enqueue` / `codity.enqueue_many`",
    PGQUEUER: "PGQueuer: `Queries.enqueue` on asyncpg",
    GRAPHILE: "Graphile Worker: WorkerUtils `addJob` / `addJobs`",
    PGBOSS: "pg-boss: `send` / `insert`",
}
_SHAPES = {
    GRAPHILE: "Graphile Worker's fastest is its docs' performance preset (`localQueue` 500, "
    "`completeJobBatchDelay` and `failJobBatchDelay` 0, `maxPoolSize` one more than the "
    "concurrency); its defaults are concurrency 1, no local queue, a completion statement "
    "per job, a 2 s poll beside LISTEN.",
    PGBOSS: "pg-boss's fastest is a large `batchSize`, several `work()` loops per process and "
    "the shortest polling interval it accepts (0.5 s): each loop fetches, runs the batch, "
    "then waits out its interval, so a drain no larger than one round of fetches "
    f"(`batchSize` {X} loops {X} processes) never shows the interval and overstates its rate. "
    "Its defaults (`batchSize` 1, one loop, 2 s) finish one "
    f"job per 2 s per process, so its defaults drain is {PGBOSS_DEFAULTS_JOBS} jobs, and "
    "its per-job WAL and CPU there hold the server's background over that span.",
}


def _settings(r: PeersReport, command: str) -> str:
    o, m = r.options, r.machine
    systems = (CODITY, *r.peers)
    load = ", ".join(f"{x:.2f}" for x in m.load_before)
    after = ", ".join(f"{x:.2f}" for x in m.load_after)
    pick = dict(m.settings)
    shown = ("synchronous_commit", "fsync", "full_page_writes", "shared_buffers", "max_wal_size")
    server = ", ".join(f"`{k}` {pick[k]}" for k in shown if k in pick)
    after_ms = {p.system: percentile(p.after_commit_ms, 50) for p in r.pickups}
    versions = ", ".join(f"{s} {v}" for s, v in r.versions) or "no peer"
    polled = (
        f" pg-boss (a 2 s poller at its defaults, no LISTEN): {PGBOSS_PICKUP_SAMPLES} at "
        "most, each sent once the one before has started, 10 to 50 ms and a random part of "
        "2 s later, so that each meets an idle worker at any point of its interval."
        if PGBOSS in r.peers
        else ""
    )
    lines = [
        f"- `{command}`; started {r.started_at}, took {r.seconds:.0f} s; Codity at commit "
        f"{r.commit}; {versions}"
        + (" (`--quick`: small sizes, one round; figures are rough)" if o.quick else "") + ".",
        f"- Machine: {m.cpus} {X} {m.cpu_model}, {m.memory_gib:.1f} GiB; load average "
        f"{load} before, {after} after. {m.postgres}; {server}.",
        f"- Drain: {_n(o.jobs)} no-op jobs enqueued up front in batches of 1,000 (then "
        "`VACUUM ANALYZE`), drained by real worker processes started together at a start "
        f"line; {o.rounds} round(s), every configuration once per round; medians. "
        + " ".join(_TIMED[s] for s in systems)
        + " WAL: `pg_current_wal_insert_lsn()` before the workers are let go and after the "
        "last job. CPU: /proc, every PostgreSQL process and the worker processes.",
        "- Exactly once, checked after every drain (a drain that does not add up fails the "
        "run): " + "; ".join(_ONCE[s] for s in systems) + ".",
        f"- Enqueue: {_n(o.enqueue_single)} one by one, {_n(o.enqueue_batched)} in batches of "
        f"{_n(o.enqueue_batch)}, each system's own client ("
        + "; ".join(_CLIENT[s] for s in systems) + "); medians of the rounds.",
        f"- Pickup: {o.pickup_samples} jobs one at a time, 10 to 50 ms apart, one idle worker "
        "at its defaults, from just before the producer's enqueue to the handler's first "
        f"line.{polled} From the producer's acknowledged commit, p50 "
        + ", ".join(f"{k} {v:.2f} ms" for k, v in after_ms.items()) + ".",
        *(f"- {_SHAPES[s]}" for s in r.peers if s in _SHAPES),
    ]  # fmt: skip
    return "\n".join(lines)


def render_peers(r: PeersReport, command: str) -> str:
    parts = [_summary(r)]
    if r.unavailable:
        parts.append("### Not run\n\n" + "\n".join(f"- {s}" for _, s in r.unavailable))
    parts += [
        "### Every configuration\n\n" + series_table(r.series),
        "### Targets\n\n" + _targets(r),
        "### The peers' own published figures\n\n"
        + "\n".join(f"- {PUBLISHED[p]}" for p in r.peers),
        "### Machine and settings\n\n" + _settings(r, command),
    ]
    return "\n\n".join(parts)


def write_peers(r: PeersReport, command: str, path: Path | None = None) -> Path:
    """Replace this command's block of docs/PERFORMANCE.md, or append the section."""
    rerun = f"Generated by `{command}`; do not edit by hand."
    block = "\n\n".join([BEGIN, rerun, render_peers(r, command), END])
    return write_section(block, BEGIN, END, HEADING, path)
