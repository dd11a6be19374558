-- codity.retry_job: an operator retries a dead-lettered job, addressed by the job's id.
--
-- Why it exists beside replay_dead_letter: an operator looking at a job knows its id, not
-- the id of the dead letter it left. This finds the job's latest unreplayed dead letter
-- and replays it through codity.replay_dead_letter, so both paths share one rule. Any
-- other state is an illegal transition (CD020) naming the state, so a client can tell
-- "not dead" from "no such job" (CD003) and "already replayed" (CD021).
--
-- Locks: none of its own. It reads the job without a lock and lets replay_dead_letter
-- lock the dead letter, then the job, in that order (the order every replay uses, so two
-- concurrent retries or a retry racing a replay cannot deadlock). The loser of such a
-- race sees the letter already replayed (CD021). Callers: the web API, operators.

CREATE OR REPLACE FUNCTION codity.retry_job(
    p_job_id bigint,
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (job_id bigint, dead_letter_id bigint, job_status codity.job_status)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_project_id bigint := codity._project_id(p_project_id);
    v_job codity.jobs;
    v_dead_letter_id bigint;
    v_replayed record;
BEGIN
    PERFORM codity._check_clock(p_now);
    SELECT j.* INTO v_job FROM codity.jobs j
    WHERE j.id = p_job_id AND j.project_id = v_project_id;
    IF v_job.id IS NULL THEN
        RAISE EXCEPTION 'job % does not exist', p_job_id USING ERRCODE = 'CD003';
    END IF;
    IF v_job.status <> 'dead_letter' THEN
        RAISE EXCEPTION 'job % is %; only a dead-lettered job can be retried', v_job.id, v_job.status
            USING ERRCODE = 'CD020',
                  HINT = 'Cancel a waiting job instead, or wait for a running one to finish.';
    END IF;

    SELECT d.id INTO v_dead_letter_id FROM codity.dead_letters d
    WHERE d.job_id = v_job.id AND d.queue_id = v_job.queue_id AND d.replayed_at IS NULL
    ORDER BY d.dead_at DESC, d.id DESC
    LIMIT 1;
    IF v_dead_letter_id IS NULL THEN
        RAISE EXCEPTION 'job % has no dead letter left to replay', v_job.id
            USING ERRCODE = 'CD021', HINT = 'It was replayed already.';
    END IF;

    SELECT r.job_id, r.job_status INTO v_replayed
    FROM codity.replay_dead_letter(v_dead_letter_id, v_project_id, p_now) AS r;
    RETURN QUERY SELECT v_replayed.job_id, v_dead_letter_id, v_replayed.job_status;
END;
$$;

COMMENT ON FUNCTION codity.retry_job(bigint, bigint, timestamptz) IS
'Retry a dead-lettered job: replay its latest unreplayed dead letter, with fresh attempts.

Returns the job id (a new one when the job had been deleted), the dead letter replayed
and the new status. Raises CD003 (no such job in the project), CD020 (the job is not
dead-lettered), CD021 (its dead letter was already replayed).
Example: SELECT * FROM codity.retry_job(42);';

REVOKE ALL ON FUNCTION codity.retry_job(bigint, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.retry_job(bigint, bigint, timestamptz) TO codity_app;
