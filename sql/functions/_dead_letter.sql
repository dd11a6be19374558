-- codity._dead_letter: move one locked job to dead_letter and copy it to dead_letters.
--
-- The caller holds the job's row lock and has already checked the transition. The copy
-- keeps payload, task and reason so the dead letter outlives the job (its job_id stays as
-- history, not a foreign key: migration 0015).
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._dead_letter(
    p_queue_id bigint,
    p_job_id bigint,
    p_reason text,
    p_error text,
    p_now timestamptz
)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $$
DECLARE
    v_dead_letter_id bigint;
    v_job record;
BEGIN
    -- The letter is written from what the UPDATE returns, by VALUES: an INSERT ... SELECT
    -- from the jobs is not sent to the queue's shard by Citus but read from every shard
    -- and committed in two phases (DESIGN_DECISIONS 61).
    UPDATE codity.jobs j
    SET status = 'dead_letter', finished_at = p_now, lock_expires_at = NULL,
        last_error = coalesce(p_error, j.last_error), updated_at = p_now
    WHERE j.queue_id = p_queue_id AND j.id = p_job_id
    RETURNING j.id, j.project_id, j.task, j.payload, j.priority, j.last_error, j.attempt,
              j.workflow_id
    INTO v_job;
    IF v_job.id IS NULL THEN
        RETURN NULL;
    END IF;

    INSERT INTO codity.dead_letters (job_id, queue_id, project_id, task, payload, priority, reason, error, attempts, dead_at)
    VALUES (v_job.id, p_queue_id, v_job.project_id, v_job.task, v_job.payload, v_job.priority,
            p_reason, v_job.last_error, v_job.attempt, p_now)
    RETURNING id INTO v_dead_letter_id;
    IF v_job.workflow_id IS NOT NULL THEN  -- a workflow node: what runs after it is told now
        PERFORM codity._settle_nodes(p_queue_id, ARRAY[v_job.id], 'dead_letter', p_now);
    END IF;

    RETURN v_dead_letter_id;
END;
$$;

COMMENT ON FUNCTION codity._dead_letter(bigint, bigint, text, text, timestamptz) IS
'Private: dead-letter a locked job, copying payload and reason into codity.dead_letters.';

REVOKE ALL ON FUNCTION codity._dead_letter(bigint, bigint, text, text, timestamptz) FROM PUBLIC;
