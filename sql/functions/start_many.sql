-- codity.start_many: claimed -> running for a batch of jobs, in one round trip.
--
-- The worker starts every job of a claim batch at once; a round trip per job would cap
-- throughput at the network's latency. Fenced per job: a job whose fence is stale
-- (reaped, reclaimed, cancelled) is left alone, recorded, and reported not accepted
-- (outcome 'stale'); one already started with this fence — a repeat after a lost COMMIT —
-- is accepted as 'already_applied' and changes nothing.
-- Locks: the UPDATE locks the matching rows; one worker's jobs are never in two batches.
-- Callers: the Python worker after each claim (in the claim's statement), codity.start.

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
        WHERE j.id = b.job_id AND j.execution_seq = b.fence AND j.status = 'claimed'
        RETURNING j.id, j.execution_seq
    )
    SELECT coalesce(array_agg(s.id), '{}') INTO v_started FROM started s;

    RETURN QUERY
    SELECT * FROM codity._fenced_batch_outcome(
        p_job_ids, p_fences, v_started, 'running', 'running', 'start', p_now);
END;
$$;

COMMENT ON FUNCTION codity.start_many(bigint[], integer[], timestamptz) IS
'Mark a batch of claimed jobs running in one call; fenced per job like codity.start.

One row per input position, in order. outcome is applied; already_applied (started before
with this fence, or a repeat within the batch: nothing changed); or stale (accepted =
false, nothing changed, rejection recorded in fence_rejections). Raises CD003 (unknown
job), CD010 (arrays of different lengths or with NULLs), CD020 (a held job with a current
fence that may not start).
Example: SELECT * FROM codity.start_many(ARRAY[42, 43]::bigint[], ARRAY[1, 1]);';

REVOKE ALL ON FUNCTION codity.start_many(bigint[], integer[], timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.start_many(bigint[], integer[], timestamptz) TO codity_app, codity_worker;
