-- codity.heartbeat: "I am alive, and these are the jobs I am running".
--
-- Updates the worker's last_heartbeat_at (a worker declared dead that heartbeats again is
-- alive after all: it becomes active again, but what was reaped stays lost) and extends
-- the lease of each listed job whose fence still matches and that this worker still holds,
-- through codity.extend_leases, which says what each state means. Every listed job comes
-- back, in input order: 'extended', 'cancelled', 'done' or 'lost'; an id that names no
-- job is 'lost'.
-- Cross-queue work (DESIGN.md, "Room to scale out", rules 1 and 6): the worker row is
-- heartbeat's; the leases are codity.extend_leases', called once per queue of the listed
-- jobs, each call on one queue. A caller that knows each job's queue passes p_queue_ids
-- (the Python worker does): then nothing asks which queue holds a job, which on a Citus
-- cluster is a read of every shard at every heartbeat (migration 0032). A wrong queue id
-- only costs the caller its own lease: the job is not found in that queue and comes back
-- 'lost'. With no jobs listed, no job table is read at all.
-- Locks the worker row, then the listed job rows queue by queue. Caller: the worker,
-- every 5 s.

CREATE OR REPLACE FUNCTION codity.heartbeat(
    p_worker_id bigint,
    p_job_ids bigint[] DEFAULT '{}',
    p_fences integer[] DEFAULT '{}',
    p_now timestamptz DEFAULT now(),
    p_queue_ids bigint[] DEFAULT NULL
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

    IF coalesce(cardinality(p_job_ids), 0) = 0 THEN
        RETURN;
    END IF;
    IF p_queue_ids IS NULL THEN
        RETURN QUERY
        SELECT e.job_id, e.fence, e.state
        FROM codity._job_groups(p_job_ids) AS g
        CROSS JOIN LATERAL codity.extend_leases(
            g.queue_id, p_worker_id, codity._at(p_job_ids, g.positions),
            codity._at(p_fences, g.positions), p_now
        ) WITH ORDINALITY AS e(job_id, fence, state, n)
        ORDER BY g.positions[e.n];
        RETURN;
    END IF;
    IF cardinality(p_queue_ids) <> cardinality(p_job_ids) OR array_position(p_queue_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'p_queue_ids must name the queue of each job: % queue ids for % jobs',
                        cardinality(p_queue_ids), cardinality(p_job_ids)
            USING ERRCODE = 'CD010', HINT = 'Leave p_queue_ids out to have them looked up.';
    END IF;
    RETURN QUERY
    SELECT e.job_id, e.fence, e.state
    FROM (SELECT u.queue_id, pg_catalog.array_agg(u.ord ORDER BY u.ord) AS positions
          FROM unnest(p_queue_ids) WITH ORDINALITY AS u(queue_id, ord)
          GROUP BY u.queue_id) AS g
    CROSS JOIN LATERAL codity.extend_leases(
        g.queue_id, p_worker_id, codity._at(p_job_ids, g.positions),
        codity._at(p_fences, g.positions), p_now
    ) WITH ORDINALITY AS e(job_id, fence, state, n)
    ORDER BY g.positions[e.n];
END;
$$;

COMMENT ON FUNCTION codity.heartbeat(bigint, bigint[], integer[], timestamptz, bigint[]) IS
'Record a worker''s liveness and extend the leases of the jobs it lists (with their fences).

Each listed job comes back as extended; cancelled (stop it: an operator cancelled it);
done (your own complete, fail or release with that fence already committed: stop
heartbeating it); or lost (stop it: it was reaped or reclaimed; its result will be refused). Raises CD004
(unknown worker), CD005 (deregistered worker), CD010 (arrays of different lengths, or a NULL in
either). p_queue_ids, when given, names each job''s queue (one per job): the jobs are then
not looked up by id, which on a Citus cluster reads every shard.
Example: SELECT * FROM codity.heartbeat(1, ARRAY[42, 43]::bigint[], ARRAY[1, 2]);';

REVOKE ALL ON FUNCTION codity.heartbeat(bigint, bigint[], integer[], timestamptz, bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.heartbeat(bigint, bigint[], integer[], timestamptz, bigint[]) TO codity_app, codity_worker;
