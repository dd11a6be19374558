-- codity.extend_leases: extend the leases of one queue's jobs that a worker still holds.
--
-- The per-queue part of codity.heartbeat (DESIGN.md, "Room to scale out", rules 1, 2 and
-- 9): it takes the queue's id, every statement filters on it, and the new lease end is
-- computed before the UPDATE. It does not touch the worker row: heartbeat marks the worker
-- alive and calls this once per queue of the jobs it lists. A client that keeps to the
-- rules itself may call heartbeat(worker) and then this per queue.
--
-- Each listed job whose fence still matches and that this worker still holds gets a lease
-- of the queue's lease_seconds from p_now (never shorter than the one it has). Every
-- listed job comes back, in input order, with a state: 'extended'; 'cancelled' (an
-- operator cancelled it: stop the handler); 'done' (this worker's own complete, fail or
-- release with that fence already committed — its answer may have been lost on the way
-- back: stop heartbeating it, nothing is recorded); or 'lost' (reaped or reclaimed, or no
-- such job in this queue: stop the handler, its result will be refused). Lost calls on a
-- job that exists are recorded like any stale fence.
--
-- Against the reaper: both write the same rows. If this commits first the lease is in the
-- future and the reaper, which repeats its whole condition in its UPDATE, leaves the job
-- alone; if the reaper commits first this finds the job queued and reports it lost.
-- Locks the listed job rows of the queue. Callers: codity.heartbeat.

CREATE OR REPLACE FUNCTION codity.extend_leases(
    p_queue_id bigint,
    p_worker_id bigint,
    p_job_ids bigint[],
    p_fences integer[],
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
    v_lease_end timestamptz;
    v_extended bigint[];
    v_job codity.jobs;
    v_pair record;
BEGIN
    PERFORM codity._check_clock(p_now);
    PERFORM codity._check_fence_arrays(p_job_ids, p_fences);
    -- The lease end first: no time arithmetic on columns inside the UPDATE (rule 9). A
    -- NULL queue is heartbeat's group of ids that name no job: all of them are lost.
    IF p_queue_id IS NOT NULL THEN
        v_lease_end := p_now + pg_catalog.make_interval(
            secs => (codity._queue(p_queue_id, NULL)).lease_seconds);
    END IF;

    WITH extended AS (
        UPDATE codity.jobs j
        SET lock_expires_at = GREATEST(j.lock_expires_at, v_lease_end), updated_at = p_now
        FROM unnest(p_job_ids, p_fences) AS h(job_id, fence)
        WHERE j.queue_id = p_queue_id
          AND j.id = h.job_id
          AND j.execution_seq = h.fence
          AND j.status IN ('claimed', 'running')
          AND j.worker_id = p_worker_id
        RETURNING j.id
    )
    SELECT coalesce(array_agg(e.id), '{}') INTO v_extended FROM extended e;

    FOR v_pair IN
        SELECT h.job_id, h.fence FROM unnest(p_job_ids, p_fences) WITH ORDINALITY AS h(job_id, fence, ord)
        ORDER BY h.ord
    LOOP
        IF v_pair.job_id = ANY (v_extended) THEN
            RETURN QUERY SELECT v_pair.job_id, v_pair.fence, 'extended'::text;
            CONTINUE;
        END IF;
        SELECT j.* INTO v_job FROM codity.jobs j WHERE j.queue_id = p_queue_id AND j.id = v_pair.job_id;
        IF v_job.id IS NOT NULL AND v_job.status = 'cancelled' AND v_job.execution_seq = v_pair.fence THEN
            RETURN QUERY SELECT v_pair.job_id, v_pair.fence, 'cancelled'::text;
        ELSIF EXISTS (
            SELECT 1 FROM codity.job_executions x
            WHERE x.queue_id = p_queue_id AND x.job_id = v_pair.job_id AND x.execution_seq = v_pair.fence
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

COMMENT ON FUNCTION codity.extend_leases(bigint, bigint, bigint[], integer[], timestamptz) IS
'Extend the leases of one queue''s jobs that a worker lists (with their fences); the per-queue part of codity.heartbeat.

Does not mark the worker alive: codity.heartbeat does that and calls this per queue. Each
listed job comes back, in input order, as extended; cancelled (stop it: an operator
cancelled it); done (your own complete, fail or release with that fence already
committed: stop heartbeating it); or lost (stop it: it was reaped or reclaimed, or is no
job of this queue; its result will be refused). Raises CD001 (no queue with this id),
CD010 (arrays NULL, of different lengths, or with a NULL).
Example: SELECT * FROM codity.extend_leases(3, 1, ARRAY[42, 43]::bigint[], ARRAY[1, 2]);';

REVOKE ALL ON FUNCTION codity.extend_leases(bigint, bigint, bigint[], integer[], timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.extend_leases(bigint, bigint, bigint[], integer[], timestamptz) TO codity_app, codity_worker;
