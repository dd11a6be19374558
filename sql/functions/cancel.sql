-- codity.cancel: an operator stops a job that has not finished.
--
-- Waiting jobs (scheduled, queued) are cancelled outright. A held job (claimed, running)
-- is cancelled too and its execution closed; its worker learns it at its next heartbeat
-- ('cancelled') and any complete or fail it sends afterwards is refused by the fence.
-- Against complete: both lock the job row, so exactly one of them wins; the loser sees
-- the winner's status (cancel of a completed job raises CD020, a complete of a cancelled
-- one is rejected as stale). Locks the job row. Callers: operators, the web API.

CREATE OR REPLACE FUNCTION codity.cancel(
    p_job_id bigint,
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (job_id bigint, previous_status codity.job_status, job_status codity.job_status)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_job codity.jobs;
    v_queue_id bigint;
BEGIN
    PERFORM codity._check_clock(p_now);
    -- The job's queue first, by id alone (a read: on a Citus cluster every shard answers),
    -- then the lock and the write on that queue (DESIGN.md, "Room to scale out", rule 2).
    SELECT j.queue_id INTO v_queue_id FROM codity.jobs j WHERE j.id = p_job_id;
    SELECT j.* INTO v_job FROM codity.jobs j
    WHERE j.queue_id = v_queue_id AND j.id = p_job_id
      AND (p_project_id IS NULL OR j.project_id = p_project_id)
    FOR UPDATE;
    IF v_job.id IS NULL THEN
        RAISE EXCEPTION 'job % does not exist', p_job_id USING ERRCODE = 'CD003';
    END IF;
    PERFORM codity._check_transition(v_job.status, 'cancelled', v_job.id);

    UPDATE codity.jobs j
    SET status = 'cancelled', finished_at = p_now, lock_expires_at = NULL, updated_at = p_now
    WHERE j.queue_id = v_job.queue_id AND j.id = v_job.id;
    IF v_job.status IN ('claimed', 'running') THEN
        PERFORM codity._close_attempt(v_job, 'cancelled', p_now, 'cancelled by an operator');
    END IF;
    IF v_job.workflow_id IS NOT NULL THEN  -- a workflow node: what runs after it is told now
        PERFORM codity._settle_children(v_job.queue_id, ARRAY[v_job.id], 'cancelled', p_now);
    END IF;
    RETURN QUERY SELECT v_job.id, v_job.status, 'cancelled'::codity.job_status;
END;
$$;

COMMENT ON FUNCTION codity.cancel(bigint, bigint, timestamptz) IS
'Cancel a job that has not finished; a running one is told at its worker''s next heartbeat.

Raises CD003 (no such job in the project), CD020 (already completed, dead-lettered or
cancelled).
Example: SELECT * FROM codity.cancel(42);';

REVOKE ALL ON FUNCTION codity.cancel(bigint, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.cancel(bigint, bigint, timestamptz) TO codity_app;
