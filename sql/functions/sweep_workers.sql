-- codity.sweep_workers: declare dead the workers that stopped heartbeating.
--
-- Heartbeat-based recovery, faster than waiting out every lease: a worker silent for
-- p_stale_after (default: the installation's worker_dead_after, 15 s unless changed with
-- codity.configure — three missed 5-second heartbeats) is marked dead and the
-- leases of the jobs it holds are cut to now, so the codity.reap that follows in the same
-- codity.tick requeues them at once (attempt refunded). A worker that was only frozen and
-- heartbeats again becomes active again; its fences are stale by then.
-- Locks the stale worker rows and their held job rows. Caller: codity.tick.

CREATE OR REPLACE FUNCTION codity.sweep_workers(
    p_now timestamptz DEFAULT now(),
    p_stale_after interval DEFAULT NULL
)
RETURNS TABLE (worker_id bigint, name text, last_heartbeat_at timestamptz, jobs_expired integer)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_worker record;
    v_queue_id bigint;
    v_expired integer;
    v_count integer;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_stale_after IS NULL THEN
        SELECT st.worker_dead_after INTO p_stale_after FROM codity.settings st;
    END IF;
    IF p_stale_after <= interval '0' THEN
        RAISE EXCEPTION 'stale_after must be a positive interval' USING ERRCODE = 'CD010';
    END IF;
    FOR v_worker IN
        UPDATE codity.workers w
        SET status = 'dead', stopped_at = p_now
        WHERE w.status = 'active' AND w.last_heartbeat_at < p_now - p_stale_after
        RETURNING w.id, w.name, w.last_heartbeat_at, w.project_id
    LOOP
        -- Queue by queue of the jobs it held, listed by a read first: a statement that writes
        -- job rows stays on one queue (DESIGN.md, "Room to scale out", rule 6), and a project
        -- with many queues costs one update per queue the worker actually used.
        v_expired := 0;
        FOR v_queue_id IN
            SELECT DISTINCT j.queue_id FROM codity.jobs j
            WHERE j.worker_id = v_worker.id AND j.status IN ('claimed', 'running')
            ORDER BY j.queue_id
        LOOP
            UPDATE codity.jobs j
            SET lock_expires_at = LEAST(j.lock_expires_at, p_now), updated_at = p_now
            WHERE j.queue_id = v_queue_id AND j.worker_id = v_worker.id
              AND j.status IN ('claimed', 'running');
            GET DIAGNOSTICS v_count = ROW_COUNT;
            v_expired := v_expired + v_count;
        END LOOP;
        RETURN QUERY SELECT v_worker.id, v_worker.name, v_worker.last_heartbeat_at, v_expired;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION codity.sweep_workers(timestamptz, interval) IS
'Mark workers dead whose last heartbeat is older than p_stale_after (NULL: the installation''s worker_dead_after) and expire their leases now.

The reap that follows in codity.tick then requeues their jobs with the attempt refunded.
Example: SELECT * FROM codity.sweep_workers();';

REVOKE ALL ON FUNCTION codity.sweep_workers(timestamptz, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.sweep_workers(timestamptz, interval) TO codity_app;
