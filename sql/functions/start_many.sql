-- codity.start_many: claimed -> running for a batch of jobs, in one round trip.
--
-- The worker starts every job of a claim batch at once; a round trip per job would cap
-- throughput at the network's latency. Fenced per job: a job whose fence is stale
-- (reaped, reclaimed, cancelled) is left alone, recorded, and reported not accepted
-- (outcome 'stale'); one already started with this fence — a repeat after a lost COMMIT —
-- is accepted as 'already_applied' and changes nothing.
-- One queue per call (DESIGN.md, "Room to scale out", rules 1 and 2): the body takes the
-- queue's id and every statement filters on it; a job of another queue is unknown to it
-- (CD003). start_many(job_ids, fences), which callers have always used, is a wrapper that
-- calls the body once per queue of the batch and answers in input order.
-- Locks: the UPDATE locks the matching rows; one worker's jobs are never in two batches.
-- Callers: the Python worker after each claim (in the claim's statement), codity.start.

CREATE OR REPLACE FUNCTION codity.start_many_in_queue(
    p_queue_id bigint,
    p_job_ids bigint[],
    p_fences integer[],
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (
    job_id bigint,
    accepted boolean,
    outcome codity.call_outcome,
    job_status codity.job_status,
    detail text
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_started bigint[];
BEGIN
    PERFORM codity._check_clock(p_now);
    PERFORM codity._check_fence_arrays(p_job_ids, p_fences);
    PERFORM codity._check_transition('claimed', 'running');

    WITH started AS (
        UPDATE codity.jobs j
        SET status = 'running', started_at = p_now, updated_at = p_now
        FROM unnest(p_job_ids, p_fences) AS b(job_id, fence)
        WHERE j.queue_id = p_queue_id AND j.id = b.job_id
          AND j.execution_seq = b.fence AND j.status = 'claimed'
        RETURNING j.id, j.execution_seq
    )
    SELECT coalesce(array_agg(s.id), '{}') INTO v_started FROM started s;

    RETURN QUERY
    SELECT * FROM codity._fenced_batch_outcome(
        p_queue_id, p_job_ids, p_fences, v_started, 'running', 'running', 'start', p_now);
END;
$$;

COMMENT ON FUNCTION codity.start_many_in_queue(bigint, bigint[], integer[], timestamptz) IS
'Mark a batch of claimed jobs of one queue running in one call; fenced per job like codity.start.

One row per input position, in order. outcome is applied; already_applied (started before
with this fence, or a repeat within the batch: nothing changed); or stale (accepted =
false, nothing changed, rejection recorded in fence_rejections). Raises CD003 (no such
job in this queue), CD010 (arrays of different lengths or with NULLs), CD020 (a held job
with a current fence that may not start).
Example: SELECT * FROM codity.start_many_in_queue(3, ARRAY[42, 43]::bigint[], ARRAY[1, 1]);';

REVOKE ALL ON FUNCTION codity.start_many_in_queue(bigint, bigint[], integer[], timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.start_many_in_queue(bigint, bigint[], integer[], timestamptz) TO codity_app, codity_worker;

-- The jobs' queues looked up by id, one body call per queue, answers in input order.
CREATE OR REPLACE FUNCTION codity.start_many(
    p_job_ids bigint[],
    p_fences integer[],
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (
    job_id bigint,
    accepted boolean,
    outcome codity.call_outcome,
    job_status codity.job_status,
    detail text
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM codity._check_fence_arrays(p_job_ids, p_fences);
    RETURN QUERY
    SELECT s.job_id, s.accepted, s.outcome, s.job_status, s.detail
    FROM codity._job_groups(p_job_ids) AS g
    CROSS JOIN LATERAL codity.start_many_in_queue(
        g.queue_id, codity._at(p_job_ids, g.positions), codity._at(p_fences, g.positions), p_now
    ) WITH ORDINALITY AS s(job_id, accepted, outcome, job_status, detail, n)
    ORDER BY g.positions[s.n];
END;
$$;

COMMENT ON FUNCTION codity.start_many(bigint[], integer[], timestamptz) IS
'Mark a batch of claimed jobs running in one call, whatever their queues; fenced per job like codity.start.

One row per input position, in order. outcome is applied; already_applied (started before
with this fence, or a repeat within the batch: nothing changed); or stale (accepted =
false, nothing changed, rejection recorded in fence_rejections). Looks up each job''s queue
and calls start_many_in_queue(queue_id, ...) once per queue: a client that knows the queue calls
that directly. Raises CD003 (unknown job), CD010 (arrays of different lengths or with
NULLs), CD020 (a held job with a current fence that may not start).
Example: SELECT * FROM codity.start_many(ARRAY[42, 43]::bigint[], ARRAY[1, 1]);';

REVOKE ALL ON FUNCTION codity.start_many(bigint[], integer[], timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.start_many(bigint[], integer[], timestamptz) TO codity_app, codity_worker;
