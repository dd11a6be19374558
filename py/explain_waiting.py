"""docs/EXPLAIN.md's section on workflows: the claim before and after a million jobs waiting
on parents join its queue (issue 27).

In a scratch database of its own, loaded like the first one (codity.explain): the claim's
figures on one queue, then that many workflow nodes (status waiting, at priority 1000, ahead
of every queued job) added to the same queue with their workflows, roots and edges, then the
figures again. The claim index leaves waiting nodes out, so the claim must run the same plan
and read the same index entries and buffers; the section says whether it did.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from codity.explain import (
    Conn,
    Result,
    _claim_transaction,
    _explain,
    _measure,
    _nodes,
    _shape,
    load_jobs,
    scratch_database,
)

__all__ = [
    "WAITING",
    "Reads",
    "Waiting",
    "claim_reads",
    "load_waiting",
    "measure_waiting",
    "render_waiting",
    "waiting_problems",
]

log = logging.getLogger(__name__)

WAITING, WAITING_RUNS = 1_000_000, 200
_CHILDREN = 9_999  # a workflow holds at most 10,000 nodes: a root and 9,999 children

_LOAD_WAITING = """
WITH w AS (
    SELECT w, LEAST(%(children)s::integer, %(waiting)s::integer - w * %(children)s::integer)
              AS children,
           pg_catalog.date_trunc('second', pg_catalog.now())
           - pg_catalog.make_interval(secs => 3600 * (w + 1) / %(workflows)s::integer) AS at
    FROM pg_catalog.generate_series(0, %(workflows)s::integer - 1) AS w
), workflows AS (
    INSERT INTO codity.workflows (project_id, name, nodes, edges, created_at)
    SELECT q.project_id, 'explain-' || w.w, 1 + w.children, w.children, w.at
    FROM w, codity.queues q WHERE q.id = %(queue)s
    ORDER BY w.w
    RETURNING id, name, project_id
), roots AS (
    INSERT INTO codity.jobs (queue_id, project_id, task, status, run_at, max_attempts,
                             workflow_id, node_key, deps_remaining, created_at)
    SELECT %(roots)s, f.project_id, 'explain.root', 'queued', w.at, 3, f.id, 'root', 0, w.at
    FROM workflows f JOIN w ON f.name = 'explain-' || w.w
    RETURNING queue_id, id, project_id, workflow_id, run_at
), children AS (
    INSERT INTO codity.jobs (queue_id, project_id, task, priority, status, run_at,
                             max_attempts, workflow_id, node_key, deps_remaining, created_at)
    SELECT %(queue)s, r.project_id, 'explain.node', 1000, 'waiting', r.run_at, 3,
           r.workflow_id, 'n' || k, 1, r.run_at
    FROM roots r
    JOIN workflows f ON f.id = r.workflow_id
    JOIN w ON f.name = 'explain-' || w.w,
    LATERAL pg_catalog.generate_series(1, w.children) AS k
    RETURNING queue_id, id, workflow_id
)
INSERT INTO codity.job_deps (queue_id, parent_id, child_queue_id, child_id, child_depth,
                             project_id, workflow_id)
SELECT r.queue_id, r.id, c.queue_id, c.id, 1, r.project_id, c.workflow_id
FROM children c JOIN roots r USING (workflow_id)
"""
_ENTRIES = """
SELECT pg_catalog.sum(pg_catalog.pg_stat_get_xact_tuples_returned(i.indexrelid))::bigint
FROM pg_catalog.pg_index i WHERE i.indrelid = 'codity.jobs'::regclass
"""


@dataclass(frozen=True, slots=True)
class Reads:
    """What one run of the claim's selection read (its generic plan, EXPLAIN ANALYZE)."""

    shape: str  # Limit → LockRows → Index Scan (jobs_claim_idx)
    entries: int  # index entries returned by the scans of jobs' indexes
    buffers: int  # shared buffers hit or read by the execution
    removed: int  # rows the plan read and dropped by a filter
    rows: int  # rows returned
    cost: float  # the planner's estimated total cost


