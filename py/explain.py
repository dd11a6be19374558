"""docs/EXPLAIN.md: the claim's plan on real data and what each index is worth (codity explain).

In a scratch database next to the target (same server, dropped at the end): migrate, load
queued jobs, VACUUM ANALYZE, then EXPLAIN ANALYZE the claim's selection (the statement in
the ``picked`` CTE of sql/functions/claim.sql, read from that file) under four index
configurations. Every run is its own rolled-back transaction: the statement locks rows.

Then, unless told not to, the section on jobs waiting on parents (codity.explain_waiting).
"""

from __future__ import annotations

import logging
import os
import re
import statistics
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from codity.db.migrate import migrate, sql_dir

__all__ = [
    "claim_plan",
    "claim_plan_problems",
    "load_jobs",
    "scratch_database",
    "write_explain",
]

log = logging.getLogger(__name__)

Conn = psycopg.Connection[Any]
CLAIM_INDEX = "jobs_claim_idx"
QUEUES, LIMIT, RUNS, WARMUP = 4, 10, 50, 5
_PREPARED = "codity_claim_pick"
_SETTINGS = (
    "shared_buffers", "work_mem", "effective_cache_size", "random_page_cost", "seq_page_cost",
    "effective_io_concurrency", "jit", "max_parallel_workers_per_gather", "plan_cache_mode",
)  # fmt: skip
# Whole seconds over the last hour, so jobs tie on (priority, run_at) and the id tiebreak
# matters; one job in twenty is not due yet. 70 % at priority 0, the rest from -10 to 10.
_LOAD = """
INSERT INTO codity.jobs (queue_id, project_id, task, priority, status, run_at, max_attempts)
SELECT ids[1 + g %% pg_catalog.cardinality(ids)], q.project_id, 'explain.noop',
       CASE WHEN pg_catalog.random() < 0.7 THEN 0
            ELSE pg_catalog.floor(pg_catalog.random() * 21) - 10 END,
       'queued',
       pg_catalog.date_trunc('second', pg_catalog.now()) + pg_catalog.make_interval(
           secs => pg_catalog.floor(pg_catalog.random() * 3600)
                    * CASE WHEN pg_catalog.random() < 0.05 THEN 1 ELSE -1 END),
       3
FROM pg_catalog.generate_series(1, %(jobs)s) AS g,
     (SELECT %(ids)s::bigint[] AS ids, pg_catalog.min(project_id) AS project_id
      FROM codity.queues WHERE id = ANY (%(ids)s::bigint[])) AS q
"""
# Workflows of a root and up to 9,999 children each (the last one fewer), one workflow per
# enqueue over the last hour. The roots are queued in a queue of their own; the children
# wait on them in the measured queue at priority 1000, ahead of every queued job (-10 to
# 10), so an index that held waiting rows would have to read through all of them first.
# One edge per child (job_deps), as codity.enqueue_workflow writes them.
_SECONDARY = """
SELECT i.indexrelid::regclass::text, c.conname
FROM pg_catalog.pg_index i
LEFT JOIN pg_catalog.pg_constraint c ON c.conindid = i.indexrelid AND c.conrelid = i.indrelid
WHERE i.indrelid = 'codity.jobs'::regclass
ORDER BY 1
"""


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    median_ms: float
    shape: str
    quartiles: tuple[float, float]  # 25th and 75th percentile, ms


def claim_select() -> str:
    """The claim's selection, from sql/functions/claim.sql, with $1 queue, $2 now, $3 limit."""
    text = (sql_dir() / "functions" / "claim.sql").read_text()
    found = re.search(r"picked AS MATERIALIZED \((?P<body>.*?)\n\s*\)\n", text, re.S)
    if not found:
        raise ValueError("no `picked AS MATERIALIZED (...)` CTE in sql/functions/claim.sql")
    body = " ".join(found["body"].split())
    binds = (("v_queue.id", "$1"), ("p_now", "$2"), ("v_room", "$3"), ("p_suspects", "true"))
    for variable, param in binds:
        body = re.sub(rf"\b{re.escape(variable)}\b", param, body)
    if re.search(r"\b[pv]_\w+", body):
        raise ValueError(f"the claim's selection uses a variable this module cannot bind: {body}")
    return body


