-- codity.start: claimed -> running, when the handler begins.
--
-- Fenced: with a fence token that is no longer the job's (reaped, reclaimed, cancelled),
-- nothing changes; the call is recorded in codity.fence_rejections and accepted = false
-- says so. Locks the one job row. Caller: the worker, right before running the handler.

CREATE OR REPLACE FUNCTION codity.start(
    p_job_id bigint,
    p_fence integer,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (accepted boolean, job_status codity.job_status, detail text)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_job codity.jobs;
BEGIN
    PERFORM codity._check_clock(p_now);
    v_job := codity._lock_fenced_job(p_job_id, p_fence);
    IF v_job.execution_seq <> p_fence OR v_job.status NOT IN ('claimed', 'running') THEN
        RETURN QUERY SELECT false, v_job.status, codity._reject_stale(v_job, 'start', p_fence, p_now);
        RETURN;
    END IF;
    PERFORM codity._check_transition(v_job.status, 'running', v_job.id);

    UPDATE codity.jobs j SET status = 'running', started_at = p_now, updated_at = p_now
    WHERE j.id = p_job_id;
    UPDATE codity.job_executions x SET status = 'running', started_at = p_now
    WHERE x.job_id = p_job_id AND x.execution_seq = p_fence;
    RETURN QUERY SELECT true, 'running'::codity.job_status, 'started'::text;
END;
$$;

COMMENT ON FUNCTION codity.start(bigint, integer, timestamptz) IS
'Mark a claimed job running (its handler has started); fenced by the claim''s token.

Returns accepted = false, changing nothing, when the fence is stale (the job was reaped,
reclaimed or cancelled); the rejection is recorded. Raises CD003 (unknown job), CD010
(NULL fence), CD020 (the job is not in a state that may start).
Example: SELECT * FROM codity.start(42, 1);';

REVOKE ALL ON FUNCTION codity.start(bigint, integer, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.start(bigint, integer, timestamptz) TO codity_app, codity_worker;
