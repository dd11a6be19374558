"""DESIGN.md's "Room to scale out": the rules that a query of the catalogue can check.

The job tables are to be distributed by queue_id past one primary (Citus). What the
catalogue can say is checked here, each check with a test that breaks the rule on purpose
inside a rolled-back transaction and sees the check name it:
- every table that carries queue_id is classified: a job table (distributed by queue) or a
  small one, so a new table cannot slip past the rules below;
- rule 1: every hot transition has a body that takes the queue's id as its first argument,
  p_queue_id bigint (the functions by name or by job id are wrappers over them);
- rule 2: every statement of those bodies, and of the private helpers they call, that reads
  or writes a job table names the queue: alias.queue_id = ... (a statement-level check of
  the function source, comments left out);
- rule 10: none of those bodies or helpers raises a NOTIFY (the callers do);
- rule 3: no function body has an INSERT into a job table inside a CTE;
- rule 4: every primary and unique key of a job table leads with queue_id; a foreign key
  between job tables includes queue_id and is CASCADE or NO ACTION; no foreign key points
  from any other table at a job table;
- rule 7: no function signature uses the row type of a table that may become a reference
  table (every codity table but the job tables);
- rule 8: the codity_app policy of every job table reads the row and the tenant setting
  only: project_id = codity.current_project_id(), no subquery. And the project_id each write
  path copies onto a row is the queue's, checked in a second project.
Rules 5, 6 and 9 are about what statements do and are not checked here
(docs/DATABASE.md says where each stands).
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg.rows import TupleRow

from tests.sqlapi import make_project

Conn = psycopg.Connection[TupleRow]

JOB_TABLES = frozenset(
    {
        "jobs",
        "job_executions",
        "dead_letters",
        "queue_minutes",
        "queue_totals",
        "queue_limiters",
        "job_deps",
        "workflow_events",
    }
)
# Tables with a queue_id that stay off the distributed side, and why.
SMALL_QUEUE_KEYED = {
    # One row per schedule, read by the scheduler across queues: a reference table.
    "scheduled_jobs",
    # A log of refused calls, rare; queue_id is NULL for a job that never existed.
    "fence_rejections",
    # Those refused calls counted once pruned: a row per project and queue, like the log.
    "fence_rejection_totals",
}
APP_POLICY = "(project_id = codity.current_project_id())"


def _rows(conn: Conn, query: str, params: Any = None) -> list[tuple[Any, ...]]:
    return list(conn.execute(query, params).fetchall())


def unclassified_tables(conn: Conn) -> list[str]:
    """Tables of schema codity with a queue_id column that are neither job tables nor small."""
    found = _rows(
        conn,
        "SELECT c.relname FROM pg_catalog.pg_class c"
        " JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid"
        " WHERE c.relnamespace = 'codity'::regnamespace AND c.relkind IN ('r', 'p')"
        "   AND a.attname = 'queue_id' AND NOT a.attisdropped ORDER BY 1",
    )
    return [name for (name,) in found if name not in JOB_TABLES | SMALL_QUEUE_KEYED]


def key_violations(conn: Conn) -> list[str]:
    """Unique indexes (primary keys included) of job tables whose first column is not queue_id."""
    found = _rows(
        conn,
        "SELECT i.indexrelid::regclass::text, a.attname"
        " FROM pg_catalog.pg_index i"
        " JOIN pg_catalog.pg_class c ON c.oid = i.indrelid"
        " LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]"
        " WHERE c.relnamespace = 'codity'::regnamespace AND c.relname = ANY (%s) AND i.indisunique"
        " ORDER BY 1",
        [sorted(JOB_TABLES)],
    )
    return [f"{index} leads with {first}" for index, first in found if first != "queue_id"]


def foreign_key_violations(conn: Conn) -> list[str]:
    """Foreign keys into a job table from elsewhere, or between job tables without the rules."""
    found = _rows(
        conn,
        "SELECT con.conname, src.relname, dst.relname, con.confdeltype::text,"
        "       con.confupdtype::text,"
        "       EXISTS (SELECT 1 FROM unnest(con.conkey, con.confkey) AS k(src, dst)"
        "               JOIN pg_catalog.pg_attribute s ON s.attrelid = con.conrelid"
        "                AND s.attnum = k.src"
        "               JOIN pg_catalog.pg_attribute d ON d.attrelid = con.confrelid"
        "                AND d.attnum = k.dst"
        "               WHERE s.attname = 'queue_id' AND d.attname = 'queue_id')"
        " FROM pg_catalog.pg_constraint con"
        " JOIN pg_catalog.pg_class src ON src.oid = con.conrelid"
        " JOIN pg_catalog.pg_class dst ON dst.oid = con.confrelid"
        " WHERE con.contype = 'f' AND con.connamespace = 'codity'::regnamespace"
        "   AND dst.relname = ANY (%s)"
        " ORDER BY 1",
        [sorted(JOB_TABLES)],
    )
    problems = []
    for name, source, target, on_delete, on_update, pairs_queue_ids in found:
        if source not in JOB_TABLES:
            problems.append(f"{name}: {source} (not a job table) references {target}")
            continue
        if not pairs_queue_ids:
            problems.append(f"{name}: {source} -> {target} does not pair queue_id with queue_id")
        if on_delete not in ("c", "a") or on_update != "a":
            problems.append(f"{name}: {source} -> {target} is not CASCADE or NO ACTION")
    return problems


def signature_violations(conn: Conn) -> list[str]:
    """Functions whose result or any argument is the row type of a codity table or view that
    is not a job table."""
    found = _rows(
        conn,
        "SELECT p.oid::regprocedure::text, t.typname"
        " FROM pg_catalog.pg_proc p"
        " CROSS JOIN LATERAL unnest(p.prorettype"
        "   || coalesce(p.proallargtypes, p.proargtypes::oid[])) AS used(type_oid)"
        " JOIN pg_catalog.pg_type t ON t.oid = used.type_oid"
        " JOIN pg_catalog.pg_class c ON c.oid = t.typrelid"
        " WHERE p.pronamespace = 'codity'::regnamespace"
        "   AND c.relnamespace = 'codity'::regnamespace AND NOT (c.relname = ANY (%s))"
        " ORDER BY 1, 2",
        [sorted(JOB_TABLES)],
    )
    return [f"{function} uses the row type codity.{type_name}" for function, type_name in found]


def policy_violations(conn: Conn) -> list[str]:
    """Policies on job tables that read more than the row and a setting, and job tables whose
    codity_app policy is not the project comparison."""
    found = _rows(
        conn,
        "SELECT c.relname, pol.polname, pol.polroles::regrole[]::text[],"
        "       pol.polqual::text LIKE '%%{SUBLINK %%'"
        "       OR pol.polwithcheck::text LIKE '%%{SUBLINK %%',"
        "       pg_catalog.pg_get_expr(pol.polqual, pol.polrelid)"
        " FROM pg_catalog.pg_policy pol"
        " JOIN pg_catalog.pg_class c ON c.oid = pol.polrelid"
        " WHERE c.relnamespace = 'codity'::regnamespace AND c.relname = ANY (%s)"
        " ORDER BY 1, 2",
        [sorted(JOB_TABLES | {"fence_rejections"})],
    )
    problems = []
    app_policies = set()
    for table, name, roles, has_subquery, using in found:
        if has_subquery:
            problems.append(f"{table}.{name} runs a subquery")
        if "codity_app" in roles:
            app_policies.add(table)
            if using != APP_POLICY:
                problems.append(f"{table}.{name} is {using}, not {APP_POLICY}")
    problems += [f"{table} has no codity_app policy" for table in sorted(JOB_TABLES - app_policies)]
    return problems


_INSERT_IN_CTE = re.compile(
    r"\bAS\s*(?:NOT\s+)?(?:MATERIALIZED\s*)?\(\s*INSERT\s+INTO\s+codity\.(\w+)", re.IGNORECASE
)


def _code(conn: Conn, names: tuple[str, ...] | None = None) -> list[tuple[str, str]]:
    """(signature, body with its -- comments left out) of codity's functions, or of those
    named."""
    rows = _rows(
        conn,
        "SELECT p.oid::regprocedure::text, p.prosrc FROM pg_catalog.pg_proc p"
        " WHERE p.pronamespace = 'codity'::regnamespace"
        "   AND (%(names)s::text[] IS NULL OR p.proname = ANY (%(names)s::text[]))"
        " ORDER BY 1",
        {"names": None if names is None else list(names)},
    )
    return [(function, re.sub(r"--[^\n]*", "", source)) for function, source in rows]


def cte_insert_violations(conn: Conn) -> list[str]:
    """Function bodies with an INSERT into a job table inside a WITH (comments left out)."""
    problems = []
    for function, code in _code(conn):
        for table in _INSERT_IN_CTE.findall(code):
            if table in JOB_TABLES:
                problems.append(f"{function} inserts into {table} inside a CTE")
    return problems


# Rule 1: the hot transitions' bodies, each taking the queue's id first. The functions that
# callers have always used (claim by name, complete_many by job ids, heartbeat, reap of
# every queue, ...) are wrappers that resolve the queue and call these.
HOT_BODIES = (
    "claim_in_queue",
    "start_many_in_queue",
    "complete_many_in_queue",
    "fail_in_queue",
    "release_in_queue",
    "release_lost_claims_in_queue",
    "extend_leases",
    "reap_in_queue",
    "enqueue_in_queue",
    "enqueue_many_in_queue",
)
# Rule 2 also holds in what the bodies call.
HOT_HELPERS = (
    "_lock_fenced_job",
    "_fenced_batch_outcome",
    "_dead_letter",
    "_reject_stale",
    "_enqueue_one",
    "_settle_nodes",
    "_settles_later",
)


def hot_body_violations(conn: Conn) -> list[str]:
    """Hot bodies missing, or not taking p_queue_id bigint as their first argument."""
    found = _rows(
        conn,
        "SELECT p.proname, p.oid::regprocedure::text, coalesce(p.proargnames[1], '?'),"
        "       pg_catalog.format_type(p.proargtypes[0], NULL)"
        " FROM pg_catalog.pg_proc p"
        " WHERE p.pronamespace = 'codity'::regnamespace AND p.proname = ANY (%s) ORDER BY 2",
        [list(HOT_BODIES)],
    )
    present = {name for name, *_ in found}
    problems = [f"codity.{name} is missing" for name in HOT_BODIES if name not in present]
    problems += [
        f"{function} takes {argument} {type_} first, not p_queue_id bigint"
        for _, function, argument, type_ in found
        if (argument, type_) != ("p_queue_id", "bigint")
    ]
    return problems


_JOB_TABLE_USE = re.compile(
    r"\b(FROM|UPDATE|JOIN)\s+codity\.(jobs|job_executions|dead_letters)\s+(?:AS\s+)?(\w+)",
    re.IGNORECASE,
)


def unfiltered_statement_violations(conn: Conn) -> list[str]:
    """Statements of the hot bodies and their helpers that read or write a job table
    without naming the queue (alias.queue_id = ...)."""
    problems = []
    for function, code in _code(conn, HOT_BODIES + HOT_HELPERS):
        for statement in code.split(";"):
            for verb, table, alias in _JOB_TABLE_USE.findall(statement):
                if not re.search(rf"\b{alias}\.queue_id\s*=", statement):
                    problems.append(
                        f"{function}: {verb.upper()} codity.{table} {alias} without"
                        f" {alias}.queue_id = ..."
                    )
    return problems


_NOTIFY = re.compile(
    r"\b(?:pg_catalog\.)?pg_notify\s*\(|\bcodity\._notify\s*\(|\bNOTIFY\s+\w", re.I
)


def notify_violations(conn: Conn) -> list[str]:
    """Hot bodies and their helpers that raise a NOTIFY: Citus may run a body on the node
    that holds its queue, whose listeners are not the workers' (rule 10)."""
    return [
        f"{function} raises a NOTIFY"
        for function, code in _code(conn, HOT_BODIES + HOT_HELPERS)
        if _NOTIFY.search(code)
    ]


