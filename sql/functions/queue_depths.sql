-- codity.queue_depths: per queue, how many jobs are in each state an operator acts on,
-- counted only up to a cap, and how long the oldest claimable job has waited.
--
-- Counting every job row on each call does not survive a million of them; these counts
-- stop at p_cap (codity.count_cap() by default), each one index range: claimable through
-- the claim index, scheduled through the promote index (plus queued jobs not yet due),
-- running through the lease index, the rest through their partial (queue_id, id) indexes
-- (migration 0010: under row-level security only a partial index serves a state). A count equal
-- to the cap means "at least the cap". The oldest claimable job is found without a sort:
-- one index probe per distinct priority of the queue's queued jobs (a loose index scan).
-- Security invoker: row-level security decides which queues the caller sees; p_project_id
-- narrows to one project (NULL: every project visible to the caller), p_queue to one of
-- its queues (a queue's page polls its own counts every 2 s: counting the project's other
-- queues too cost one index range per state per queue for nothing). Read-only.

CREATE OR REPLACE FUNCTION codity.count_cap()
RETURNS integer
LANGUAGE sql
IMMUTABLE
SET search_path = pg_catalog, codity, pg_temp
AS $$ SELECT 10000 $$;

COMMENT ON FUNCTION codity.count_cap() IS
'The default cap of the dashboard''s counts (10,000): a count that reaches it means "at least that many".
Example: SELECT codity.count_cap();';

REVOKE ALL ON FUNCTION codity.count_cap() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.count_cap() TO codity_app, codity_readonly;

-- The signature before p_queue: dropped, or a call with the old arguments would match both
-- (codity migrate re-applies this file; dropping is idempotent).
DROP FUNCTION IF EXISTS codity.queue_depths(bigint, integer, timestamptz);

CREATE OR REPLACE FUNCTION codity.queue_depths(
    p_project_id bigint DEFAULT NULL,
    p_cap integer DEFAULT NULL,
    p_now timestamptz DEFAULT now(),
    p_queue text DEFAULT NULL
)
RETURNS TABLE (
    queue_id bigint,
    project_id bigint,
    queue text,
    is_paused boolean,
    claimable integer,
    scheduled integer,
    running integer,
    completed integer,
    failed integer,
    dead_letter integer,
    cancelled integer,
    oldest_claimable_at timestamptz
)
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_cap integer := coalesce(p_cap, codity.count_cap());
    v_caller text;
    v_depth record;
