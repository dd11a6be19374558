-- codity._job_spec_problem: what is wrong with one job description, or NULL.
--
-- enqueue_many takes a JSON array of objects so that any client can send a batch in one
-- round trip. Each object is checked here before anything is written: known keys only,
-- each of the right JSON type, then each in range. Payload size is checked by the caller
-- (CD011).
-- Pure; locks nothing.
--
-- The ranges live in codity._job_fields_problem, which takes the fields as plain values, so
-- enqueue_in_queue (one job, typed arguments) checks them by the very same rules without
-- building a JSON object first (building and reading one back cost about a fifth of a
-- single enqueue's server time).
--
-- One SQL CASE each, not PL/pgSQL: PostgreSQL inlines both into the caller's query, so a
-- batch of 1,000 jobs makes no function call per job (the PL/pgSQL version cost 7-10 us per
-- job, a fifth of a batched enqueue). The branches run in order, so a cast is reached only
-- once the JSON type has been checked. Only a run_at string needs PL/pgSQL (catching a
-- bad timestamp needs an exception block): codity._timestamp_problem, for those jobs only.
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._timestamp_problem(p_text text)
RETURNS text
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
AS $$
BEGIN
    PERFORM p_text::pg_catalog.timestamptz;
    RETURN NULL;
EXCEPTION WHEN data_exception THEN
    RETURN pg_catalog.format('run_at %L is not a timestamp', p_text);
END;
$$;

COMMENT ON FUNCTION codity._timestamp_problem(text) IS
'Private: NULL when the text is a timestamp, else a sentence saying it is not.';

REVOKE ALL ON FUNCTION codity._timestamp_problem(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION codity._job_fields_problem(
    p_task text,
    p_priority numeric,
    p_max_attempts numeric,
    p_idempotency_key text
)
RETURNS text
LANGUAGE sql
IMMUTABLE
SECURITY INVOKER
AS $$
    SELECT CASE
        WHEN p_task IS NULL OR pg_catalog.length(p_task) NOT BETWEEN 1 AND 200
            THEN 'task must be a string of 1 to 200 characters'
        WHEN p_priority NOT BETWEEN -1000 AND 1000
             OR p_priority OPERATOR(pg_catalog.<>) pg_catalog.trunc(p_priority)
            THEN 'priority must be an integer from -1000 to 1000'
        WHEN p_max_attempts NOT BETWEEN 1 AND 1000
             OR p_max_attempts OPERATOR(pg_catalog.<>) pg_catalog.trunc(p_max_attempts)
            THEN 'max_attempts must be an integer from 1 to 1000'
        WHEN pg_catalog.length(p_idempotency_key) NOT BETWEEN 1 AND 200
            THEN 'idempotency_key must be a string of 1 to 200 characters'
    END;
$$;

COMMENT ON FUNCTION codity._job_fields_problem(text, numeric, numeric, text) IS
'Private: NULL when a job''s task, priority, max_attempts and idempotency key (NULL: not given) are in range, else a sentence saying which is not.';

REVOKE ALL ON FUNCTION codity._job_fields_problem(text, numeric, numeric, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION codity._job_spec_problem(p_spec jsonb)
RETURNS text
LANGUAGE sql
STABLE
SECURITY INVOKER
AS $$
    SELECT CASE
        WHEN pg_catalog.jsonb_typeof(p_spec) IS DISTINCT FROM 'object'
            THEN 'must be a JSON object'
        WHEN p_spec OPERATOR(pg_catalog.-) ARRAY['task', 'payload', 'run_at', 'priority',
                                                 'idempotency_key', 'max_attempts']
             OPERATOR(pg_catalog.<>) '{}'::pg_catalog.jsonb
            THEN pg_catalog.format(
                'unknown key %L (allowed: task, payload, run_at, priority, idempotency_key, max_attempts)',
                pg_catalog.jsonb_path_query_first(
                    p_spec OPERATOR(pg_catalog.-) ARRAY['task', 'payload', 'run_at', 'priority',
                                                        'idempotency_key', 'max_attempts'],
                    '$.keyvalue().key') OPERATOR(pg_catalog.#>>) '{}'::text[])
        WHEN pg_catalog.jsonb_typeof(p_spec OPERATOR(pg_catalog.->) 'task') IS DISTINCT FROM 'string'
            THEN 'task must be a string of 1 to 200 characters'
        WHEN coalesce(pg_catalog.jsonb_typeof(p_spec OPERATOR(pg_catalog.->) 'priority'), 'null')
             NOT IN ('null', 'number')
            THEN 'priority must be an integer from -1000 to 1000'
        WHEN coalesce(pg_catalog.jsonb_typeof(p_spec OPERATOR(pg_catalog.->) 'max_attempts'), 'null')
             NOT IN ('null', 'number')
            THEN 'max_attempts must be an integer from 1 to 1000'
        WHEN coalesce(pg_catalog.jsonb_typeof(p_spec OPERATOR(pg_catalog.->) 'idempotency_key'), 'null')
             NOT IN ('null', 'string')
            THEN 'idempotency_key must be a string of 1 to 200 characters'
        WHEN coalesce(pg_catalog.jsonb_typeof(p_spec OPERATOR(pg_catalog.->) 'run_at'), 'null')
             NOT IN ('null', 'string')
            THEN 'run_at must be an ISO 8601 timestamp string'
        -- Every field has its JSON type now, so each cast below succeeds.
        ELSE coalesce(
            codity._job_fields_problem(
                p_spec OPERATOR(pg_catalog.->>) 'task',
                (p_spec OPERATOR(pg_catalog.->>) 'priority')::pg_catalog.numeric,
                (p_spec OPERATOR(pg_catalog.->>) 'max_attempts')::pg_catalog.numeric,
                p_spec OPERATOR(pg_catalog.->>) 'idempotency_key'),
            CASE WHEN pg_catalog.jsonb_typeof(p_spec OPERATOR(pg_catalog.->) 'run_at') = 'string'
                 THEN codity._timestamp_problem(p_spec OPERATOR(pg_catalog.->>) 'run_at') END)
    END;
$$;

COMMENT ON FUNCTION codity._job_spec_problem(jsonb) IS
'Private: NULL when a job description object is valid, else a sentence saying what is wrong.';

REVOKE ALL ON FUNCTION codity._job_spec_problem(jsonb) FROM PUBLIC;