CHECKS = (
    hot_body_violations,
    unfiltered_statement_violations,
    notify_violations,
    unclassified_tables,
    key_violations,
    foreign_key_violations,
    signature_violations,
    policy_violations,
    cte_insert_violations,
)


def test_the_catalogue_keeps_every_rule_a_query_can_check(tx: Conn) -> None:
    assert {check.__name__: check(tx) for check in CHECKS} == {c.__name__: [] for c in CHECKS}


def test_a_hot_body_without_the_queue_id_first_is_named(tx: Conn) -> None:
    tx.execute(
        "DROP FUNCTION codity.release_in_queue(bigint, bigint, integer, timestamp with time zone)"
    )
    tx.execute(
        "ALTER FUNCTION codity.fail_in_queue(bigint, bigint, integer, text, boolean,"
        " timestamp with time zone, integer) RENAME TO fail_by_queue"
    )
    tx.execute(
        "CREATE FUNCTION codity.fail_in_queue(p_job_id bigint, p_fence integer)"
        " RETURNS void LANGUAGE sql AS 'SELECT'"
    )
    assert hot_body_violations(tx) == [
        "codity.release_in_queue is missing",
        "codity.fail_in_queue(bigint,integer) takes p_job_id bigint first, not p_queue_id bigint",
    ]