BEGIN
    IF v_cap < 1 OR v_cap > 1000000 THEN
        RAISE EXCEPTION 'the cap must be between 1 and 1000000, got %', v_cap USING ERRCODE = 'CD010';
    END IF;
    -- The clock rule of codity._check_clock (same caller: the session's role), written out
    -- because an invoker function cannot call that private helper (granted to nobody).
    IF p_now IS DISTINCT FROM pg_catalog.now() THEN
        v_caller := pg_catalog.current_setting('role');
        IF v_caller = 'none' THEN
            v_caller := session_user;
        END IF;
        IF p_now IS NULL OR NOT pg_catalog.pg_has_role(v_caller, 'codity_clock', 'MEMBER') THEN
            RAISE EXCEPTION 'only tests may move the clock: % may not pass p_now', v_caller
                USING ERRCODE = 'CD022',
                      HINT = 'Leave p_now out. Moving time needs a superuser or a member of codity_clock.';
        END IF;
    END IF;
    -- The counts in one statement, from each queue's codity.queue_totals row (the job-side
    -- row every queue has, migration 0029): on a Citus cluster these correlated counts run
    -- on the shards beside it; from codity.queues, a reference table, Citus refuses them.
    FOR v_depth IN
        SELECT q.id, q.project_id, q.name, q.is_paused,
               (SELECT count(*)::integer FROM (
                   SELECT 1 FROM codity.jobs j
                   WHERE j.queue_id = t.queue_id AND j.status = 'queued' AND j.run_at <= p_now
                   LIMIT v_cap) c) AS claimable,
               least(v_cap, (SELECT count(*)::integer FROM (
                   SELECT 1 FROM codity.jobs j
                   WHERE j.queue_id = t.queue_id AND j.status = 'scheduled' LIMIT v_cap) c)
                 + (SELECT count(*)::integer FROM (
                   SELECT 1 FROM codity.jobs j
                   WHERE j.queue_id = t.queue_id AND j.status = 'queued' AND j.run_at > p_now
                   LIMIT v_cap) c)) AS scheduled,
               (SELECT count(*)::integer FROM (
                   SELECT 1 FROM codity.jobs j
                   WHERE j.queue_id = t.queue_id AND j.status IN ('claimed', 'running')
                   LIMIT v_cap) c) AS running,
               (SELECT count(*)::integer FROM (
                   SELECT 1 FROM codity.jobs j
                   WHERE j.queue_id = t.queue_id AND j.status = 'completed' LIMIT v_cap) c) AS completed,
               (SELECT count(*)::integer FROM (
                   SELECT 1 FROM codity.jobs j
                   WHERE j.queue_id = t.queue_id AND j.status = 'failed' LIMIT v_cap) c) AS failed,
               (SELECT count(*)::integer FROM (
                   SELECT 1 FROM codity.jobs j
                   WHERE j.queue_id = t.queue_id AND j.status = 'dead_letter' LIMIT v_cap) c) AS dead_letter,
               (SELECT count(*)::integer FROM (
                   SELECT 1 FROM codity.jobs j
                   WHERE j.queue_id = t.queue_id AND j.status = 'cancelled' LIMIT v_cap) c) AS cancelled
        FROM codity.queue_totals t
        JOIN codity.queues q ON q.id = t.queue_id
        WHERE (p_project_id IS NULL OR q.project_id = p_project_id)
          AND (p_queue IS NULL OR q.name = p_queue)
        ORDER BY q.project_id, q.name
    LOOP
        queue_id := v_depth.id;
        project_id := v_depth.project_id;
        queue := v_depth.name;
        is_paused := v_depth.is_paused;
        claimable := v_depth.claimable;
        scheduled := v_depth.scheduled;
        running := v_depth.running;
        completed := v_depth.completed;
        failed := v_depth.failed;
        dead_letter := v_depth.dead_letter;
        cancelled := v_depth.cancelled;
        oldest_claimable_at := NULL;
        -- The oldest claimable job, only where there is one, in a statement of its own
        -- naming the queue: a recursive query must name the queue for Citus to run it.
        IF v_depth.claimable > 0 THEN
            WITH RECURSIVE priorities (priority) AS (
                (SELECT j.priority FROM codity.jobs j
                 WHERE j.queue_id = v_depth.id AND j.status = 'queued'
                 ORDER BY j.priority DESC LIMIT 1)
                UNION ALL
                SELECT (SELECT j.priority FROM codity.jobs j
                        WHERE j.queue_id = v_depth.id AND j.status = 'queued'
                          AND j.priority < p.priority
                        ORDER BY j.priority DESC LIMIT 1)
                FROM priorities p WHERE p.priority IS NOT NULL
            )
            SELECT CASE WHEN o.oldest <= p_now THEN o.oldest END INTO oldest_claimable_at
            FROM (SELECT min((SELECT j.run_at FROM codity.jobs j
                              WHERE j.queue_id = v_depth.id AND j.status = 'queued'
                                AND j.priority = p.priority
                              ORDER BY j.run_at LIMIT 1)) AS oldest
                  FROM priorities p WHERE p.priority IS NOT NULL) o;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION codity.queue_depths(bigint, integer, timestamptz, text) IS
'Per queue: jobs claimable, scheduled, running, completed, failed, dead-lettered and
cancelled, each counted up to p_cap (NULL: codity.count_cap(); a count equal to the cap
means at least that many), and when the oldest claimable job became due. Row-level
security applies; p_project_id narrows to one project (NULL: all visible), p_queue to one
queue of it (NULL: every queue).
Example: SELECT queue, claimable, now() - oldest_claimable_at AS waiting FROM codity.queue_depths(1);';

REVOKE ALL ON FUNCTION codity.queue_depths(bigint, integer, timestamptz, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.queue_depths(bigint, integer, timestamptz, text) TO codity_app, codity_readonly;
