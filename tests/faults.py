"""Break it first: inject a known fault into a database so the tests can prove they notice.

Each fault patches the real source of one or more files in ``sql/functions`` (read from
disk, so the fault follows the code as it changes) by exact snippet replacement and
re-applies the patched files to one database. Every snippet must occur exactly as often as
expected; when a function is rewritten so that a snippet no longer matches, ``inject``
raises instead of silently injecting nothing, so a fault can never become a no-op.

``CODITY_FAULT=<name> ./test`` injects a fault into the session's template database (see
tests/conftest.py), and tests/test_faults_detected.py injects each one into a fresh
database on every run. docs/TESTING.md records which tests fail under each fault.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from codity.db.migrate import sql_dir

__all__ = ["FAULTS", "inject", "patched_sources"]


@dataclass(frozen=True)
class Patch:
    """Replace ``old`` by ``new`` in one function file; ``old`` must occur ``count`` times."""

    file: str
    old: str
    new: str
    count: int = 1


# --- naive_claim ---------------------------------------------------------------------------
# The classic bug: read the candidate ids in one statement without locking them, then
# UPDATE them by id in a second statement without re-checking that they are still queued.
# Two workers that read between the two statements both get the row. The 1 ms pause between
# the statements widens the window so that the race shows on every run, even on two cores.
# The real claim carries ctids, not ids, to its UPDATE, and keeps status = 'queued' there; a
# stale ctid or that re-check would each stop the race alone, so the fault takes both out.
_NAIVE_CLAIM = (
    Patch(
        "claim.sql",
        "        LIMIT v_room\n        FOR UPDATE SKIP LOCKED\n    )\n",
        "        LIMIT v_room  -- FAULT naive_claim: read without locking ...\n    )\n",
    ),
    Patch("claim.sql", "    v_rows tid[];\n", "    v_rows bigint[];  -- FAULT naive_claim: ids\n"),
    Patch(
        "claim.sql",
        "    SELECT pg_catalog.array_agg(p.ctid ORDER BY",
        "    SELECT pg_catalog.array_agg(p.id ORDER BY",
    ),
    Patch(
        "claim.sql",
        "    FROM picked p;\n",
        "    FROM picked p;\n"
        "    PERFORM pg_catalog.pg_sleep(0.001);  -- ... then update by id alone, later.\n",
    ),
    Patch(
        "claim.sql",
        "j.ctid = ANY (v_rows) AND j.status = 'queued'\n",
        "j.id = ANY (v_rows)  -- FAULT naive_claim: no re-check\n",
    ),
)

# --- no_refund -----------------------------------------------------------------------------
# The reaper and release put the job back in the queue but keep the attempt charged: three
# rolling deploys against max_attempts = 3 then exhaust a job that never failed.
_NO_REFUND = (
    Patch(
        "reap.sql",
        "            attempt = j.attempt - 1,\n            crash_count = j.crash_count + 1,\n",
        "            crash_count = j.crash_count + 1,\n",
    ),
    Patch(
        "release.sql",
        "SET status = 'queued', attempt = j.attempt - 1, lock_expires_at = NULL,",
        "SET status = 'queued', lock_expires_at = NULL,",
    ),
)

# --- no_fence ------------------------------------------------------------------------------
# start, complete, fail and release (and the batch calls) stop comparing the caller's fence
# token with the job's execution_seq; only the state check remains. A zombie worker whose
# lease was reaped and whose job another worker now runs can then finish that job.
_FENCE_CHECK = (
    "IF v_job.execution_seq <> p_fence OR v_job.status NOT IN ('claimed', 'running') THEN"
)
_STATE_CHECK_ONLY = "IF v_job.status NOT IN ('claimed', 'running') THEN"
_BATCH_FENCE = "AND j.id = b.job_id\n          AND j.execution_seq = b.fence AND"
_BATCH_NO_FENCE = "AND j.id = b.job_id\n          AND"
_NO_FENCE = (
    *(Patch(file, _FENCE_CHECK, _STATE_CHECK_ONLY) for file in ("fail.sql", "release.sql")),
    *(
        Patch(file, _BATCH_FENCE, _BATCH_NO_FENCE)
        for file in ("start_many.sql", "complete_many.sql")
    ),
    # start and complete are start_many and complete_many of one job; the batch outcome
    # then reports what the UPDATE did, fence or not.
    Patch(
        "_fenced_batch_outcome.sql",
        "IF v_pair.job_id = ANY (p_done) AND v_job.execution_seq = v_pair.fence THEN",
        "IF v_pair.job_id = ANY (p_done) THEN",
    ),
)

# --- pg_temp_first -------------------------------------------------------------------------
# The original search_path of every SECURITY DEFINER function: pg_catalog, codity, with
# pg_temp left out, so PostgreSQL searches the caller's temporary schema first for tables
# and types and a caller's domain runs its CHECK as the function's owner.
_PINNED = "SET search_path = pg_catalog, codity, pg_temp\n"
_PG_TEMP_FIRST = tuple(
    Patch(path.name, _PINNED, "SET search_path = pg_catalog, codity\n", text.count(_PINNED))
    for path in sorted((sql_dir() / "functions").glob("*.sql"))
    if (text := path.read_text()).count(_PINNED)
)

# --- open_clock ----------------------------------------------------------------------------
# codity._check_clock lets every caller through: p_now moves time for any role again, so a
# worker can heartbeat "a year from now" and keep its leases beyond sweep and reap.
_OPEN_CLOCK = (
    Patch(
        "_check_clock.sql",
        "    IF p_now = pg_catalog.now() THEN\n        RETURN;",
        "    IF true THEN  -- FAULT open_clock\n        RETURN;",
    ),
)

# --- repeat_is_stale ---------------------------------------------------------------------
# A call repeated by its fence's owner (its COMMIT's answer was lost) is treated like a
# zombie's: refused and recorded as stale, and the heartbeat calls the job lost. The
# worker's resent completion then reads as refused work, and fence_rejections cries wolf.
_REPEAT_IS_STALE = (
    Patch(
        "_fenced_batch_outcome.sql",
        "AND x.status = p_closed_as",
        "AND x.status = p_closed_as AND false  -- FAULT repeat_is_stale",
    ),
    Patch(
        "_fenced_batch_outcome.sql",
        "v_job.status = 'running' AND v_job.execution_seq = v_pair.fence) THEN",
        "v_job.status = 'running' AND v_job.execution_seq = v_pair.fence AND false) THEN",
    ),
    Patch("fail.sql", "AND x.status = 'failed') THEN", "AND x.status = 'failed' AND false) THEN"),
    Patch(
        "release.sql",
        "AND x.status = 'released') THEN",
        "AND x.status = 'released' AND false) THEN",
    ),
    Patch(
        "extend_leases.sql",
        "x.status IN ('completed', 'failed', 'released')",
        "x.status IN ('completed', 'failed', 'released') AND false",
    ),
)

# --- any_queue -------------------------------------------------------------------------------
# claim forgets whose worker it is: the queue is looked up in the default project and the
# worker's registered queues are not checked (the behaviour before migration 0006).
_ANY_QUEUE = (
    Patch(
        "claim.sql",
        "(codity._queue(p_queue, w.project_id)).id",
        "(codity._queue(p_queue, NULL)).id /* FAULT any_queue */",
    ),
    Patch(
        "claim.sql",
        "v_queue := codity._queue(p_queue_id, v_worker.project_id);",
        "v_queue := codity._queue(p_queue_id, NULL);  -- FAULT any_queue",
    ),
    Patch(
        "claim.sql",
        "IF cardinality(v_worker.queues) > 0 AND NOT (v_queue.name = ANY (v_worker.queues)) THEN",
        "IF false THEN  -- FAULT any_queue",
    ),
)

# --- no_isolation ------------------------------------------------------------------------
# claim hands out jobs with a crash on record in any batch, beside healthy ones: a job that
# kills its worker takes its batch mates down with it, to the crash cap.
_NO_ISOLATION = (
    Patch(
        "claim.sql",
        "    IF v_cut IS NOT NULL THEN\n",
        "    IF false THEN  -- FAULT no_isolation\n",
    ),
    Patch(
        "claim.sql",
        "AND (coalesce(p_suspects, true) OR j.crash_count = 0)",
        "AND true  -- FAULT no_isolation",
    ),
)

# --- unlocked_release ------------------------------------------------------------------------
# A workflow child counted down from the value its statement read before the other parent's
# transaction committed, instead of from its row as locked: of two parents settled at once,
# the second count overwrites the first, and the child waits for a parent that is done.
_UNLOCKED_RELEASE = (
    Patch(
        "_settle_children.sql",
        "j.deps_remaining - v_child.ok",
        "(SELECT s.deps_remaining FROM codity.jobs s WHERE s.queue_id = j.queue_id AND s.id = j.id)"
        " - v_child.ok  /* FAULT unlocked_release */",
        count=5,
    ),
)

# --- fold_keeps_events -----------------------------------------------------------------------
# On a Citus cluster, the fold reads the deferred settlements without deleting them: every
# later fold (every tick) folds them again, and the rows pile up.
_FOLD_KEEPS_EVENTS = (
    Patch(
        "_fold_settlements.sql",
        "            DELETE FROM codity.workflow_events e\n"
        "            WHERE e.queue_id = v_queue\n"
        "              AND (p_job_ids IS NULL OR e.job_id = ANY (v_ids))\n"
        "            RETURNING e.job_id, e.outcome",
        "            SELECT e.job_id, e.outcome  /* FAULT fold_keeps_events */\n"
        "            FROM codity.workflow_events e\n"
        "            WHERE e.queue_id = v_queue\n"
        "              AND (p_job_ids IS NULL OR e.job_id = ANY (v_ids))",
    ),
)

# --- no_fold ---------------------------------------------------------------------------------
# On a Citus cluster, tick never folds the deferred settlements: no child is ever released.
_NO_FOLD = (
    Patch(
        "tick.sql",
        "    PERFORM codity._fold_settlements(p_now);\n",
        "    /* FAULT no_fold */\n",
    ),
)

# --- no_fold_first ---------------------------------------------------------------------------
# On a Citus cluster, an operator's action on a settled node (retry_job, replay_dead_letter,
# retry_workflow, skip_node) does not fold the node's unfolded settlement first: the tick
# folds it after the node was reset, as if the old outcome were the new one.
_NO_FOLD_FIRST = (
    Patch(
        "replay_dead_letter.sql",
        "            PERFORM codity._fold_settlements("
        "ARRAY[v_job.queue_id], ARRAY[v_job.id], p_now);\n",
        "            /* FAULT no_fold_first */\n",
    ),
    Patch(
        "skip_node.sql",
        "    PERFORM codity._fold_settlements("
        "ARRAY[v_node.queue_id], ARRAY[v_node.job_id], p_now);\n",
        "    /* FAULT no_fold_first */\n",
    ),
    Patch(
        "_reset_nodes.sql",
        "    PERFORM codity._fold_settlements(\n",
        "    PERFORM 0 /* FAULT no_fold_first */ WHERE false AND 0 < codity._fold_settlements(\n",
    ),
)

_PATCHES: dict[str, tuple[Patch, ...]] = {
    "naive_claim": _NAIVE_CLAIM,
    "no_refund": _NO_REFUND,
    "no_fence": _NO_FENCE,
    "pg_temp_first": _PG_TEMP_FIRST,
    "open_clock": _OPEN_CLOCK,
    "repeat_is_stale": _REPEAT_IS_STALE,
    "any_queue": _ANY_QUEUE,
    "no_isolation": _NO_ISOLATION,
    "unlocked_release": _UNLOCKED_RELEASE,
    "fold_keeps_events": _FOLD_KEEPS_EVENTS,
    "no_fold": _NO_FOLD,
    "no_fold_first": _NO_FOLD_FIRST,
}

FAULTS: dict[str, str] = {
    "naive_claim": "claim SELECTs candidates unlocked, then UPDATEs them by id (two statements)",
    "no_refund": "reap and release requeue a job without giving its attempt back",
    "no_fence": "start, complete, fail, release and the batch calls ignore the fence token",
    "pg_temp_first": "definer functions pin search_path without pg_temp, so it is searched first",
    "open_clock": "p_now moves the clock for every caller, not only superusers and codity_clock",
    "repeat_is_stale": "a call repeated by its fence's owner is refused and recorded as stale",
    "any_queue": "claim ignores the worker's project and registered queues",
    "no_isolation": "claim hands out jobs with a crash on record in any batch",
    "unlocked_release": "a workflow child is counted down from a value read before its row lock",
    "fold_keeps_events": "on Citus, tick folds deferred workflow settlements without deleting them",
    "no_fold": "on Citus, tick never folds deferred workflow settlements",
    "no_fold_first": "on Citus, operators reset a node without folding its pending settlement",
}


def patched_sources(fault: str) -> dict[str, str]:
    """The patched text of every function file a fault touches, by file name.

    Raises ValueError for an unknown fault, AssertionError when a snippet no longer
    occurs in the source exactly as often as the fault expects.
    """
    if fault not in _PATCHES:
        known = ", ".join(sorted(FAULTS))
        raise ValueError(f"unknown fault {fault!r}; known faults: {known}")
    sources: dict[str, str] = {}
    for patch in _PATCHES[fault]:
        text = sources.get(patch.file)
        if text is None:
            text = (sql_dir() / "functions" / patch.file).read_text()
        found = text.count(patch.old)
        assert found == patch.count, (
            f"fault {fault}: expected {patch.count} occurrence(s) of a snippet in "
            f"sql/functions/{patch.file}, found {found}; update tests/faults.py to match the code"
        )
        sources[patch.file] = text.replace(patch.old, patch.new)
    return sources


def inject(url: str, fault: str) -> None:
    """Apply a named fault to the database at ``url`` (all patched files, one transaction)."""
    sources = patched_sources(fault)
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        for text in sources.values():
            conn.execute(text.encode())