def test_a_statement_that_does_not_name_its_queue_is_named(tx: Conn) -> None:
    """The body of release_in_queue and of _reject_stale, each with one filter taken out."""
    for function, filtered, unfiltered in (
        (
            "codity.release_in_queue(bigint, bigint, integer, timestamp with time zone)",
            "WHERE j.queue_id = p_queue_id AND j.id = p_job_id;",
            "WHERE j.id = p_job_id;",
        ),
        (
            "codity._reject_stale(codity.jobs, text, integer, timestamp with time zone)",
            "WHERE x.queue_id = p_job.queue_id AND x.job_id = p_job.id",
            "WHERE x.job_id = p_job.id",
        ),
    ):
        row = tx.execute(
            "SELECT pg_catalog.pg_get_functiondef(%s::regprocedure)", [function]
        ).fetchone()
        assert row is not None
        assert str(row[0]).count(filtered) == 1, function
        tx.execute(str(row[0]).replace(filtered, unfiltered).encode())
    assert unfiltered_statement_violations(tx) == [
        "codity._reject_stale(codity.jobs,text,integer,timestamp with time zone):"
        " FROM codity.job_executions x without x.queue_id = ...",
        "codity.release_in_queue(bigint,bigint,integer,timestamp with time zone):"
        " UPDATE codity.jobs j without j.queue_id = ...",
    ]


