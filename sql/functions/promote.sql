-- codity.promote: scheduled -> queued for jobs whose run_at has come.
--
-- Delayed jobs, retries waiting out their backoff and cron jobs all rest in scheduled;
-- promote makes them claimable and wakes the queue's workers with one NOTIFY per queue.
-- Locks: per queue, the due rows FOR UPDATE SKIP LOCKED, so several schedulers never
-- block each other; the UPDATE repeats the condition. Caller: codity.tick.

CREATE OR REPLACE FUNCTION codity.promote(
    p_now timestamptz DEFAULT now(),
    p_limit integer DEFAULT 10000
)
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
DECLARE
    v_queue_id bigint;
    v_is_paused boolean;
    v_count integer;
    v_total integer := 0;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'limit must be positive, got %', p_limit USING ERRCODE = 'CD010';
    END IF;
    PERFORM codity._check_transition('scheduled', 'queued');

    -- The queues with a due job, read first: from each queue's codity.queue_totals row, the
    -- job-side row every queue has, so that on a Citus cluster the probe per queue runs on
    -- the shards beside it (Citus refuses a subquery correlated from a reference table
    -- such as codity.queues into a distributed one; docs/DESIGN_DECISIONS.md 61).
    FOR v_queue_id, v_is_paused IN
        SELECT q.id, q.is_paused
        FROM codity.queue_totals t
        JOIN codity.queues q ON q.id = t.queue_id
        WHERE EXISTS (
            SELECT 1 FROM codity.jobs j
            WHERE j.queue_id = t.queue_id AND j.status = 'scheduled' AND j.run_at <= p_now
        )
        ORDER BY q.id
    LOOP
        WITH due AS MATERIALIZED (
            SELECT j.id FROM codity.jobs j
            WHERE j.queue_id = v_queue_id AND j.status = 'scheduled' AND j.run_at <= p_now
            ORDER BY j.run_at, j.id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        )
        UPDATE codity.jobs j
        SET status = 'queued', updated_at = p_now
        FROM due
        WHERE j.queue_id = v_queue_id AND j.id = due.id AND j.status = 'scheduled'
          AND j.run_at <= p_now;

        GET DIAGNOSTICS v_count = ROW_COUNT;
        v_total := v_total + v_count;
        IF v_count > 0 AND NOT v_is_paused THEN
            PERFORM codity._notify(v_queue_id);
        END IF;
    END LOOP;
    RETURN v_total;
END;
$$;

COMMENT ON FUNCTION codity.promote(timestamptz, integer) IS
'Move scheduled jobs whose run_at has come to queued, with one NOTIFY per unpaused queue; returns how many.

Example: SELECT codity.promote();';

REVOKE ALL ON FUNCTION codity.promote(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.promote(timestamptz, integer) TO codity_app;
