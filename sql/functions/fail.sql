-- codity.fail: running -> failed -> scheduled (retry) or dead_letter.
--
-- Fenced like complete: a stale fence changes nothing (outcome 'stale', recorded); the same
-- call repeated by the fence's owner after a lost COMMIT finds its execution already closed
-- as failed and answers 'already_applied', changing nothing. The attempt was charged at claim; when it was the last one
-- (attempt >= max_attempts) or the failure is not retryable, the job is dead-lettered
-- with its payload and reason copied. Otherwise it is scheduled after
-- codity.backoff_delay (clamped, full jitter) and codity.promote queues it when due.
-- One queue per call (DESIGN.md, "Room to scale out", rules 1 and 2): the body takes the
-- queue's id and every statement filters on it; fail(job, fence, ...), which callers have
-- always used, looks the job's queue up and calls it.
-- Locks the one job row. Caller: the worker, when a handler raises or times out.

CREATE OR REPLACE FUNCTION codity.fail_in_queue(
    p_queue_id bigint,
    p_job_id bigint,
    p_fence integer,
    p_error text,
    p_retryable boolean DEFAULT true,
    p_now timestamptz DEFAULT now(),
    p_waited_ms integer DEFAULT NULL
)
RETURNS TABLE (
    accepted boolean,
    outcome codity.call_outcome,
    job_status codity.job_status,
    retry_at timestamptz,
    detail text
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_job codity.jobs;
    v_queue record;
    v_error text := left(coalesce(p_error, 'unknown error'), 8192);
    v_retry_at timestamptz;
    v_reason text;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_waited_ms < 0 THEN
        RAISE EXCEPTION 'waited_ms must be NULL or 0 or more, got %', p_waited_ms USING ERRCODE = 'CD010';
    END IF;
    v_job := codity._lock_fenced_job(p_queue_id, p_job_id, p_fence);
    IF v_job.execution_seq <> p_fence OR v_job.status NOT IN ('claimed', 'running') THEN
        IF EXISTS (SELECT 1 FROM codity.job_executions x
                   WHERE x.queue_id = p_queue_id AND x.job_id = p_job_id
                     AND x.execution_seq = p_fence AND x.status = 'failed') THEN
            RETURN QUERY SELECT true, 'already_applied'::codity.call_outcome, v_job.status,
                                CASE WHEN v_job.status = 'scheduled' AND v_job.execution_seq = p_fence
                                     THEN v_job.run_at END,
                                pg_catalog.format('already failed with fence %s; nothing changed', p_fence);
            RETURN;
        END IF;
        RETURN QUERY SELECT false, 'stale'::codity.call_outcome, v_job.status, NULL::timestamptz,
                            codity._reject_stale(v_job, 'fail', p_fence, p_now);
        RETURN;
    END IF;
    PERFORM codity._check_transition(v_job.status, 'failed', v_job.id);
    v_queue := codity._queue(p_queue_id, NULL);

    -- The attempt began when its handler did: a prefetched job waited for a slot.
    v_job.started_at := codity._began(v_job.started_at, p_waited_ms, p_now);
    PERFORM codity._close_attempt(v_job, 'failed', p_now, v_error);

    IF NOT coalesce(p_retryable, true) OR v_job.attempt >= v_job.max_attempts THEN
        PERFORM codity._check_transition('failed', 'dead_letter', v_job.id);
        v_reason := CASE WHEN NOT coalesce(p_retryable, true) THEN 'failed: not retryable'
                         ELSE format('failed: max attempts reached (%s/%s)', v_job.attempt, v_job.max_attempts) END;
        UPDATE codity.jobs j SET last_error = v_error WHERE j.queue_id = p_queue_id AND j.id = p_job_id;
        PERFORM codity._dead_letter(p_queue_id, p_job_id, v_reason, v_error, p_now);
        RETURN QUERY SELECT true, 'applied'::codity.call_outcome, 'dead_letter'::codity.job_status,
                            NULL::timestamptz, v_reason;
        RETURN;
    END IF;

    PERFORM codity._check_transition('failed', 'scheduled', v_job.id);
    v_retry_at := p_now + codity.backoff_delay(v_queue.backoff, v_queue.base_delay_ms,
                                               v_queue.max_delay_ms, v_job.attempt);
    UPDATE codity.jobs j
    SET status = 'scheduled', run_at = v_retry_at, lock_expires_at = NULL,
        last_error = v_error, updated_at = p_now
    WHERE j.queue_id = p_queue_id AND j.id = p_job_id;
    RETURN QUERY SELECT true, 'applied'::codity.call_outcome, 'scheduled'::codity.job_status, v_retry_at,
                        format('retry %s of %s scheduled', v_job.attempt + 1, v_job.max_attempts);
END;
$$;

COMMENT ON FUNCTION codity.fail_in_queue(bigint, bigint, integer, text, boolean, timestamptz, integer) IS
'Record a failed attempt of a job of one queue: retry after backoff with full jitter, or dead-letter; fenced.

The job is dead-lettered when its attempts are used up or p_retryable is false; otherwise
it is scheduled at now + codity.backoff_delay(...) and retry_at says when. The error text
is kept (truncated to 8 KB) on the execution and the job. outcome: applied;
already_applied (this fence already failed: a repeat after a lost COMMIT; nothing changed);
stale (accepted = false, nothing changed, the rejection is recorded). p_waited_ms: the
milliseconds the job waited in the worker for a slot after its claim; the started_at of the
attempt moves on by that much, never past the failure. Raises CD003 (no such job in this
queue), CD010 (NULL fence, a negative wait), CD020 (e.g. failing a job that never started).
Example: SELECT * FROM codity.fail_in_queue(3, 42, 1, ''SMTPError: 451 try later'');';

REVOKE ALL ON FUNCTION codity.fail_in_queue(bigint, bigint, integer, text, boolean, timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.fail_in_queue(bigint, bigint, integer, text, boolean, timestamptz, integer) TO codity_app, codity_worker;

-- By job id alone: the job's queue looked up, then the body. PL/pgSQL, not a LANGUAGE sql
-- function: on a Citus cluster Citus would send the body, called from a SQL function, to the
-- node holding the queue with this side's p_now as a constant, where it differs from that
-- node's now() and reads as a moved clock (CD022); called from PL/pgSQL, the body runs here.
CREATE OR REPLACE FUNCTION codity.fail(
    p_job_id bigint,
    p_fence integer,
    p_error text,
    p_retryable boolean DEFAULT true,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (
    accepted boolean,
    outcome codity.call_outcome,
    job_status codity.job_status,
    retry_at timestamptz,
    detail text
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
DECLARE
    v_queue_id bigint;
BEGIN
    SELECT j.queue_id INTO v_queue_id FROM codity.jobs j WHERE j.id = p_job_id;
    RETURN QUERY
    SELECT f.accepted, f.outcome, f.job_status, f.retry_at, f.detail
    FROM codity.fail_in_queue(v_queue_id, p_job_id, p_fence, p_error, p_retryable, p_now) AS f;
END;
$$;

COMMENT ON FUNCTION codity.fail(bigint, integer, text, boolean, timestamptz) IS
'Record a failed attempt: retry after backoff with full jitter, or dead-letter; fenced.

The job is dead-lettered when its attempts are used up or p_retryable is false; otherwise
it is scheduled at now + codity.backoff_delay(...) and retry_at says when. The error text
is kept (truncated to 8 KB) on the execution and the job. outcome: applied;
already_applied (this fence already failed: a repeat after a lost COMMIT; nothing changed);
stale (accepted = false, nothing changed, the rejection is recorded). Looks up the job''s
queue and calls fail_in_queue(queue_id, ...): a client that knows the queue calls that directly.
Raises CD003 (unknown job), CD010 (NULL fence), CD020 (e.g. failing a job that never
started).
Example: SELECT * FROM codity.fail(42, 1, ''SMTPError: 451 try later'');';

REVOKE ALL ON FUNCTION codity.fail(bigint, integer, text, boolean, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.fail(bigint, integer, text, boolean, timestamptz) TO codity_app, codity_worker;