def test_a_body_that_raises_a_notify_is_named(tx: Conn) -> None:
    """release_in_queue as it was before rule 10 was kept, and a helper with a bare NOTIFY;
    a NOTIFY in a comment is not code."""
    function = "codity.release_in_queue(bigint, bigint, integer, timestamp with time zone)"
    row = tx.execute(
        "SELECT pg_catalog.pg_get_functiondef(%s::regprocedure)", [function]
    ).fetchone()
    assert row is not None
    closed = "PERFORM codity._close_attempt(v_job, 'released', p_now, p_refunded => true);"
    assert str(row[0]).count(closed) == 1
    tx.execute(
        str(row[0]).replace(closed, closed + "\n    PERFORM codity._notify(p_queue_id);").encode()
    )
    tx.execute(
        "CREATE OR REPLACE FUNCTION codity._reject_stale(p_job codity.jobs, p_call text,"
        " p_fence integer, p_now timestamptz) RETURNS text LANGUAGE plpgsql AS $$ BEGIN"
        " -- NOTIFY codity_v1 would wake them\n"
        " NOTIFY codity_v1; RETURN 'x'; END $$"
    )
    tx.execute(
        "CREATE OR REPLACE FUNCTION codity._dead_letter(p_queue_id bigint, p_job_id bigint,"
        " p_reason text, p_error text, p_now timestamptz) RETURNS bigint LANGUAGE sql"
        " AS $$ SELECT 1::bigint -- pg_notify('codity_v1', '1') is only a comment\n $$"
    )
    assert notify_violations(tx) == [
        "codity._reject_stale(codity.jobs,text,integer,timestamp with time zone) raises a NOTIFY",
        "codity.release_in_queue(bigint,bigint,integer,timestamp with time zone) raises a NOTIFY",
    ]