def load_waiting(conn: Conn, queue_id: int, waiting: int) -> int:
    """Add ``waiting`` jobs waiting on a parent to queue ``queue_id``: workflow nodes (status
    waiting, deps_remaining 1) at priority 1000, their roots queued in a queue of their own
    (explain-roots), with their workflows and edges; one statement. Returns the workflows."""
    roots = conn.execute("SELECT queue_id FROM codity.create_queue('explain-roots')")
    workflows = -(-waiting // _CHILDREN)
    conn.execute(
        _LOAD_WAITING,
        {"waiting": waiting, "children": _CHILDREN, "workflows": workflows, "queue": queue_id,
         "roots": roots.fetchall()[0][0]},
    )  # fmt: skip
    if not conn.autocommit:
        conn.commit()
    return workflows


def claim_reads(conn: Conn, queue_id: int) -> Reads:
    """What the generic plan of the claim's selection reads for one queue: its shape, the
    index entries its scans return (the backend's statistics of the transaction), buffers."""
    with _claim_transaction(conn, queue_id, "ANALYZE, BUFFERS, FORMAT JSON", True) as query:
        before = conn.execute(_ENTRIES).fetchall()[0][0] or 0
        plan = conn.execute(query).fetchall()[0][0][0]
        after = conn.execute(_ENTRIES).fetchall()[0][0] or 0
    root = plan["Plan"]
    return Reads(
        shape=_shape(plan), entries=after - before,
        buffers=root.get("Shared Hit Blocks", 0) + root.get("Shared Read Blocks", 0),
        removed=round(sum(n.get("Rows Removed by Filter", 0) for n in _nodes(root))),
        rows=round(root["Actual Rows"]), cost=root["Total Cost"],
    )  # fmt: skip


def waiting_problems(before: Reads, after: Reads) -> list[str]:
    """Why the claim with waiting jobs present (``after``) is not the claim without them."""
    problems = []
    if after.shape != before.shape:
        problems.append(f"plan is {after.shape}, was {before.shape}")
    for name, label in (("entries", "index entries read"), ("buffers", "buffers read"),
                        ("removed", "rows dropped by a filter")):  # fmt: skip
        if getattr(after, name) > getattr(before, name):
            problems.append(f"{label}: {getattr(after, name):,}, was {getattr(before, name):,}")
    if after.rows != before.rows:
        problems.append(f"returns {after.rows} rows, was {before.rows}")
    return problems


@dataclass(frozen=True, slots=True)
class Figures:
    """The claim on one queue at one moment: what it reads, how long it takes, its plan."""

    jobs: int  # rows in codity.jobs
    in_queue: int  # of which in the measured queue
    pages: int  # of codity.jobs, as the planner knows them (pg_class.relpages)
    reads: Reads
    generic: Result
    custom: Result
    text_plan: str


@dataclass(frozen=True, slots=True)
class Waiting:
    """The claim without and with jobs waiting on parents in its queue."""

    waiting: int
    workflows: int
    predicate: str  # of jobs_claim_idx
    load_s: float
    vacuum_s: float
    before: Figures
    after: Figures


_COUNT = """
SELECT pg_catalog.count(*), pg_catalog.count(*) FILTER (WHERE queue_id = %s),
       (SELECT relpages FROM pg_catalog.pg_class WHERE oid = 'codity.jobs'::regclass)
FROM codity.jobs
"""
_PREDICATE = """
SELECT pg_catalog.pg_get_expr(i.indpred, i.indrelid) FROM pg_catalog.pg_index i
WHERE i.indexrelid = 'codity.jobs_claim_idx'::regclass
"""


def _figures(conn: Conn, queue_id: int, name: str) -> Figures:
    """Timings first (their warm-up warms the cache), then the reads and the text plan. A
    CHECKPOINT before, where allowed, so that writing out a load does not overlap the runs."""
    try:
        conn.execute("CHECKPOINT")
    except psycopg.errors.InsufficientPrivilege:
        log.warning("no CHECKPOINT before measuring: it needs pg_checkpoint or a superuser")
    generic = _measure(conn, queue_id, name, generic=True, runs=WAITING_RUNS)
    custom = _measure(conn, queue_id, name, runs=WAITING_RUNS)
    jobs, in_queue, pages = conn.execute(_COUNT, [queue_id]).fetchall()[0]
    text = _explain(conn, queue_id, "ANALYZE, BUFFERS, FORMAT TEXT", generic=True)
    return Figures(jobs, in_queue, pages, claim_reads(conn, queue_id), generic, custom, text)


def measure_waiting(url: str, jobs: int, waiting: int) -> Waiting:
    """In a scratch database of its own (the first one's indexes are dropped by then)."""
    with (
        scratch_database(url, "codity_explain") as scratch,
        psycopg.connect(scratch, autocommit=True) as conn,
    ):
        queue_id = load_jobs(conn, jobs)[0]
        conn.execute("VACUUM ANALYZE codity.jobs")
        before = _figures(conn, queue_id, "Without waiting jobs")
        started = time.monotonic()
        workflows = load_waiting(conn, queue_id, waiting)
        loaded = time.monotonic()
        for table in ("jobs", "job_deps", "workflows"):
            conn.execute(f"VACUUM ANALYZE codity.{table}".encode())
        vacuumed = time.monotonic()
        log.info("added %d waiting jobs in %.1f s; measuring", waiting, loaded - started)
        after = _figures(conn, queue_id, f"With {waiting:,} waiting")
        predicate = conn.execute(_PREDICATE).fetchall()[0][0]
    return Waiting(
        waiting, workflows, predicate, loaded - started, vacuumed - loaded, before, after
    )


def _outline(text_plan: str) -> list[str]:
    """A text plan's nodes and conditions: no estimates, times, buffers or planning lines."""
    lines = []
    for line in text_plan.splitlines():
        if line.startswith("Planning"):
            break
        line = re.sub(r"  \(cost=[^)]*\)| \(actual [^)]*\)", "", line)
        if not line.strip().startswith("Buffers:"):
            lines.append(line)
    return lines


_WAITING_DOC = """
## With {waiting:,} jobs waiting on parents

Issue 27 asks that workflows cost a plain job nothing: the claim's plan and its cost stay as
they are with 1,000,000 jobs waiting on parents. `./codity explain --waiting N` ({waiting:,}
here; 0 leaves this section out) loads the same {jobs:,} queued jobs into a second scratch
database, measures the claim on the same queue, then adds {waiting:,} workflow nodes waiting
on a parent, all in the measured queue, at priority 1000, ahead of every queued job, and
due: in one `INSERT ... SELECT generate_series` statement, {workflows:,} `codity.workflows`
rows (a root and up to 9,999 children each), their roots queued in a queue of their own, the
children in codity.jobs with `status = 'waiting'`, `workflow_id`, `node_key` and
`deps_remaining = 1`, and one `codity.job_deps` edge a child ({load_s:.1f} s). Then `VACUUM
ANALYZE` ({vacuum_s:.1f} s) and the same measurements. An index that held waiting rows would
read through all {waiting:,} before its first queued job. Index entries are those the scans
of jobs' indexes returned (`pg_stat_get_xact_tuples_returned`, read in the transaction of
the run); times as in the tables above, but {runs} runs after a `CHECKPOINT` (the load's
pages written out first), median and 25th to 75th percentile.

| | Without waiting jobs | With {waiting:,} waiting |
| --- | ---: | ---: |
{table}

Without waiting jobs:

```text
{before}
```

With {waiting:,} waiting:

```text
{after}
```

{conclusion}
"""


def _waiting_table(w: Waiting) -> list[str]:
    b, a = w.before, w.after

    def row(label: str, value: Callable[[Figures], str]) -> str:
        return f"| {label} | {value(b)} | {value(a)} |"

    def ms(r: Result) -> str:
        return f"{r.median_ms:.3f} ({r.quartiles[0]:.3f} to {r.quartiles[1]:.3f})"

    return [
        row("Jobs (in the measured queue)", lambda f: f"{f.jobs:,} ({f.in_queue:,})"),
        row("Plan (generic, the one that runs)", lambda f: f.reads.shape),
        row("Rows returned", lambda f: f"{f.reads.rows:,}"),
        row("Index entries read", lambda f: f"{f.reads.entries:,}"),
        row("Rows read and dropped by a filter", lambda f: f"{f.reads.removed:,}"),
        row("Shared buffers (hit + read)", lambda f: f"{f.reads.buffers:,}"),
        row("Pages of codity.jobs (relpages)", lambda f: f"{f.pages:,}"),
        row("Planner's estimated total cost", lambda f: f"{f.reads.cost:,.2f}"),
        row("Generic plan, median ms (25th to 75th percentile)", lambda f: ms(f.generic)),
        row("Custom plan (for comparison)", lambda f: f.custom.shape),
        row("Custom plan, median ms (25th to 75th percentile)", lambda f: ms(f.custom)),
    ]  # fmt: skip


def _waiting_conclusion(w: Waiting) -> str:
    """What the figures say, whatever they say."""
    b, a = w.before, w.after
    problems = waiting_problems(b.reads, a.reads)
    if problems:
        return (f"Conclusion: with {w.waiting:,} jobs waiting, the claim does not do the same"
                f" work: {'; '.join(problems)}.")  # fmt: skip

    def same(after: int, before: int, what: str) -> str:
        return (
            f"the same {after:,} {what}"
            if after == before
            else f"{after:,} {what} ({before:,} without)"
        )

    same_text = _outline(b.text_plan) == _outline(a.text_plan)
    words = [
        f"Conclusion: with {w.waiting:,} jobs waiting in the queue, ahead of every queued job,"
        f" the claim runs the same plan ({a.reads.shape}) and reads"
        f" {same(a.reads.entries, b.reads.entries, 'index entries')} and"
        f" {same(a.reads.buffers, b.reads.buffers, 'buffers')}, "
        + ("dropping no row by a filter" if a.reads.removed == 0
           else f"dropping {same(a.reads.removed, b.reads.removed, 'rows')} by a filter")
        + f": `jobs_claim_idx` holds only the rows of its predicate, `{w.predicate}`, so the"
        " claim never meets a waiting job. The two text plans are "
        + ("identical apart from estimates, times and buffer counts."
           if same_text else "NOT identical in their nodes and conditions (compare them above).")
    ]  # fmt: skip
    if a.reads.cost > b.reads.cost and a.pages > b.pages:
        words.append(
            f" The planner's estimated cost goes from {b.reads.cost:,.2f} to"
            f" {a.reads.cost:,.2f}: it prices the index scan's heap fetches by the size of the"
            f" whole table ({b.pages:,} pages, then {a.pages:,}), which the waiting jobs grow;"
            " the buffers the claim reads do not."
        )
    elif a.reads.cost != b.reads.cost:
        words.append(f" The planner's estimated cost goes from {b.reads.cost:,.2f} to"
                     f" {a.reads.cost:,.2f}.")  # fmt: skip
    slower: list[str] = []
    faster: list[str] = []
    for label, before, after in (("generic", b.generic, a.generic),
                                 ("custom", b.custom, a.custom)):  # fmt: skip
        low, high = before.quartiles
        inside = low <= after.median_ms <= high
        if after.median_ms > high:
            slower.append(label)
        elif after.median_ms < low:
            faster.append(label)
        words.append(
            f" The {label} plan's median time goes from {before.median_ms:.3f} to"
            f" {after.median_ms:.3f} ms ({after.median_ms / before.median_ms - 1:+.0%}),"
            f" {'inside' if inside else 'outside'} the 25th to 75th percentile range of the"
            f" runs without waiting jobs ({low:.3f} to {high:.3f} ms)."
        )
    if slower:
        words.append(
            f" So the waiting jobs cost the claim no work (entries, buffers), but the"
            f" {' and '.join(slower)} plan{'s' if len(slower) > 1 else ''} took longer with"
            " them, by more than the spread of the runs; one run of this command does not"
            " tell whether the machine or the claim made the difference."
        )
    else:
        lower = (f", and the {' and '.join(faster)} plan{'s' if len(faster) > 1 else ''}"
                 " even took less time with them, by more than the spread of the runs"
                 if faster else ", and times within the spread of the runs")  # fmt: skip
        words.append(
            f" So the waiting jobs cost the claim nothing measured here: the same work{lower}."
        )
    return "".join(words)


def render_waiting(w: Waiting, jobs: int) -> str:
    return _WAITING_DOC.format(
        waiting=w.waiting, jobs=jobs, workflows=w.workflows, load_s=w.load_s,
        vacuum_s=w.vacuum_s, runs=WAITING_RUNS, table="\n".join(_waiting_table(w)),
        before=w.before.text_plan, after=w.after.text_plan, conclusion=_waiting_conclusion(w),
    )  # fmt: skip