def load_jobs(conn: Conn, jobs: int, queues: int = QUEUES) -> list[int]:
    """Create ``queues`` queues and ``jobs`` queued jobs spread over them; returns queue ids."""
    ids = []
    for n in range(queues):
        row = conn.execute("SELECT queue_id FROM codity.create_queue(%s)", [f"explain-{n}"])
        ids.append(int(row.fetchall()[0][0]))
    conn.execute("SELECT pg_catalog.setseed(0.42)")
    conn.execute(_LOAD, {"jobs": jobs, "ids": ids})
    if not conn.autocommit:
        conn.commit()
    return ids


def _claim_settings(conn: Conn) -> list[tuple[str, str]]:
    """The settings claim_in_queue's SET clauses give its statements, search_path aside."""
    row = conn.execute(
        "SELECT p.proconfig FROM pg_catalog.pg_proc p WHERE p.oid ="
        " 'codity.claim_in_queue(bigint,bigint,integer,boolean,boolean,timestamptz)'::regprocedure"
    ).fetchone()
    pairs = [tuple(item.split("=", 1)) for item in (row[0] if row and row[0] else [])]
    return [(name, value) for name, value in pairs if name != "search_path"]


@contextmanager
def _claim_transaction(
    conn: Conn, queue_id: int, options: str, generic: bool
) -> Iterator[sql.SQL | sql.Composed]:
    """A rolled-back transaction with the claim's settings; yields the EXPLAIN to run in it."""
    if not conn.autocommit:  # in an open transaction, the row locks would outlive the EXPLAIN
        raise ValueError("claim plans need an autocommit connection")
    prepared = "SELECT 1 FROM pg_catalog.pg_prepared_statements WHERE name = %s"
    if not conn.execute(prepared, [_PREPARED]).fetchall():
        prepare = f"PREPARE {_PREPARED}(bigint, timestamptz, integer) AS {claim_select()}"
        conn.execute(prepare.encode())
    # Generic: under the settings claim_in_queue runs its statements with (its SET clauses),
    # so the plan checked is the plan that runs. Custom: planned with the values, to compare.
    settings = _claim_settings(conn) if generic else [("plan_cache_mode", "force_custom_plan")]
    query = sql.SQL("EXPLAIN ({}) EXECUTE {}({}, pg_catalog.now(), {})").format(
        sql.SQL(options), sql.Identifier(_PREPARED), sql.Literal(queue_id), sql.Literal(LIMIT)
    )
    with conn.transaction(force_rollback=True):
        for name, value in settings:
            conn.execute("SELECT pg_catalog.set_config(%s, %s, true)", [name, value])
        yield query


def _explain(conn: Conn, queue_id: int, options: str, *, generic: bool = False) -> Any:
    """EXPLAIN the prepared claim selection in a rolled-back transaction."""
    with _claim_transaction(conn, queue_id, options, generic) as query:
        rows = conn.execute(query).fetchall()
    return rows[0][0] if options.endswith("JSON") else "\n".join(r[0] for r in rows)


def claim_plan(conn: Conn, queue_id: int) -> dict[str, Any]:
    """The JSON plan (EXPLAIN ANALYZE, BUFFERS) of the claim's selection for one queue: the
    generic plan, the one claim_in_queue runs (it sets plan_cache_mode)."""
    options = "ANALYZE, BUFFERS, FORMAT JSON"
    plan: dict[str, Any] = _explain(conn, queue_id, options, generic=True)[0]
    return plan


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def claim_plan_problems(plan: dict[str, Any]) -> list[str]:
    """Why ``plan`` is not Limit -> LockRows -> Index Scan using jobs_claim_idx, no Sort."""
    root = plan["Plan"]
    problems = [f"{n['Node Type']} node" for n in _nodes(root) if "Sort" in n["Node Type"]]
    chain = [root]
    while chain[-1].get("Plans"):
        chain.append(chain[-1]["Plans"][0])
    types = [n["Node Type"] for n in chain]
    if types != ["Limit", "LockRows", "Index Scan"]:
        problems.append(f"plan is {' -> '.join(types)}, not Limit -> LockRows -> Index Scan")
    elif chain[-1].get("Index Name") != CLAIM_INDEX:
        problems.append(f"index scan uses {chain[-1].get('Index Name')}, not {CLAIM_INDEX}")
    return problems


