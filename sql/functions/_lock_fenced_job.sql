-- codity._lock_fenced_job: lock the job a fenced call is about.
--
-- start, complete, fail and release all begin here: the fence must be given (a NULL would
-- compare as unknown and slip past the fence check), the job must exist (CD003), and its
-- row is locked FOR UPDATE so the call is serialised against cancel, reap and heartbeat.
-- The caller then compares the fence with the row it got back.
-- The job is looked up within its queue (DESIGN.md, "Room to scale out", rule 2): a job of
-- another queue is unknown here, and a NULL queue (a wrapper that found no job with this
-- id) finds nothing.
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._lock_fenced_job(p_queue_id bigint, p_job_id bigint, p_fence integer)
RETURNS codity.jobs
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $$
DECLARE
    v_job codity.jobs;
BEGIN
    IF p_fence IS NULL THEN
        RAISE EXCEPTION 'fence must not be NULL' USING ERRCODE = 'CD010',
              HINT = 'Pass the fence token that codity.claim returned with the job.';
    END IF;
    SELECT j.* INTO v_job FROM codity.jobs j
    WHERE j.queue_id = p_queue_id AND j.id = p_job_id
    FOR UPDATE;
    IF v_job.id IS NULL THEN
        RAISE EXCEPTION '%', codity._no_such_job(p_queue_id, p_job_id) USING ERRCODE = 'CD003';
    END IF;
    RETURN v_job;
END;
$$;

COMMENT ON FUNCTION codity._lock_fenced_job(bigint, bigint, integer) IS
'Private: lock a job row for a fenced call; raises CD010 for a NULL fence, CD003 for a missing job.';

REVOKE ALL ON FUNCTION codity._lock_fenced_job(bigint, bigint, integer) FROM PUBLIC;
