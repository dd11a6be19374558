-- codity.create_queue: define a queue and its retry policy, or update it; idempotent on name.
--
-- Declarative: running the same call twice leaves one queue with that policy, so set-up
-- scripts (codity demo, deployment hooks) can simply re-run. Every argument is checked
-- here with a message naming it (CD010) before the table's CHECKs are reached.
-- Locks the queue row on update. Callers: operators, the web API, codity demo.

CREATE OR REPLACE FUNCTION codity.create_queue(
    p_name text,
    p_project_id bigint DEFAULT NULL,
    p_max_attempts integer DEFAULT 3,
    p_backoff text DEFAULT 'exponential',
    p_base_delay_ms integer DEFAULT 1000,
    p_max_delay_ms integer DEFAULT 3600000,
    p_lease_seconds integer DEFAULT 30,
    p_max_crashes integer DEFAULT 5,
    p_job_timeout_seconds integer DEFAULT NULL
)
RETURNS TABLE (queue_id bigint, created boolean)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_project_id bigint := codity._project_id(p_project_id);
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$' THEN
        RAISE EXCEPTION 'invalid queue name %', coalesce(quote_literal(p_name), 'NULL')
            USING ERRCODE = 'CD010',
                  HINT = 'Use 1 to 128 letters, digits, _ . : or -, starting with a letter or digit.';
    END IF;
    IF p_backoff IS NULL OR p_backoff NOT IN ('fixed', 'linear', 'exponential') THEN
        RAISE EXCEPTION 'backoff must be fixed, linear or exponential, got %', coalesce(quote_literal(p_backoff), 'NULL')
            USING ERRCODE = 'CD010';
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'max_attempts must be from 1 to 1000, got %', p_max_attempts USING ERRCODE = 'CD010';
    END IF;
    IF p_base_delay_ms IS NULL OR p_base_delay_ms < 0 THEN
        RAISE EXCEPTION 'base_delay_ms must not be negative, got %', p_base_delay_ms USING ERRCODE = 'CD010';
    END IF;
    IF p_max_delay_ms IS NULL OR p_max_delay_ms < p_base_delay_ms THEN
        RAISE EXCEPTION 'max_delay_ms must be at least base_delay_ms (%), got %', p_base_delay_ms, p_max_delay_ms
            USING ERRCODE = 'CD010';
    END IF;
    IF p_lease_seconds IS NULL OR p_lease_seconds NOT BETWEEN 1 AND 86400 THEN
        RAISE EXCEPTION 'lease_seconds must be from 1 to 86400, got %', p_lease_seconds USING ERRCODE = 'CD010';
    END IF;
    IF p_max_crashes IS NULL OR p_max_crashes NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'max_crashes must be from 1 to 1000, got %', p_max_crashes USING ERRCODE = 'CD010';
    END IF;
    IF p_job_timeout_seconds IS NOT NULL AND p_job_timeout_seconds < 1 THEN
        RAISE EXCEPTION 'job_timeout_seconds must be positive, got %', p_job_timeout_seconds USING ERRCODE = 'CD010';
    END IF;

    RETURN QUERY
    INSERT INTO codity.queues AS q
        (project_id, name, max_attempts, backoff, base_delay_ms, max_delay_ms,
         lease_seconds, max_crashes, job_timeout_seconds)
    VALUES
        (v_project_id, p_name, p_max_attempts, p_backoff::codity.backoff_kind, p_base_delay_ms,
         p_max_delay_ms, p_lease_seconds, p_max_crashes, p_job_timeout_seconds)
    ON CONFLICT (project_id, name) DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts, backoff = EXCLUDED.backoff,
        base_delay_ms = EXCLUDED.base_delay_ms, max_delay_ms = EXCLUDED.max_delay_ms,
        lease_seconds = EXCLUDED.lease_seconds, max_crashes = EXCLUDED.max_crashes,
        job_timeout_seconds = EXCLUDED.job_timeout_seconds, updated_at = now()
    RETURNING q.id, (q.xmax = 0);
END;
$$;

COMMENT ON FUNCTION codity.create_queue(text, bigint, integer, text, integer, integer, integer, integer, integer) IS
'Create a queue with its retry policy, or update the policy of the queue with that name.

max_attempts (1..1000), backoff (fixed | linear | exponential), base_delay_ms and
max_delay_ms, lease_seconds (how long a claim lasts without a heartbeat), max_crashes (how
many expired leases are refunded before the job is dead-lettered) and job_timeout_seconds
(enforced by workers). created is false when the queue already existed. Raises CD010.
Example: SELECT * FROM codity.create_queue(''emails'', p_max_attempts => 5, p_backoff => ''exponential'');';

REVOKE ALL ON FUNCTION codity.create_queue(text, bigint, integer, text, integer, integer, integer, integer, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.create_queue(text, bigint, integer, text, integer, integer, integer, integer, integer) TO codity_app;
