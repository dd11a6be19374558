-- codity.enqueue: insert one job.
--
-- A thin wrapper over the batch body, codity.enqueue_many_in_queue, so the two can never
-- disagree on validation or idempotency. It resolves the name itself and calls the body
-- directly, not through codity.enqueue_many: one plpgsql frame and one materialized result
-- less per job, and the wakeup needs no pass over a batch (one job: due when p_run_at is
-- NULL or not after p_now). The wakeup is raised here, on the caller's side (DESIGN.md,
-- "Room to scale out", rule 10), under the same condition as enqueue_many's. Locks only the
-- inserted row (or waits on a concurrent insert of the same idempotency key). Callers:
-- psql, the web API, workers enqueueing follow-ups.

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
    v_queue record := codity._queue(p_queue, p_project_id);
BEGIN
    RETURN QUERY
    SELECT e.job_id, e.job_status, e.run_at, e.is_new
    FROM codity.enqueue_many_in_queue(
        v_queue.id,
        pg_catalog.jsonb_build_array(pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
            'task', p_task,
            'run_at', p_run_at,
            'priority', p_priority,
            'idempotency_key', p_idempotency_key,
            'max_attempts', p_max_attempts
        )) || pg_catalog.jsonb_build_object('payload', coalesce(p_payload, '{}'::jsonb))),
        p_now
    ) AS e;
    IF NOT v_queue.is_paused AND coalesce(p_run_at, p_now) <= p_now THEN
        PERFORM codity._notify(v_queue.id);
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
