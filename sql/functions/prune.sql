-- codity.prune: delete the finished jobs, executions and dead letters that have aged out.
--
-- Each queue keeps its completed and cancelled jobs (with their executions) for
-- keep_completed_seconds after they finished, and its dead-lettered jobs (with their
-- executions and dead_letters rows) for keep_dead_letters_seconds; NULL keeps them forever
-- (migration 0021, docs/DESIGN_DECISIONS.md 53). One call deletes at most p_limit jobs and
-- p_limit dead letters per queue, oldest first, so its locks are few and short; the
-- scheduler calls it after every tick and again while a call still finds work.
-- Nothing newer than codity.rollup_state.rolled_until is deleted: the dashboard's
-- per-minute figures are counted from the executions first (codity.roll_up). An idempotency
-- key is remembered as long as its job is kept: once pruned, the key may be used again.
-- A workflow's jobs are kept until all its nodes have finished (codity._workflow_unfinished;
-- on a Citus cluster, where a statement on one queue's shard cannot ask the others, the
-- oldest candidates are read first and their workflows checked in one read over the shards).
-- Locks: the rows it deletes, taken FOR UPDATE SKIP LOCKED, so a job being retried or
-- replayed at that moment is left for the next call and nobody waits. Claims never touch
-- finished jobs, so they never wait for it. Every statement filters on one queue's id
-- (DESIGN.md, "Room to scale out", rules 1 and 2).
-- Callers: the scheduler process (codity.scheduler), pg_cron (docs/RUNBOOK.md).

