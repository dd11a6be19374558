-- codity.complete: running -> completed, closing the execution.
--
-- Fenced: a worker that was paused past its lease while another worker took the job
-- presents an old token; nothing changes, the call is recorded, accepted = false. Locks
-- the one job row, so a concurrent cancel or reap is serialised against it: whichever
-- commits first wins and the other sees the result. Caller: the worker.

CREATE OR REPLACE FUNCTION codity.complete(
    p_job_id bigint,
    p_fence integer,
    p_result jsonb DEFAULT NULL,
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
    IF p_result IS NOT NULL AND octet_length(p_result::text) > 65536 THEN
        RAISE EXCEPTION 'result is % bytes; the limit is 65536', octet_length(p_result::text)
            USING ERRCODE = 'CD011';
    END IF;
    v_job := codity._lock_fenced_job(p_job_id, p_fence);
    IF v_job.execution_seq <> p_fence OR v_job.status NOT IN ('claimed', 'running') THEN
        RETURN QUERY SELECT false, v_job.status, codity._reject_stale(v_job, 'complete', p_fence, p_now);
        RETURN;
    END IF;
    PERFORM codity._check_transition(v_job.status, 'completed', v_job.id);

    UPDATE codity.jobs j
    SET status = 'completed', finished_at = p_now, lock_expires_at = NULL, updated_at = p_now
    WHERE j.id = p_job_id;
    UPDATE codity.job_executions x
    SET status = 'completed', finished_at = p_now, result = p_result
    WHERE x.job_id = p_job_id AND x.execution_seq = p_fence;
    RETURN QUERY SELECT true, 'completed'::codity.job_status, 'completed'::text;
END;
$$;

COMMENT ON FUNCTION codity.complete(bigint, integer, jsonb, timestamptz) IS
'Complete a running job, closing its execution with an optional JSON result; fenced.

Returns accepted = false and changes nothing when the fence is stale: the job was reaped
and perhaps reclaimed by another worker, or cancelled. Raises CD003 (unknown job),
CD010 (NULL fence), CD011 (result over 64 KB), CD020 (e.g. completing a job that never started).
Example: SELECT * FROM codity.complete(42, 1, ''{"sent": true}'');';

REVOKE ALL ON FUNCTION codity.complete(bigint, integer, jsonb, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.complete(bigint, integer, jsonb, timestamptz) TO codity_app, codity_worker;
