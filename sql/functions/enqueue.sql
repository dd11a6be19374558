-- codity.enqueue_in_queue and codity.enqueue: insert one job.
--
-- Why a body of its own, beside the batch body codity.enqueue_many_in_queue: one job sent
-- as typed arguments needs no JSON array built, walked three times and read back. Measured
-- as the backend's CPU per call (one connection, a commit each; docs/PERFORMANCE.md), the
-- wrapper over the batch body took about 455 us and this body about 325-365 us. The two
-- bodies cannot drift apart on what they accept: the ranges are checked by the same
-- codity._job_fields_problem, the table's CHECK constraints stand behind both, and
-- tests/test_enqueue_parity.py sends the same jobs, good and bad, through both and compares
-- answers, errors and rows.
--
-- Idempotency: a unique index on (queue_id, idempotency_key) over the jobs with a key, with
-- ON CONFLICT DO NOTHING; a concurrent enqueue with the same key waits on the index until
-- the other transaction ends, then finds its job with a new statement (so a new snapshot).
-- Locks: only the inserted row (or waits on a concurrent insert of the same key).
-- By queue id (DESIGN.md, "Room to scale out", rule 1), and no NOTIFY from the body (rule
-- 10): codity.enqueue, by name, resolves the queue, calls the body and wakes the queue's
-- workers when the job is due now and the queue is not paused.
-- Callers: psql, the web API, workers enqueueing follow-ups (all through codity.enqueue).

CREATE OR REPLACE FUNCTION codity.enqueue_in_queue(
    p_queue_id bigint,
    p_task text,
    p_payload jsonb DEFAULT '{}',
    p_run_at timestamptz DEFAULT NULL,
    p_priority integer DEFAULT 0,
    p_idempotency_key text DEFAULT NULL,
    p_max_attempts integer DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (
    job_id bigint,
    job_status codity.job_status,
    run_at timestamptz,
    is_new boolean
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue record := codity._queue(p_queue_id, NULL);
    v_payload jsonb := coalesce(p_payload, '{}'::jsonb);
    v_run_at timestamptz := coalesce(p_run_at, p_now);
    v_problem text;
BEGIN
    -- The common case, p_now left out, without a statement.
    IF p_now IS DISTINCT FROM pg_catalog.now() THEN
        PERFORM codity._check_clock(p_now);
    END IF;
    v_problem := codity._job_fields_problem(p_task, p_priority, p_max_attempts, p_idempotency_key);
    IF v_problem IS NOT NULL THEN
        RAISE EXCEPTION 'invalid job: %', v_problem USING ERRCODE = 'CD010';
    END IF;
    IF octet_length(v_payload::text) > 65536 THEN
        RAISE EXCEPTION 'payload is % bytes; the limit is 65536', octet_length(v_payload::text)
            USING ERRCODE = 'CD011',
                  HINT = 'Store large data elsewhere and put a reference in the payload.';
    END IF;

    job_status := CASE WHEN v_run_at <= p_now THEN 'queued'::codity.job_status
                       ELSE 'scheduled'::codity.job_status END;
    INSERT INTO codity.jobs AS j
        (queue_id, project_id, task, payload, priority, status, run_at, max_attempts,
         idempotency_key, created_at, updated_at)
    VALUES (v_queue.id, v_queue.project_id, p_task, v_payload, coalesce(p_priority, 0),
            job_status, v_run_at, coalesce(p_max_attempts, v_queue.max_attempts),
            p_idempotency_key, p_now, p_now)
    ON CONFLICT (queue_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING j.id INTO job_id;
    IF job_id IS NOT NULL THEN
        run_at := v_run_at;
        is_new := true;
        RETURN NEXT;
        RETURN;
    END IF;
    -- The key names a job already: that one is the answer.
    SELECT j.id, j.status, j.run_at, false INTO job_id, job_status, run_at, is_new
    FROM codity.jobs j
    WHERE j.queue_id = v_queue.id AND j.idempotency_key = p_idempotency_key;
    IF FOUND THEN
        RETURN NEXT;
    END IF;
END;
$$;

COMMENT ON FUNCTION codity.enqueue_in_queue(bigint, text, jsonb, timestamptz, integer, text, integer, timestamptz) IS
'Enqueue one job into a queue given by id; returns its id, status, run_at and whether it is new.

The same job as codity.enqueue takes, by the same rules, for a client that knows the
queue''s id. Raises no NOTIFY (the caller wakes the queue''s workers:
pg_notify(''codity_v1'', queue_id::text)). Raises CD001 (no queue with this id), CD010 (bad
argument), CD011 (payload over 64 KB).
Example: SELECT * FROM codity.enqueue_in_queue(3, ''emails.send'', ''{"to": "a@example.com"}'');';

REVOKE ALL ON FUNCTION codity.enqueue_in_queue(bigint, text, jsonb, timestamptz, integer, text, integer, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.enqueue_in_queue(bigint, text, jsonb, timestamptz, integer, text, integer, timestamptz) TO codity_app, codity_worker;

-- By name, within a project (the default one when none is given): one query for the common
-- case; when it finds nothing, codity._queue says why (CD001, CD002 or CD010). Then the
-- body, then the wakeup, from this side (rule 10).
CREATE OR REPLACE FUNCTION codity.enqueue(
    p_queue text,
    p_task text,
    p_payload jsonb DEFAULT '{}',
    p_run_at timestamptz DEFAULT NULL,
    p_priority integer DEFAULT 0,
    p_idempotency_key text DEFAULT NULL,
    p_max_attempts integer DEFAULT NULL,
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (
    job_id bigint,
    job_status codity.job_status,
    run_at timestamptz,
    is_new boolean
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue_id bigint;
    v_is_paused boolean;
BEGIN
    SELECT q.id, q.is_paused INTO v_queue_id, v_is_paused
    FROM codity.queues q
    WHERE q.name = p_queue
      AND q.project_id = coalesce(p_project_id,
                                  (SELECT p.id FROM codity.projects p WHERE p.is_default));
    IF NOT FOUND THEN
        SELECT q.id, q.is_paused INTO v_queue_id, v_is_paused
        FROM codity._queue(p_queue, p_project_id) AS q;
    END IF;
    RETURN QUERY
    SELECT e.job_id, e.job_status, e.run_at, e.is_new
    FROM codity.enqueue_in_queue(v_queue_id, p_task, p_payload, p_run_at, p_priority,
                                 p_idempotency_key, p_max_attempts, p_now) AS e;
    IF NOT v_is_paused AND coalesce(p_run_at, p_now) <= p_now THEN
        PERFORM codity._notify(v_queue_id);
    END IF;
END;
$$;

COMMENT ON FUNCTION codity.enqueue(text, text, jsonb, timestamptz, integer, text, integer, bigint, timestamptz) IS
'Enqueue one job into a queue; returns its id, status, run_at and whether it is new.

A job with run_at in the future starts scheduled, otherwise queued. With an idempotency
key that already names a job in this queue, nothing is inserted and that job is
returned with is_new = false. Priority runs from -1000 to 1000, higher first. Raises
one codity_v1 NOTIFY for the queue when the job is due now (unless the queue is paused).
Raises CD001 (unknown queue), CD010 (bad argument), CD011 (payload over 64 KB).
Example: SELECT * FROM codity.enqueue(''emails'', ''emails.send'', ''{"to": "a@example.com"}'');';

REVOKE ALL ON FUNCTION codity.enqueue(text, text, jsonb, timestamptz, integer, text, integer, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.enqueue(text, text, jsonb, timestamptz, integer, text, integer, bigint, timestamptz) TO codity_app, codity_worker;
