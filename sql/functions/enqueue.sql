-- codity.enqueue_in_queue and codity.enqueue: insert one job.
--
-- Why one job has a body of its own (codity._enqueue_one), beside the batch body
-- codity.enqueue_many_in_queue: one job sent as typed arguments needs no JSON array built,
-- walked three times and read back. Measured as the backend's CPU per call (one
-- connection, a commit each; scripts/hot_path_cost.py, docs/PERFORMANCE.md): 550 us through
-- the batch body, 402 us through a body of its own. The two bodies cannot drift apart on
-- what they accept: the ranges are checked by the same codity._job_fields_problem, the
-- table's CHECK constraints stand behind both, and tests/test_enqueue_parity.py sends the
-- same jobs, good and bad, through both and compares answers, errors and rows.
--
-- Idempotency: a unique index on (queue_id, idempotency_key) over the jobs with a key, with
-- ON CONFLICT DO NOTHING; a concurrent enqueue with the same key waits on the index until
-- the other transaction ends, then finds its job with a new statement (so a new snapshot).
-- Locks: only the inserted row (or waits on a concurrent insert of the same key).
-- By queue id (DESIGN.md, "Room to scale out", rule 1): enqueue_in_queue, for clients that
-- know the id. By name: codity.enqueue resolves the queue, calls the body and wakes the
-- queue's workers when the job is due now and the queue is not paused (rule 10: the body
-- raises no NOTIFY). Both call the private body directly, not one another. codity.enqueue
-- reads its queue with a query of its own rather than through codity._queue, and calls
-- the body as an expression: two PL/pgSQL calls and a query fewer per job, 175.0 -> 166.7
-- us of server CPU per call, 291.8 -> 282.6 us wall (one connection, a commit each,
-- medians of 8 rounds of 3,000; migration 0028).
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
LANGUAGE sql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
    SELECT e.job_id, e.job_status, e.run_at, e.is_new
    FROM codity._queue(p_queue_id, NULL) AS q,
         LATERAL codity._enqueue_one(q.id, q.project_id, q.max_attempts, p_task, p_payload,
                                     p_run_at, p_priority, p_idempotency_key, p_max_attempts,
                                     p_now) AS e
    WHERE e.job_id IS NOT NULL;
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

-- By name, within a project (the default one when none is given; codity._queue, which says
-- why when there is none: CD001, CD002 or CD010). Then the body, then the wakeup, from this
-- side (rule 10).
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
    v_queue record;
    v_job record;
BEGIN
    -- The queue in one query, as codity._queue finds it; only a miss calls it, to raise
    -- the error that says why (CD002 for the project, CD010, CD001).
    SELECT q.id, q.project_id, q.is_paused, q.max_attempts INTO v_queue
    FROM codity.queues q
    WHERE q.name = p_queue
      AND q.project_id = coalesce(p_project_id,
                                  (SELECT p.id FROM codity.projects p WHERE p.is_default));
    IF NOT FOUND THEN
        PERFORM codity._queue(p_queue, p_project_id);
    END IF;
    v_job := codity._enqueue_one(v_queue.id, v_queue.project_id, v_queue.max_attempts, p_task,
                                 p_payload, p_run_at, p_priority, p_idempotency_key,
                                 p_max_attempts, p_now);
    IF NOT v_queue.is_paused AND coalesce(p_run_at, p_now) <= p_now THEN
        PERFORM codity._notify(v_queue.id);
    END IF;
    IF v_job.job_id IS NOT NULL THEN
        job_id := v_job.job_id;
        job_status := v_job.job_status;
        run_at := v_job.run_at;
        is_new := v_job.is_new;
        RETURN NEXT;
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
