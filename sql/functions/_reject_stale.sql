-- codity._reject_stale: record a call whose fence token is no longer current.
--
-- start, heartbeat, complete, fail and release change nothing when the caller's fence
-- (the execution_seq it was handed at claim) differs from the job's, or the job is no
-- longer held. The call is written down here, so an operator can see zombie workers.
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._reject_stale(
    p_job codity.jobs,
    p_call text,
    p_fence integer,
    p_now timestamptz
)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $$
DECLARE
    v_worker_id bigint;
BEGIN
    SELECT x.worker_id INTO v_worker_id
    FROM codity.job_executions x
    WHERE x.queue_id = p_job.queue_id AND x.job_id = p_job.id AND x.execution_seq = p_fence;

    INSERT INTO codity.fence_rejections
        (job_id, queue_id, project_id, worker_id, call, presented_fence, current_fence, job_status, rejected_at)
    VALUES
        (p_job.id, p_job.queue_id, p_job.project_id, v_worker_id, p_call, p_fence, p_job.execution_seq, p_job.status, p_now);

    RETURN format('stale fence %s: job %s is %s at fence %s; nothing was changed',
                  p_fence, p_job.id, p_job.status, p_job.execution_seq);
END;
$$;

COMMENT ON FUNCTION codity._reject_stale(codity.jobs, text, integer, timestamptz) IS
'Private: record a fenced call that arrived with a stale token and say why it was rejected.';

REVOKE ALL ON FUNCTION codity._reject_stale(codity.jobs, text, integer, timestamptz) FROM PUBLIC;
