-- codity._job_spec_problem: what is wrong with one job description, or NULL.
--
-- enqueue_many takes a JSON array of objects so that any client can send a batch in one
-- round trip. Each object is checked here before anything is written: known keys only,
-- each of the right JSON type and range. Payload size is checked by the caller (CD011).
-- Pure; locks nothing.
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._job_spec_problem(p_spec jsonb)
RETURNS text
LANGUAGE plpgsql
IMMUTABLE
SECURITY INVOKER
AS $$
DECLARE
    v_key text;
BEGIN
    IF jsonb_typeof(p_spec) IS DISTINCT FROM 'object' THEN
        RETURN 'must be a JSON object';
    END IF;
    FOR v_key IN SELECT k FROM jsonb_object_keys(p_spec) AS k LOOP
        IF v_key NOT IN ('task', 'payload', 'run_at', 'priority', 'idempotency_key', 'max_attempts') THEN
            RETURN format('unknown key %L (allowed: task, payload, run_at, priority, idempotency_key, max_attempts)', v_key);
        END IF;
    END LOOP;
    IF jsonb_typeof(p_spec -> 'task') IS DISTINCT FROM 'string'
       OR length(p_spec ->> 'task') NOT BETWEEN 1 AND 200 THEN
        RETURN 'task must be a string of 1 to 200 characters';
    END IF;
    IF coalesce(jsonb_typeof(p_spec -> 'priority'), 'null') NOT IN ('null', 'number')
       OR (p_spec ->> 'priority')::numeric NOT BETWEEN -1000 AND 1000
       OR (p_spec ->> 'priority')::numeric <> trunc((p_spec ->> 'priority')::numeric) THEN
        RETURN 'priority must be an integer from -1000 to 1000';
    END IF;
    IF coalesce(jsonb_typeof(p_spec -> 'max_attempts'), 'null') NOT IN ('null', 'number')
       OR (p_spec ->> 'max_attempts')::numeric NOT BETWEEN 1 AND 1000
       OR (p_spec ->> 'max_attempts')::numeric <> trunc((p_spec ->> 'max_attempts')::numeric) THEN
        RETURN 'max_attempts must be an integer from 1 to 1000';
    END IF;
    IF coalesce(jsonb_typeof(p_spec -> 'idempotency_key'), 'null') NOT IN ('null', 'string')
       OR length(p_spec ->> 'idempotency_key') NOT BETWEEN 1 AND 200 THEN
        RETURN 'idempotency_key must be a string of 1 to 200 characters';
    END IF;
    IF coalesce(jsonb_typeof(p_spec -> 'run_at'), 'null') NOT IN ('null', 'string') THEN
        RETURN 'run_at must be an ISO 8601 timestamp string';
    END IF;
    IF p_spec ? 'run_at' AND jsonb_typeof(p_spec -> 'run_at') = 'string' THEN
        BEGIN
            PERFORM (p_spec ->> 'run_at')::timestamptz;
        EXCEPTION WHEN data_exception THEN
            RETURN format('run_at %L is not a timestamp', p_spec ->> 'run_at');
        END;
    END IF;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION codity._job_spec_problem(jsonb) IS
'Private: NULL when a job description object is valid, else a sentence saying what is wrong.';

REVOKE ALL ON FUNCTION codity._job_spec_problem(jsonb) FROM PUBLIC;
