-- codity.release: give a held job back to the queue without charging the attempt.
--
-- Aborted is not failed: a worker draining on SIGTERM releases what it could not finish,
-- and that attempt is refunded (execution status 'released', attempt_refunded = true).
-- Fenced like complete ('stale' when the fence is no longer current; 'already_applied'
-- when this fence's execution was already released, e.g. a repeat after a lost COMMIT).
-- One queue per call (DESIGN.md, "Room to scale out", rules 1 and 2): the body takes the
-- queue's id and every statement filters on it; release(job, fence), which callers have
-- always used, looks the job's queue up and calls it.
-- Locks the one job row. The wakeup for another worker comes from the caller's side, not
-- from the body, which Citus may run on another node (rule 10): release(job, fence) raises
-- it, and so must a client that calls release_in_queue.
-- Callers: the worker's drain, codity.deregister_worker.

CREATE OR REPLACE FUNCTION codity.release_in_queue(
    p_queue_id bigint,
    p_job_id bigint,
    p_fence integer,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (accepted boolean, outcome codity.call_outcome, job_status codity.job_status, detail text)
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
    v_job := codity._lock_fenced_job(p_queue_id, p_job_id, p_fence);
    IF v_job.execution_seq <> p_fence OR v_job.status NOT IN ('claimed', 'running') THEN
        IF EXISTS (SELECT 1 FROM codity.job_executions x
                   WHERE x.queue_id = p_queue_id AND x.job_id = p_job_id
                     AND x.execution_seq = p_fence AND x.status = 'released') THEN
            RETURN QUERY SELECT true, 'already_applied'::codity.call_outcome, v_job.status,
                                pg_catalog.format('already released with fence %s; nothing changed', p_fence);
            RETURN;
        END IF;
        RETURN QUERY SELECT false, 'stale'::codity.call_outcome, v_job.status,
                            codity._reject_stale(v_job, 'release', p_fence, p_now);
        RETURN;
    END IF;
    PERFORM codity._check_transition(v_job.status, 'queued', v_job.id);

    UPDATE codity.jobs j
    SET status = 'queued', attempt = j.attempt - 1, lock_expires_at = NULL, updated_at = p_now
    WHERE j.queue_id = p_queue_id AND j.id = p_job_id;
    PERFORM codity._close_attempt(v_job, 'released', p_now, p_refunded => true);
    RETURN QUERY SELECT true, 'applied'::codity.call_outcome, 'queued'::codity.job_status,
                        'released; attempt not charged'::text;
END;
$$;

COMMENT ON FUNCTION codity.release_in_queue(bigint, bigint, integer, timestamptz) IS
'Return a held job of one queue to it without charging its attempt (graceful drain); fenced.

outcome: applied; already_applied (this fence was already released: a repeat after a lost
COMMIT; nothing changed); stale (accepted = false, nothing changed, rejection recorded).
Raises no NOTIFY (the caller wakes the queue''s workers: pg_notify(''codity_v1'',
queue_id::text)). Raises CD003 (no such job in this queue), CD010 (NULL fence).
Example: SELECT * FROM codity.release_in_queue(3, 42, 1);';

REVOKE ALL ON FUNCTION codity.release_in_queue(bigint, bigint, integer, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.release_in_queue(bigint, bigint, integer, timestamptz) TO codity_app, codity_worker;

-- By job id alone: the job's queue looked up, then the body, then the wakeup (rule 10).
CREATE OR REPLACE FUNCTION codity.release(
    p_job_id bigint,
    p_fence integer,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (accepted boolean, outcome codity.call_outcome, job_status codity.job_status, detail text)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue_id bigint := (SELECT j.queue_id FROM codity.jobs j WHERE j.id = p_job_id);
    v_answer record;
BEGIN
    SELECT r.accepted, r.outcome, r.job_status, r.detail INTO v_answer
    FROM codity.release_in_queue(v_queue_id, p_job_id, p_fence, p_now) AS r;
    IF v_answer.outcome = 'applied' THEN
        PERFORM codity._notify(v_queue_id);
    END IF;
    RETURN QUERY SELECT v_answer.accepted, v_answer.outcome, v_answer.job_status, v_answer.detail;
END;
$$;

COMMENT ON FUNCTION codity.release(bigint, integer, timestamptz) IS
'Return a held job to the queue without charging its attempt (graceful drain); fenced.

outcome: applied; already_applied (this fence was already released: a repeat after a lost
COMMIT; nothing changed); stale (accepted = false, nothing changed, rejection recorded).
Looks up the job''s queue and calls release_in_queue(queue_id, ...): a client that knows the queue
calls that directly. Raises CD003 (unknown job), CD010 (NULL fence).
Example: SELECT * FROM codity.release(42, 1);';

REVOKE ALL ON FUNCTION codity.release(bigint, integer, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.release(bigint, integer, timestamptz) TO codity_app, codity_worker;
