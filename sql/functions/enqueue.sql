-- codity.enqueue: insert one job.
--
-- A thin wrapper over codity.enqueue_many so the two can never disagree on validation,
-- idempotency or NOTIFY. Locks only the inserted row (or waits on a concurrent insert of
-- the same idempotency key). Callers: psql, the web API, workers enqueueing follow-ups.

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
LANGUAGE sql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
    SELECT e.job_id, e.job_status, e.run_at, e.is_new
    FROM codity.enqueue_many(
        p_queue,
        pg_catalog.jsonb_build_array(pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
            'task', p_task,
            'run_at', p_run_at,
            'priority', p_priority,
            'idempotency_key', p_idempotency_key,
            'max_attempts', p_max_attempts
        )) || pg_catalog.jsonb_build_object('payload', coalesce(p_payload, '{}'::jsonb))),
        p_project_id,
        p_now
    ) AS e;
$$;

COMMENT ON FUNCTION codity.enqueue(text, text, jsonb, timestamptz, integer, text, integer, bigint, timestamptz) IS
'Enqueue one job into a queue; returns its id, status, run_at and whether it is new.

A job with run_at in the future starts scheduled, otherwise queued. With an idempotency
key that already names a job in this queue, nothing is inserted and that job is
returned with is_new = false. Priority runs from -1000 to 1000, higher first. Raises
CD001 (unknown queue), CD010 (bad argument), CD011 (payload over 64 KB).
Example: SELECT * FROM codity.enqueue(''emails'', ''emails.send'', ''{"to": "a@example.com"}'');';

REVOKE ALL ON FUNCTION codity.enqueue(text, text, jsonb, timestamptz, integer, text, integer, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.enqueue(text, text, jsonb, timestamptz, integer, text, integer, bigint, timestamptz) TO codity_app, codity_worker;