def _shape(plan: dict[str, Any]) -> str:
    """Limit → LockRows → Sort (quicksort of 23,746 rows) → Seq Scan, and the like."""
    parts = []
    for node in _nodes(plan["Plan"]):
        label = node["Node Type"]
        if "Index Name" in node:
            label += f" ({node['Index Name']})"
        if "Sort Method" in node:
            label += f" ({node['Sort Method']} of {round(node['Plans'][0]['Actual Rows']):,} rows)"
        parts.append(label)
    return " → ".join(parts)


def _measure(
    conn: Conn, queue_id: int, name: str, generic: bool = False, runs: int = RUNS
) -> Result:
    options = "ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON"
    for _ in range(WARMUP):
        _explain(conn, queue_id, options, generic=generic)
    plans = [_explain(conn, queue_id, options, generic=generic)[0] for _ in range(runs)]
    times = [p["Execution Time"] for p in plans]
    quartiles = statistics.quantiles(times, n=4)
    return Result(name, statistics.median(times), _shape(plans[-1]), (quartiles[0], quartiles[2]))


def _drop_claim_index(conn: Conn) -> None:
    conn.execute(f"DROP INDEX codity.{CLAIM_INDEX}")
    conn.execute(
        "CREATE INDEX jobs_claim_noid_idx ON codity.jobs (queue_id, priority DESC, run_at)"
        " WHERE status = 'queued'"
    )


def _drop_all_indexes(conn: Conn) -> None:
    """Every index on jobs, the primary key too: CASCADE drops the foreign keys to it."""
    for index, constraint in conn.execute(_SECONDARY).fetchall():
        if constraint:
            stmt = sql.SQL("ALTER TABLE codity.jobs DROP CONSTRAINT {} CASCADE")
            conn.execute(stmt.format(sql.Identifier(constraint)))
        else:
            conn.execute(sql.SQL("DROP INDEX {}").format(sql.SQL(index)))


CONFIGURATIONS: list[tuple[str, Callable[[Conn], object]]] = [
    ("Full claim index", lambda conn: None),
    ("Without id tiebreak", _drop_claim_index),
    ("Claim index dropped", lambda conn: conn.execute("DROP INDEX codity.jobs_claim_noid_idx")),
    ("No indexes on jobs", _drop_all_indexes),
]


@contextmanager
def scratch_database(url: str, prefix: str) -> Iterator[str]:
    """A new, migrated database on ``url``'s server, dropped on exit; yields its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        parts = urlsplit(url)
        scratch = urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, ""))
        migrate(scratch)
        yield scratch
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            admin.execute(drop.format(sql.Identifier(name)))


def claim_statement_plans(conn: Conn, queue: str) -> str | None:
    """The plans of the statements a codity.claim call runs (the pick, then the UPDATE), as
    auto_explain logs them, or None when auto_explain cannot be loaded (it needs a
    superuser). Rolled back; the first claim of ``conn``'s session, so the plans are made
    for the table as it is now."""
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    try:
        conn.execute("LOAD 'auto_explain'")
    except psycopg.Error as exc:
        log.warning("auto_explain is not available (%s)", exc.sqlstate)
        return None
    with conn.transaction(force_rollback=True):
        for setting in ("log_min_duration = 0", "log_analyze = on", "log_buffers = on",
                        "log_nested_statements = on", "log_level = notice"):  # fmt: skip
            conn.execute(f"SET LOCAL auto_explain.{setting}")
        worker = conn.execute("SELECT codity.register_worker('explain', ARRAY[%s])", [queue])
        worker_id = worker.fetchall()[0][0]
        conn.execute("SELECT * FROM codity.claim(%s, %s, %s)", [worker_id, queue, LIMIT])
    found = [n for n in notices if "picked AS MATERIALIZED" in n or "WITH claimed AS" in n]
    return "\n\n".join(found) if found else None


def _machine(conn: Conn) -> list[str]:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    version = conn.execute("SELECT pg_catalog.version()").fetchall()[0][0]
    load = ", ".join(f"{n:.2f}" for n in os.getloadavg())
    lines = [f"| CPUs (nproc) | {os.cpu_count()} |", f"| Memory | {memory:.1f} GiB |",
             f"| Load average (1, 5, 15 min) before measuring | {load} |",
             f"| PostgreSQL | {version} |"]  # fmt: skip
    for name in _SETTINGS:
        value = conn.execute("SELECT pg_catalog.current_setting(%s)", [name]).fetchall()[0][0]
        lines.append(f"| `{name}` | {value} |")
    return lines


def _penalty(result: Result, base: Result) -> str:
    if result is base:
        return "—"
    ratio = result.median_ms / base.median_ms
    return f"{ratio:.{1 if ratio < 10 else 0}f}\N{MULTIPLICATION SIGN}"


def _table(results: list[Result]) -> list[str]:
    out = [
        "| Configuration | Select (median ms) | Penalty vs full index | Plan |",
        "| --- | ---: | ---: | --- |",
    ]
    for r in results:
        out.append(f"| {r.name} | {r.median_ms:.3f} | {_penalty(r, results[0])} | {r.shape} |")
    return out


_DOC = """\
# EXPLAIN: the claim's plan, measured