CREATE OR REPLACE FUNCTION codity.prune(
    p_now timestamptz DEFAULT now(),
    p_limit integer DEFAULT 1000
)
RETURNS TABLE (jobs integer, executions integer, dead_letters integer)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_rolled_until timestamptz;
    v_queue record;
    v_ids bigint[];
    v_count integer;
    v_jobs integer := 0;
    v_executions integer := 0;
    v_dead_letters integer := 0;
    v_spread boolean := codity._settles_later();
    v_candidates bigint[];
    v_workflows bigint[];
    v_unfinished bigint[];
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'p_limit must be from 1 to 100000, got %', coalesce(p_limit::text, 'NULL')
            USING ERRCODE = 'CD010';
    END IF;
    SELECT st.rolled_until INTO v_rolled_until FROM codity.rollup_state st;
    IF v_rolled_until IS NULL THEN  -- roll_up has not run yet: nothing is counted
        RETURN QUERY SELECT 0, 0, 0;
        RETURN;
    END IF;

    FOR v_queue IN
        SELECT q.id,
               least(v_rolled_until, p_now - pg_catalog.make_interval(secs => q.keep_completed_seconds))
                   AS completed_before,
               least(v_rolled_until, p_now - pg_catalog.make_interval(secs => q.keep_dead_letters_seconds))
                   AS dead_before
        FROM codity.queues q
        WHERE q.keep_completed_seconds IS NOT NULL OR q.keep_dead_letters_seconds IS NOT NULL
        ORDER BY q.id
    LOOP
        IF v_spread THEN
            -- A Citus cluster: a statement on one queue's shard cannot ask the other shards
            -- whether a job's workflow is finished. The oldest candidates first, unlocked;
            -- then their unfinished workflows, in one read over the shards; then the lock,
            -- on this queue's shard, of the candidates kept, their state checked again.
            SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.workflow_id), '{}')
            INTO v_candidates, v_workflows
            FROM (
                (SELECT j.id, j.workflow_id FROM codity.jobs j
                 WHERE j.queue_id = v_queue.id AND j.finished_at < v_queue.completed_before
                   AND j.status IN ('completed', 'cancelled')
                 ORDER BY j.finished_at LIMIT p_limit)
                UNION ALL
                (SELECT j.id, j.workflow_id FROM codity.jobs j
                 WHERE j.queue_id = v_queue.id AND j.finished_at < v_queue.dead_before
                   AND j.status = 'dead_letter'
                 ORDER BY j.finished_at LIMIT p_limit)
            ) c;
            v_unfinished := ARRAY(
                SELECT DISTINCT w.workflow_id FROM codity.jobs w
                WHERE w.workflow_id = ANY (v_workflows)
                  AND w.status <> ALL ('{completed,dead_letter,cancelled}'::codity.job_status[]));
            SELECT coalesce(array_agg(f.id), '{}') INTO v_ids
            FROM (
                SELECT j.id
                FROM codity.jobs j
                WHERE j.queue_id = v_queue.id AND j.id = ANY (v_candidates)
                  AND ((j.finished_at < v_queue.completed_before AND j.status IN ('completed', 'cancelled'))
                       OR (j.finished_at < v_queue.dead_before AND j.status = 'dead_letter'))
                  AND (j.workflow_id IS NULL OR j.workflow_id <> ALL (v_unfinished))
                ORDER BY j.finished_at
                FOR UPDATE SKIP LOCKED
            ) f;
        ELSE
            -- Completed and cancelled jobs, then dead-lettered ones, each by their own period.
            SELECT coalesce(array_agg(f.id), '{}') INTO v_ids
            FROM (
                SELECT j.id
                FROM codity.jobs j
                WHERE j.queue_id = v_queue.id
                  AND j.finished_at < v_queue.completed_before
                  AND j.status IN ('completed', 'cancelled')
                  AND (j.workflow_id IS NULL OR NOT codity._workflow_unfinished(j.workflow_id))
                ORDER BY j.finished_at
                LIMIT p_limit
                FOR UPDATE SKIP LOCKED
            ) f;
            SELECT v_ids || coalesce(array_agg(f.id), '{}') INTO v_ids
            FROM (
                SELECT j.id
                FROM codity.jobs j
                WHERE j.queue_id = v_queue.id
                  AND j.finished_at < v_queue.dead_before
                  AND j.status = 'dead_letter'
                  AND (j.workflow_id IS NULL OR NOT codity._workflow_unfinished(j.workflow_id))
                ORDER BY j.finished_at
                LIMIT p_limit
                FOR UPDATE SKIP LOCKED
            ) f;
        END IF;
        IF pg_catalog.cardinality(v_ids) > 0 THEN
            DELETE FROM codity.job_executions x
            WHERE x.queue_id = v_queue.id AND x.job_id = ANY (v_ids);
            GET DIAGNOSTICS v_count = ROW_COUNT;
            v_executions := v_executions + v_count;
            DELETE FROM codity.jobs j WHERE j.queue_id = v_queue.id AND j.id = ANY (v_ids);
            GET DIAGNOSTICS v_count = ROW_COUNT;
            v_jobs := v_jobs + v_count;
        END IF;

        DELETE FROM codity.dead_letters d
        WHERE d.queue_id = v_queue.id
          AND d.id = ANY (ARRAY(
              SELECT o.id
              FROM codity.dead_letters o
              WHERE o.queue_id = v_queue.id AND o.dead_at < v_queue.dead_before
              ORDER BY o.dead_at
              LIMIT p_limit
              FOR UPDATE SKIP LOCKED));
        GET DIAGNOSTICS v_count = ROW_COUNT;
        v_dead_letters := v_dead_letters + v_count;
    END LOOP;
    RETURN QUERY SELECT v_jobs, v_executions, v_dead_letters;
END;
$$;

COMMENT ON FUNCTION codity.prune(timestamptz, integer) IS
'Delete finished jobs, their executions and dead letters that their queue no longer keeps.

Per queue: completed and cancelled jobs that finished more than keep_completed_seconds
ago, dead-lettered jobs and dead_letters rows older than keep_dead_letters_seconds (see
codity.create_queue; NULL keeps forever), and never anything the per-minute roll-up has
not counted yet. At most p_limit (1..100000, default 1000) jobs and p_limit dead letters
per queue per call, oldest first; rows locked by another session are skipped. Returns how
many jobs, executions and dead letters it deleted: call it again while they are not zero.
The scheduler calls it after every tick. Raises CD010 (p_limit out of range).
Example: SELECT * FROM codity.prune();';

REVOKE ALL ON FUNCTION codity.prune(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.prune(timestamptz, integer) TO codity_app;
