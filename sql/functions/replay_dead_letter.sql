-- codity.replay_dead_letter: give a dead-lettered job a fresh start.
--
-- When the job still exists (and is still dead_letter) it goes back to queued with its
-- attempts and crash count reset: the operator has fixed whatever killed it. When the job
-- was deleted, a new job is enqueued from the payload copied into the dead letter. Either
-- way the dead letter records when and into which job it was replayed, once (CD021).
-- A workflow node's children it held (edges 'hold') wait for it again; those it cancelled
-- stay cancelled (codity.retry_workflow brings a whole branch back). On a Citus cluster a
-- node's dead-lettering may not be folded into its children yet: it is folded first
-- (codity._fold_settlements, in the tick's turn: codity._hold_settlements).
-- Locks the dead-letter row and the job row. Callers: operators, the web API.

CREATE OR REPLACE FUNCTION codity.replay_dead_letter(
    p_dead_letter_id bigint,
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (job_id bigint, job_status codity.job_status)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_dead codity.dead_letters;
    v_job codity.jobs;
    v_queue codity.queues;
    v_job_id bigint;
    v_queue_id bigint;
BEGIN
    PERFORM codity._check_clock(p_now);
    -- The letter's queue first, by id alone (a read: on a Citus cluster every shard
    -- answers), then the lock and the writes on that queue (DESIGN.md, "Room to scale out",
    -- rule 2).
    SELECT d.queue_id INTO v_queue_id FROM codity.dead_letters d WHERE d.id = p_dead_letter_id;
    SELECT d.* INTO v_dead FROM codity.dead_letters d
    WHERE d.queue_id = v_queue_id AND d.id = p_dead_letter_id
      AND (p_project_id IS NULL OR d.project_id = p_project_id)
    FOR UPDATE;
    IF v_dead.id IS NULL THEN
        RAISE EXCEPTION 'dead letter % does not exist', p_dead_letter_id USING ERRCODE = 'CD007';
    END IF;
    IF v_dead.replayed_at IS NOT NULL THEN
        RAISE EXCEPTION 'dead letter % was already replayed', p_dead_letter_id
            USING ERRCODE = 'CD021',
                  DETAIL = format('Replayed at %s into job %s.', v_dead.replayed_at, v_dead.replayed_job_id);
    END IF;
    SELECT q.* INTO v_queue FROM codity.queues q WHERE q.id = v_dead.queue_id;

    SELECT j.* INTO v_job FROM codity.jobs j
    WHERE j.queue_id = v_dead.queue_id AND j.id = v_dead.job_id
    FOR UPDATE;
    IF v_job.id IS NOT NULL AND v_job.status = 'dead_letter' THEN
        PERFORM codity._check_transition('dead_letter', 'queued', v_job.id);
        UPDATE codity.jobs j
        SET status = 'queued', attempt = 0, crash_count = 0, run_at = p_now, finished_at = NULL,
            lock_expires_at = NULL, updated_at = p_now
        WHERE j.queue_id = v_job.queue_id AND j.id = v_job.id;
        IF v_job.workflow_id IS NOT NULL THEN  -- the children it holds wait for it again
            -- A Citus cluster: its settlement, if the tick has not folded it yet, first
            -- (the tick waits for no row this holds, so taking its turn here is safe).
            PERFORM codity._hold_settlements();
            PERFORM codity._fold_settlements(ARRAY[v_job.queue_id], ARRAY[v_job.id], p_now);
            PERFORM codity._reopen_held(v_job.queue_id, ARRAY[v_job.id]);
        END IF;
        v_job_id := v_job.id;
    ELSE
        INSERT INTO codity.jobs
            (queue_id, project_id, task, payload, priority, status, run_at, max_attempts,
             created_at, updated_at)
        VALUES (v_dead.queue_id, v_dead.project_id, v_dead.task, v_dead.payload, v_dead.priority, 'queued', p_now,
                v_queue.max_attempts, p_now, p_now)
        RETURNING id INTO v_job_id;
    END IF;

    UPDATE codity.dead_letters d SET replayed_at = p_now, replayed_job_id = v_job_id
    WHERE d.queue_id = v_dead.queue_id AND d.id = v_dead.id;
    IF NOT v_queue.is_paused THEN
        PERFORM codity._notify(v_queue.id);
    END IF;
    RETURN QUERY SELECT v_job_id, 'queued'::codity.job_status;
END;
$$;

COMMENT ON FUNCTION codity.replay_dead_letter(bigint, bigint, timestamptz) IS
'Send a dead-lettered job back to its queue with fresh attempts (or re-create it if deleted).

Raises CD007 (no such dead letter in the project), CD021 (already replayed).
Example: SELECT * FROM codity.replay_dead_letter(7);';

REVOKE ALL ON FUNCTION codity.replay_dead_letter(bigint, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.replay_dead_letter(bigint, bigint, timestamptz) TO codity_app;
