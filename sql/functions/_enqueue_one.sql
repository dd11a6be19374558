-- codity._enqueue_one: the body that inserts one job into a queue given by id.
--
-- Private, so that the two public ways in share it without one definer function calling
-- another: codity.enqueue (by name) and codity.enqueue_in_queue (by id) are both SECURITY
-- DEFINER with a pinned search_path, and a definer calling a definer pays for setting and
-- restoring that path again (about 35 us of a 400 us call, measured with
-- scripts/hot_path_cost.py). Why one job has a body apart from the batch body, and how the
-- two are kept alike: sql/functions/enqueue.sql. Locks only the inserted row (or waits on a
-- concurrent insert of the same idempotency key). Raises no NOTIFY (DESIGN.md, "Room to
-- scale out", rule 10). The caller has found the queue (raising CD001 or CD002 through
-- codity._queue when there is none) and passes its project and default max_attempts, so
-- the queue is read once per job.
--
-- One row, not a set (migration 0028): codity.enqueue calls it as an expression and reads
-- the fields, where a set-returning body had to be run as a query of its own and its rows
-- gathered into a tuplestore. A key whose job vanished between the conflict and the look-up
-- (deleted meanwhile) answers a row of NULLs, which the callers drop.
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._enqueue_one(
    p_queue_id bigint,
    p_project_id bigint,
    p_queue_max_attempts integer,
    p_task text,
    p_payload jsonb DEFAULT '{}',
    p_run_at timestamptz DEFAULT NULL,
    p_priority integer DEFAULT 0,
    p_idempotency_key text DEFAULT NULL,
    p_max_attempts integer DEFAULT NULL,
    p_now timestamptz DEFAULT now(),
    OUT job_id bigint,
    OUT job_status codity.job_status,
    OUT run_at timestamptz,
    OUT is_new boolean
)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $$
#variable_conflict use_column
DECLARE
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
    VALUES (p_queue_id, p_project_id, p_task, v_payload, coalesce(p_priority, 0),
            job_status, v_run_at, coalesce(p_max_attempts, p_queue_max_attempts),
            p_idempotency_key, p_now, p_now)
    ON CONFLICT (queue_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING j.id INTO job_id;
    IF job_id IS NOT NULL THEN
        run_at := v_run_at;
        is_new := true;
        RETURN;
    END IF;
    -- The key names a job already: that one is the answer (all NULL if it is gone).
    SELECT j.id, j.status, j.run_at, false INTO job_id, job_status, run_at, is_new
    FROM codity.jobs j
    WHERE j.queue_id = p_queue_id AND j.idempotency_key = p_idempotency_key;
END;
$$;

COMMENT ON FUNCTION codity._enqueue_one(bigint, bigint, integer, text, jsonb, timestamptz, integer, text, integer, timestamptz) IS
'Private: insert one job into the queue with this id (or find the job its idempotency key names); the body of enqueue and enqueue_in_queue.';

REVOKE ALL ON FUNCTION codity._enqueue_one(bigint, bigint, integer, text, jsonb, timestamptz, integer, text, integer, timestamptz) FROM PUBLIC;