def test_a_new_table_with_a_queue_id_must_be_classified(tx: Conn) -> None:
    tx.execute("CREATE TABLE codity.job_notes (queue_id bigint NOT NULL, note text)")
    assert unclassified_tables(tx) == ["job_notes"]


def test_a_unique_key_without_queue_id_in_front_is_named(tx: Conn) -> None:
    tx.execute("CREATE UNIQUE INDEX jobs_id_unique ON codity.jobs (id)")
    tx.execute("CREATE UNIQUE INDEX dead_letters_id_queue ON codity.dead_letters (id, queue_id)")
    assert key_violations(tx) == [
        "codity.dead_letters_id_queue leads with id",
        "codity.jobs_id_unique leads with id",
    ]


def test_foreign_keys_against_the_rules_are_named(tx: Conn) -> None:
    tx.execute("CREATE UNIQUE INDEX jobs_id_unique ON codity.jobs (id)")
    tx.execute(
        "ALTER TABLE codity.scheduled_jobs ADD CONSTRAINT schedule_last_job"
        " FOREIGN KEY (queue_id, last_job_id) REFERENCES codity.jobs (queue_id, id) NOT VALID"
    )
    tx.execute(
        "ALTER TABLE codity.dead_letters ADD CONSTRAINT letter_job"
        " FOREIGN KEY (job_id) REFERENCES codity.jobs (id) NOT VALID"
    )
    tx.execute(
        "ALTER TABLE codity.dead_letters ADD CONSTRAINT letter_replay"
        " FOREIGN KEY (queue_id, replayed_job_id) REFERENCES codity.jobs (queue_id, id)"
        " ON DELETE SET NULL (replayed_job_id) NOT VALID"
    )
    assert foreign_key_violations(tx) == [
        "letter_job: dead_letters -> jobs does not pair queue_id with queue_id",
        "letter_replay: dead_letters -> jobs is not CASCADE or NO ACTION",
        "schedule_last_job: scheduled_jobs (not a job table) references jobs",
    ]


def test_a_signature_with_a_small_tables_row_type_is_named(tx: Conn) -> None:
    tx.execute(
        "CREATE FUNCTION codity._first_queue() RETURNS codity.queues LANGUAGE sql"
        " AS 'SELECT * FROM codity.queues LIMIT 1'"
    )
    tx.execute(
        "CREATE FUNCTION codity._pause(p_queue codity.queues) RETURNS boolean LANGUAGE sql"
        " AS 'SELECT true'"
    )
    tx.execute(
        "CREATE FUNCTION codity._held(p_job codity.jobs) RETURNS boolean LANGUAGE sql"
        " AS 'SELECT true'"
    )
    assert signature_violations(tx) == [
        "codity._first_queue() uses the row type codity.queues",
        "codity._pause(codity.queues) uses the row type codity.queues",
    ]


def test_a_policy_with_a_subquery_is_named(tx: Conn) -> None:
    tx.execute(
        "ALTER POLICY jobs_project ON codity.jobs USING (queue_id IN"
        " (SELECT q.id FROM codity.queues q WHERE q.project_id = codity.current_project_id()))"
    )
    tx.execute("DROP POLICY job_executions_project ON codity.job_executions")
    problems = policy_violations(tx)
    assert problems[0] == "jobs.jobs_project runs a subquery"
    assert problems[1].startswith("jobs.jobs_project is (queue_id IN ( SELECT q.id")
    assert problems[2:] == ["job_executions has no codity_app policy"]


def test_an_insert_inside_a_cte_is_named(tx: Conn) -> None:
    tx.execute(
        "CREATE FUNCTION codity._close(p_job_id bigint) RETURNS void LANGUAGE plpgsql AS $$\n"
        "BEGIN\n"
        "    -- WITH c AS (INSERT INTO codity.jobs ...) in a comment is not code\n"
        "    WITH gone AS (DELETE FROM codity.jobs j WHERE j.id = p_job_id RETURNING j.*),\n"
        "    kept AS MATERIALIZED (\n"
        "        INSERT INTO codity.dead_letters (job_id) SELECT g.id FROM gone g\n"
        "    )\n"
        "    SELECT 1;\n"
        "END;\n"
        "$$"
    )
    assert cte_insert_violations(tx) == [
        "codity._close(bigint) inserts into dead_letters inside a CTE"
    ]


