-- codity.heartbeat: "I am alive, and these are the jobs I am running".
--
-- Updates the worker's last_heartbeat_at and extends the lease of each listed job whose
-- fence still matches and that this worker still holds. Every listed job comes back with
-- a state: 'extended', 'cancelled' (an operator cancelled it: stop the handler), 'done'
-- (this worker's own complete, fail or release with that fence already committed — its
-- answer may have been lost on the way back: stop heartbeating it, nothing is recorded) or
-- 'lost' (reaped or reclaimed: stop the handler, its result will be refused). Lost calls
-- are recorded like any stale fence.
--
-- Against the reaper: both write the same rows. If the heartbeat commits first the lease
-- is in the future and the reaper, which repeats its whole condition in its UPDATE, leaves
-- the job alone; if the reaper commits first the heartbeat finds the job queued and
-- reports it lost. A worker declared dead that heartbeats again is alive after all: it
-- becomes active again, but what was reaped stays lost.
-- Locks the worker row and the listed job rows. Caller: the worker, every 5 s.

CREATE OR REPLACE FUNCTION codity.heartbeat(
    p_worker_id bigint,
    p_job_ids bigint[] DEFAULT '{}',
    p_fences integer[] DEFAULT '{}',
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (job_id bigint, fence integer, state text)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_worker codity.workers;
    v_extended bigint[];
    v_queue_ids bigint[];
    v_lease_ends timestamptz[];
    v_job codity.jobs;
    v_pair record;
BEGIN
    PERFORM codity._check_clock(p_now);
    -- NULL arrays mean "no jobs" here (a worker with nothing running), unlike the batch calls.
    PERFORM codity._check_fence_arrays(coalesce(p_job_ids, '{}'), coalesce(p_fences, '{}'));
    SELECT w.* INTO v_worker FROM codity.workers w WHERE w.id = p_worker_id FOR UPDATE;
    IF v_worker.id IS NULL THEN
        RAISE EXCEPTION 'worker % does not exist', p_worker_id USING ERRCODE = 'CD004';
    ELSIF v_worker.status = 'stopped' THEN
        RAISE EXCEPTION 'worker % has deregistered', p_worker_id
            USING ERRCODE = 'CD005', HINT = 'Register again to get a new worker id.';
    END IF;
    UPDATE codity.workers w
    SET last_heartbeat_at = GREATEST(w.last_heartbeat_at, p_now), status = 'active', stopped_at = NULL
    WHERE w.id = p_worker_id;

    -- Each queue's new lease end first: no time arithmetic on columns inside the UPDATE
    -- (DESIGN.md, "Room to scale out", rule 9).
    SELECT pg_catalog.array_agg(q.id),
           pg_catalog.array_agg(p_now + pg_catalog.make_interval(secs => q.lease_seconds))
    INTO v_queue_ids, v_lease_ends
    FROM codity.queues q
    WHERE q.id IN (SELECT j.queue_id FROM codity.jobs j WHERE j.id = ANY (p_job_ids));

    WITH extended AS (
        UPDATE codity.jobs j
        SET lock_expires_at = GREATEST(j.lock_expires_at, l.lease_end), updated_at = p_now
        FROM unnest(p_job_ids, p_fences) AS h(job_id, fence),
             unnest(v_queue_ids, v_lease_ends) AS l(queue_id, lease_end)
        WHERE j.id = h.job_id
          AND j.queue_id = l.queue_id
          AND j.execution_seq = h.fence
          AND j.status IN ('claimed', 'running')
          AND j.worker_id = p_worker_id
        RETURNING j.id
    )
    SELECT coalesce(array_agg(e.id), '{}') INTO v_extended FROM extended e;

    FOR v_pair IN
        SELECT h.job_id, h.fence FROM unnest(p_job_ids, p_fences) AS h(job_id, fence)
    LOOP
        IF v_pair.job_id = ANY (v_extended) THEN
            RETURN QUERY SELECT v_pair.job_id, v_pair.fence, 'extended'::text;
            CONTINUE;
        END IF;
        SELECT j.* INTO v_job FROM codity.jobs j WHERE j.id = v_pair.job_id;
        IF v_job.id IS NOT NULL AND v_job.status = 'cancelled' AND v_job.execution_seq = v_pair.fence THEN
            RETURN QUERY SELECT v_pair.job_id, v_pair.fence, 'cancelled'::text;
        ELSIF EXISTS (
            SELECT 1 FROM codity.job_executions x
            WHERE x.job_id = v_pair.job_id AND x.execution_seq = v_pair.fence
              AND x.worker_id = p_worker_id AND x.status IN ('completed', 'failed', 'released')
        ) THEN
            RETURN QUERY SELECT v_pair.job_id, v_pair.fence, 'done'::text;
        ELSE
            IF v_job.id IS NOT NULL THEN
                PERFORM codity._reject_stale(v_job, 'heartbeat', v_pair.fence, p_now);
            END IF;
            RETURN QUERY SELECT v_pair.job_id, v_pair.fence, 'lost'::text;
        END IF;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION codity.heartbeat(bigint, bigint[], integer[], timestamptz) IS
'Record a worker''s liveness and extend the leases of the jobs it lists (with their fences).

Each listed job comes back as extended; cancelled (stop it: an operator cancelled it);
done (your own complete, fail or release with that fence already committed: stop
heartbeating it); or lost (stop it: it was reaped or reclaimed; its result will be refused). Raises CD004
(unknown worker), CD005 (deregistered worker), CD010 (arrays of different lengths, or a NULL in
either).
Example: SELECT * FROM codity.heartbeat(1, ARRAY[42, 43]::bigint[], ARRAY[1, 2]);';

REVOKE ALL ON FUNCTION codity.heartbeat(bigint, bigint[], integer[], timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.heartbeat(bigint, bigint[], integer[], timestamptz) TO codity_app, codity_worker;