<!-- Generated by `./codity explain` (py/explain.py). Do not edit; regenerate. -->

What the planner does with the claim's selection on {jobs:,} queued jobs, and what each index
is worth. `./codity explain` (`--jobs N` for another size) creates a scratch database on the
same server, migrates it, loads the jobs with one `INSERT ... SELECT generate_series` over
{queues} queues (70 % at priority 0, the rest from -10 to 10; `run_at` in whole seconds over
the last hour, so jobs tie on (priority, run_at) and the id tiebreak matters; one in twenty
not due yet), runs `VACUUM ANALYZE`, measures on the first queue ({per_queue:,} jobs) and
drops the database. tests/test_generated_docs.py checks the plan's shape on every test run.

## The statement

The `picked` CTE of sql/functions/claim.sql, read from that file; `$1` is the queue id, `$2`
now, `$3` the limit ({limit} here). It runs as a prepared statement under `EXPLAIN (ANALYZE,
BUFFERS)` in a transaction that is rolled back, since `FOR UPDATE` locks what it returns.

```sql
{statement}
```

## Machine

| | |
| --- | --- |
{machine}

## The plan with the full claim index

`jobs_claim_idx (queue_id, priority DESC, run_at, id) WHERE status = 'queued'` matches the
ORDER BY term for term: the queue's first {limit} due index entries are the answer, in order.
This is the generic plan, the one that runs: `claim_in_queue` sets `plan_cache_mode =
force_generic_plan` (planning each call cost more than running it; see the function's header).

```text
{text_plan}
```

Check (Limit -> LockRows -> Index Scan using jobs_claim_idx, no Sort node anywhere): {check}.
`queue_id = $1` bounds the index range; `run_at <= $2` is tested on each index entry (priority
stands between the two columns), which skips jobs not yet due without reading the table.
The `Filter` on status is not a miss: for a `FOR UPDATE` target PostgreSQL keeps a partial
index's predicate as a filter, so that the recheck of a row changed since the snapshot
(EvalPlanQual) drops a job that is no longer queued.

## What each index is worth

Median execution time of {runs} runs after {warmup} warm-up runs, each `EXPLAIN (ANALYZE,
BUFFERS, TIMING OFF)` in its own rolled-back transaction (without per-node clock reads, which
cost most in the plans that touch most rows). Applied in order to the same data: (2) replaces
the claim index with `(queue_id, priority DESC, run_at) WHERE status = 'queued'`; (3) drops
that too, leaving the other indexes on jobs; (4) drops every index on jobs, the primary key
included: it can be dropped, `CASCADE` taking the foreign keys of job_executions,
dead_letters and scheduled_jobs with it (a scratch database). Custom plans (planned with the
call's values), for comparison:

{custom}

Generic plans (`plan_cache_mode = force_generic_plan`, which `claim_in_queue` sets for its
own statements, so these are the plans that run; left to itself, PL/pgSQL would plan the
claim with its values at every call, as the generic plan's estimate never looked cheaper):

{generic}

Without the id tiebreak, an Incremental Sort orders each group of jobs tied on (priority,
run_at): cheap while groups are small. Without a matching index, the Sort under LockRows
sorts *every* due job of the queue, not a top-N heapsort (LockRows between Limit and Sort
keeps the limit from being passed down), so the penalty grows with the backlog. The seed
measured penalties of 1.4, 16 and 69 times on its own data (0.110 ms with the full index).
{waiting}
## The plan of the whole claim

`EXPLAIN SELECT * FROM codity.claim(...)` shows one Function Scan: PL/pgSQL plans and runs the
statements of a body itself, out of EXPLAIN's sight. The `auto_explain` module (shipped with
PostgreSQL) shows them: `LOAD 'auto_explain'` (superuser) or `session_preload_libraries`, then
`auto_explain.log_min_duration = 0`, `log_nested_statements = on`, `log_analyze = on`. {auto}
"""


def _render(jobs: int, machine: list[str], text_plan: str, problems: list[str],
            custom: list[Result], generic: list[Result], whole: str | None,
            waiting: str = "") -> str:  # fmt: skip
    statement = claim_select()
    for keyword in ("FROM", "WHERE", "ORDER BY", "LIMIT"):
        statement = statement.replace(f" {keyword} ", f"\n{keyword} ")
    auto = (
        "Captured with `log_level = notice`: the pick (the `CTE picked`; the Sort under the"
        " Aggregate orders the rows picked, at most p_limit, for the arrays), then the UPDATE of"
        " the rows picked, read by the ctids the pick locked (a Tid Scan, no index; the Sort on"
        " top orders the rows returned):"
        f"\n\n```text\n{whole}\n```"
        if whole
        else "It could not be loaded here (it needs a superuser)."
    )
    return _DOC.format(
        jobs=jobs, queues=QUEUES, per_queue=jobs // QUEUES, limit=LIMIT, statement=statement,
        machine="\n".join(machine), text_plan=text_plan, runs=RUNS, warmup=WARMUP,
        check="passes" if not problems else "FAILS: " + "; ".join(problems),
        custom="\n".join(_table(custom)), generic="\n".join(_table(generic)), auto=auto,
        waiting=waiting,
    )  # fmt: skip


def write_explain(url: str, jobs: int = 100_000, waiting: int = 1_000_000) -> Path:
    """Measure in a scratch database next to ``url``'s and write docs/EXPLAIN.md; with
    ``waiting``, the claim with that many jobs waiting on parents too, in another one."""
    with (
        scratch_database(url, "codity_explain") as scratch,
        psycopg.connect(scratch, autocommit=True) as conn,
        psycopg.connect(scratch, autocommit=True) as other,
    ):
        queue_id = load_jobs(conn, jobs)[0]
        conn.execute("VACUUM ANALYZE codity.jobs")
        log.info("loaded %d jobs; measuring", jobs)
        text_plan = _explain(conn, queue_id, "ANALYZE, BUFFERS, FORMAT TEXT", generic=True)
        problems = claim_plan_problems(claim_plan(conn, queue_id))
        whole = claim_statement_plans(other, "explain-0")
        machine = _machine(conn)
        custom, generic = [], []
        for config, setup in CONFIGURATIONS:
            setup(conn)
            custom.append(_measure(conn, queue_id, config))
            generic.append(_measure(conn, queue_id, config, generic=True))
    section = ""
    if waiting > 0:  # imported here: that module builds on this one
        from codity.explain_waiting import measure_waiting, render_waiting

        section = render_waiting(measure_waiting(url, jobs, waiting), jobs)
    page = _render(jobs, machine, text_plan, problems, custom, generic, whole, section)
    path = explain_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, "utf-8")
    return path


def explain_path() -> Path:
    """docs/EXPLAIN.md of this checkout."""
    return Path(__file__).resolve().parents[1] / "docs" / "EXPLAIN.md"