def test_every_write_path_copies_the_queues_project_onto_its_rows(tx: Conn) -> None:
    """In a second project, so a copy from the wrong place (the default project, a constant)
    shows: jobs, the execution of every ending, a dead letter, a fence rejection."""
    t0 = "2030-01-01 12:00:00+00"
    _, project = make_project(tx, "scale-out-rules")
    tx.execute(
        "SELECT codity.create_queue('far', %s, p_max_attempts => 1, p_lease_seconds => 30)",
        [project],
    )
    worker = tx.execute(
        "SELECT codity.register_worker('w', ARRAY['far'], 10, p_project_id => %s, p_now => %s)",
        [project, t0],
    ).fetchone()
    assert worker is not None
    for _ in range(5):
        tx.execute(
            "SELECT codity.enqueue('far', 'task', p_project_id => %s, p_now => %s)", [project, t0]
        )
    held = tx.execute(
        "SELECT job_id, fence FROM codity.claim(%s, 'far', 5, p_start => true, p_now => %s)"
        " ORDER BY job_id",
        [worker[0], t0],
    ).fetchall()
    assert len(held) == 5
    fence: dict[int, int] = dict(held)
    done, failed, released, lost, cancelled = fence
    tx.execute("SELECT * FROM codity.complete(%s, %s, p_now => %s)", [done, fence[done], t0])
    tx.execute("SELECT * FROM codity.complete(%s, %s, p_now => %s)", [done, fence[done] + 1, t0])
    tx.execute(
        "SELECT * FROM codity.fail(%s, %s, 'boom', p_now => %s)", [failed, fence[failed], t0]
    )
    tx.execute("SELECT * FROM codity.release(%s, %s, p_now => %s)", [released, fence[released], t0])
    tx.execute("SELECT * FROM codity.cancel(%s, %s, p_now => %s)", [cancelled, project, t0])
    tx.execute("SELECT * FROM codity.reap(p_now => %s::timestamptz + interval '1 hour')", [t0])
    endings: dict[int, str] = dict(
        tx.execute(
            "SELECT job_id, status::text FROM codity.job_executions WHERE job_id = ANY (%s)",
            [list(fence)],
        ).fetchall()
    )
    assert endings == {
        done: "completed",
        failed: "failed",
        released: "released",
        lost: "reaped",
        cancelled: "cancelled",
    }
    counts = tx.execute(
        "SELECT (SELECT count(*) FROM codity.jobs WHERE queue_id = q.id),"
        "       (SELECT count(*) FROM codity.job_executions WHERE queue_id = q.id),"
        "       (SELECT count(*) FROM codity.dead_letters WHERE queue_id = q.id),"
        "       (SELECT count(*) FROM codity.fence_rejections WHERE queue_id = q.id)"
        " FROM codity.queues q WHERE q.project_id = %s AND q.name = 'far'",
        [project],
    ).fetchone()
    assert counts == (5, 5, 1, 1), "five jobs, five endings, one dead letter, one stale call"
    wrong = tx.execute(
        "WITH q AS (SELECT id FROM codity.queues WHERE project_id = %(p)s)"
        " SELECT t, count(*) FROM ("
        "  SELECT 'jobs' AS t, project_id FROM codity.jobs WHERE queue_id IN (SELECT id FROM q)"
        "  UNION ALL SELECT 'job_executions', project_id FROM codity.job_executions"
        "   WHERE queue_id IN (SELECT id FROM q)"
        "  UNION ALL SELECT 'dead_letters', project_id FROM codity.dead_letters"
        "   WHERE queue_id IN (SELECT id FROM q)"
        "  UNION ALL SELECT 'fence_rejections', project_id FROM codity.fence_rejections"
        "   WHERE queue_id IN (SELECT id FROM q)"
        " ) AS rows_of_the_queue"
        " WHERE project_id IS DISTINCT FROM %(p)s GROUP BY t",
        {"p": project},
    ).fetchall()
    assert wrong == []
