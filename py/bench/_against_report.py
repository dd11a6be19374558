"""``codity bench --against pgqueuer`` as tables, printed and written into docs/PERFORMANCE.md.

Only the block between this command's own BEGIN and END markers is rewritten; the
analysis around it is written by hand, as for ``codity bench``'s block. A document
without the markers gets the section appended at its end.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from codity.bench._against_model import CODITY, PGQUEUER, AgainstReport, Series
from codity.bench._ceiling import CEILINGS, CLIENTS
from codity.bench._model import percentile
from codity.bench._report import write_section

__all__ = [
    "BEGIN",
    "END",
    "HEADING",
    "render_against",
    "render_block",
    "series_table",
    "write_against",
]

BEGIN = "<!-- BEGIN codity bench against pgqueuer: generated; rerun the command below -->"
END = "<!-- END codity bench against pgqueuer -->"
HEADING = "## Against PGQueuer (issue 12)"
X = "\N{MULTIPLICATION SIGN}"


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _ratio(ours: float | None, theirs: float | None) -> str:
    if ours is None or theirs is None or theirs == 0:
        return "—"
    return f"{ours / theirs:.2f}"


def _cpu(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f} µs"


def _total_cpu(s: Series) -> float | None:
    server = s.server_us_per_job
    return None if server is None else server + s.workers_us_per_job


def _drain(s: Series) -> str:
    return f"{_n(s.per_second)} jobs/s ({s.config.label})"


def _summary(r: AgainstReport) -> list[tuple[str, str, str, str]]:
    rows = []
    for processes in (2, 1):
        ours, theirs = r.best(CODITY, processes), r.best(PGQUEUER, processes)
        rows.append((f"drain, {processes} process{'es' if processes > 1 else ''}, best "
                     "configuration", _drain(ours), _drain(theirs),
                     _ratio(ours.per_second, theirs.per_second)))  # fmt: skip
    ours, theirs = r.defaults(CODITY), r.defaults(PGQUEUER)
    rows.append(("drain at each system's defaults, 2 processes", _drain(ours), _drain(theirs),
                 _ratio(ours.per_second, theirs.per_second)))  # fmt: skip
    for name, ours, theirs in (
        ("best configuration", r.best(CODITY, 2), r.best(PGQUEUER, 2)),
        ("defaults", r.defaults(CODITY), r.defaults(PGQUEUER)),
    ):
        rows += [
            (f"WAL written per job during the drain, 2 processes, {name}",
             f"{ours.wal_per_job / 1000:.2f} kB", f"{theirs.wal_per_job / 1000:.2f} kB",
             _ratio(ours.wal_per_job, theirs.wal_per_job)),
            (f"PostgreSQL CPU per job, 2 processes, {name}", _cpu(ours.server_us_per_job),
             _cpu(theirs.server_us_per_job),
             _ratio(ours.server_us_per_job, theirs.server_us_per_job)),
        ]  # fmt: skip
    best_ours, best_theirs = r.best(CODITY, 2), r.best(PGQUEUER, 2)
    rows.append(("workers' CPU per job, 2 processes, best configuration",
                 _cpu(best_ours.workers_us_per_job), _cpu(best_theirs.workers_us_per_job),
                 _ratio(best_ours.workers_us_per_job, best_theirs.workers_us_per_job)))  # fmt: skip
    # With both systems' processes keeping every core busy, this ratio is what bounds the
    # 2-process drain's (docs/PERFORMANCE.md, "The payload index and the collector").
    ours_cpu, theirs_cpu = _total_cpu(best_ours), _total_cpu(best_theirs)
    rows.append(("PostgreSQL and workers' CPU per job, 2 processes, best configuration",
                 _cpu(ours_cpu), _cpu(theirs_cpu), _ratio(ours_cpu, theirs_cpu)))  # fmt: skip
    batch = r.options.enqueue_batch
    for label, size in ((f"enqueue, batches of {_n(batch)}", batch), ("enqueue, one by one", 1)):
        ours_e, theirs_e = r.enqueue(CODITY, size), r.enqueue(PGQUEUER, size)
        rows.append((label, f"{_n(ours_e)} jobs/s", f"{_n(theirs_e)} jobs/s",
                     _ratio(ours_e, theirs_e)))  # fmt: skip
    po, pt = r.pickup(CODITY), r.pickup(PGQUEUER)
    rows.append(("pickup p50 / p99, producer's commit included",
                 f"{po.p(50):.2f} / {po.p(99):.2f} ms", f"{pt.p(50):.2f} / {pt.p(99):.2f} ms",
                 f"{_ratio(po.p(50), pt.p(50))} / {_ratio(po.p(99), pt.p(99))}"))  # fmt: skip
    return rows


def _summary_table(r: AgainstReport) -> str:
    lines = [f"| | Codity ({r.commit}) | PGQueuer {r.pgqueuer_version} | Codity / PGQueuer |",
             "| --- | ---: | ---: | ---: |"]  # fmt: skip
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in _summary(r)]
    return "\n".join(lines)


def _matrix(r: AgainstReport) -> str:
    return series_table(r.series)


def series_table(series: Iterable[Series]) -> str:
    """Every configuration drained, one row each (``--against`` of any peer)."""
    lines = ["| System | Processes | Configuration | jobs/s (median) | Rounds (jobs/s) | "
             "WAL per job | PostgreSQL CPU per job | Workers' CPU per job |",
             "| --- | ---: | --- | ---: | --- | ---: | ---: | ---: |"]  # fmt: skip
    for s in series:
        rounds = ", ".join(_n(x.per_second) for x in s.runs)
        lines.append(f"| {s.config.system} | {s.config.processes} | {s.config.label} | "
                     f"{_n(s.per_second)} | {rounds} | {s.wal_per_job / 1000:.2f} kB | "
                     f"{_cpu(s.server_us_per_job)} | {_cpu(s.workers_us_per_job)} |")  # fmt: skip
    return "\n".join(lines)


def _ceiling(r: AgainstReport) -> str:
    ours = r.best(CODITY, CLIENTS)
    lines = [f"| Drain, {CLIENTS} pgbench clients, 100 jobs per claim | jobs/s (median) | "
             "WAL per job | PostgreSQL CPU per job | Codity's best worker drain as a share |",
             "| --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for name in CEILINGS:
        c = r.ceiling(name)
        if c is None:
            continue
        share = ours.per_second / c.per_second
        lines.append(f"| {name} | {_n(c.per_second)} | {c.wal_per_job / 1000:.2f} kB | "
                     f"{_cpu(c.server_us_per_job)} | {share:.0%} |")  # fmt: skip
    lines.append(f"| Codity's worker ({CLIENTS} processes, {ours.config.label}) | "
                 f"{_n(ours.per_second)} | {ours.wal_per_job / 1000:.2f} kB | "
                 f"{_cpu(ours.server_us_per_job)} | 100% |")  # fmt: skip
    return "\n".join(lines)


def _targets(r: AgainstReport) -> str:
    def verdict(ok: bool) -> str:
        return "pass" if ok else "**miss**"

    best = {p: r.best(CODITY, p).per_second / r.best(PGQUEUER, p).per_second for p in (1, 2)}
    defaults = r.defaults(CODITY).per_second / r.defaults(PGQUEUER).per_second
    wal = r.best(CODITY, 2).wal_per_job / r.best(PGQUEUER, 2).wal_per_job
    batch = r.options.enqueue_batch
    batched = r.enqueue(CODITY, batch) / r.enqueue(PGQUEUER, batch)
    single = r.enqueue(CODITY, 1) / r.enqueue(PGQUEUER, 1)
    po, pt = r.pickup(CODITY), r.pickup(PGQUEUER)
    rows = [
        (f"best drain ≥ 1.5{X} PGQueuer's, 1 process", f"{best[1]:.2f}{X}", best[1] >= 1.5),
        (f"best drain ≥ 1.5{X} PGQueuer's, 2 processes", f"{best[2]:.2f}{X}", best[2] >= 1.5),
        ("drain at defaults ≥ PGQueuer's at its defaults", f"{defaults:.2f}{X}", defaults >= 1),
        ("WAL per job ≤ PGQueuer's (best, 2 processes)", f"{wal:.2f}{X}", wal <= 1),
        ("batched enqueue ≥ PGQueuer's", f"{batched:.2f}{X}", batched >= 1),
        ("one-by-one enqueue ≥ PGQueuer's", f"{single:.2f}{X}", single >= 1),
        ("pickup p50 ≤ PGQueuer's", f"{po.p(50):.2f} vs {pt.p(50):.2f} ms", po.p(50) <= pt.p(50)),
        ("pickup p99 ≤ 10 ms", f"{po.p(99):.2f} ms", po.p(99) <= 10),
    ]
    lines = ["| Target (issue 12) | Measured | Verdict |", "| --- | ---: | --- |"]
    lines += [f"| {a} | {b} | {verdict(ok)} |" for a, b, ok in rows]
    return "\n".join(lines)


def _settings(r: AgainstReport) -> str:
    o, m = r.options, r.machine
    load = ", ".join(f"{x:.2f}" for x in m.load_before)
    after = ", ".join(f"{x:.2f}" for x in m.load_after)
    pick = {name: value for name, value in m.settings}
    shown = ("synchronous_commit", "fsync", "full_page_writes", "shared_buffers", "max_wal_size")
    server = ", ".join(f"`{k}` {pick[k]}" for k in shown if k in pick)
    after_ms = {p.system: percentile(p.after_commit_ms, 50) for p in r.pickups}
    return "\n".join([
        f"- Started {r.started_at}, took {r.seconds:.0f} s; Codity at commit {r.commit}, "
        f"PGQueuer {r.pgqueuer_version} (asyncpg, in its own virtual environment)"
        + (" (`--quick`: small sizes, one round; figures are rough)" if o.quick else "") + ".",
        f"- Machine: {m.cpus} {X} {m.cpu_model}, {m.memory_gib:.1f} GiB; load average "
        f"{load} before, {after} after. {m.postgres}; {server}.",
        f"- Drain: {_n(o.jobs)} no-op jobs enqueued up front in batches of 1,000 (then "
        "`VACUUM ANALYZE`), drained by real worker processes (`codity worker`; PGQueuer's "
        "`pgqueuer.run`, what `pgq run` runs) started together; time from the first claim "
        f"to the last completion, on the database's clock; {o.rounds} round(s), every "
        "configuration once per round; medians. "
        "WAL: `pg_current_wal_insert_lsn()` before the workers are let go and after the last job. "
        "CPU: /proc, every PostgreSQL process; the workers' from the same readings.",
        f"- Enqueue: {_n(o.enqueue_single)} one by one, {_n(o.enqueue_batched)} in batches of "
        f"{_n(o.enqueue_batch)}, each system's own client (Codity: psycopg, `codity.enqueue` / "
        "`codity.enqueue_many`; PGQueuer: `Queries.enqueue` on asyncpg); medians of the rounds.",
        f"- Pickup: {o.pickup_samples} jobs one at a time, 10 to 50 ms apart, one idle worker "
        "at its defaults, from just before the producer's enqueue to the handler's first "
        "line (same clock); from the producer's acknowledged commit, p50 "
        + ", ".join(f"{k} {v:.2f} ms" for k, v in after_ms.items()) + ".",
        f"- Ceiling: the same {_n(o.jobs)} jobs per drain, once per round, by pgbench "
        "(`-M prepared`) with no worker: Codity's functions in the worker's own two "
        "statements (claim with `p_start`, then `complete_many` with its relaxed commit), a "
        "minimal table claimed by `UPDATE … FOR UPDATE SKIP LOCKED` and deleted on "
        "completion, and one drained by `DELETE … RETURNING` (at most once); wall clock "
        "around pgbench.",
    ])  # fmt: skip


def render_against(r: AgainstReport) -> str:
    return "\n\n".join([
        _summary_table(r),
        "### Every configuration\n\n" + _matrix(r),
        "### The ceiling: the same drain with no worker\n\n" + _ceiling(r),
        "### Targets\n\n" + _targets(r),
        "### Machine and settings\n\n" + _settings(r),
    ])  # fmt: skip


def render_block(r: AgainstReport) -> str:
    rerun = "Generated by `./codity bench --against pgqueuer`; do not edit by hand."
    return "\n\n".join([BEGIN, rerun, render_against(r), END])


def write_against(r: AgainstReport, path: Path | None = None) -> Path:
    """Replace this command's block of docs/PERFORMANCE.md, or append the section."""
    return write_section(render_block(r), BEGIN, END, HEADING, path)
