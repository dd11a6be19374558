-- codity.create_queue: define a queue and its retry policy, or change it; idempotent on name.
--
-- Declarative: running the same call twice leaves one queue with that policy, so set-up
-- scripts (codity demo, deployment hooks) can simply re-run. On an existing queue only what
-- is passed changes: an argument left out (NULL) keeps the queue's value — an upsert that
-- reset every unnamed setting to its default would silently undo an operator's tuning
-- (create_queue('emails', p_max_attempts => 5) once reset max_delay_ms). A new queue gets
-- the defaults for what is left out. Every value the queue will have is checked here, with
-- a message naming it (CD010), before the table's CHECKs are reached.
-- Locks the queue row (when it exists) for the check and the update.
-- Callers: operators, the web API, codity demo.

CREATE OR REPLACE FUNCTION codity.create_queue(
    p_name text,
    p_project_id bigint DEFAULT NULL,
    p_max_attempts integer DEFAULT NULL,
    p_backoff text DEFAULT NULL,
    p_base_delay_ms integer DEFAULT NULL,
    p_max_delay_ms integer DEFAULT NULL,
    p_lease_seconds integer DEFAULT NULL,
    p_max_crashes integer DEFAULT NULL,
    p_job_timeout_seconds integer DEFAULT NULL,
    p_keep_completed_seconds integer DEFAULT NULL,
    p_keep_dead_letters_seconds integer DEFAULT NULL,
    p_max_running integer DEFAULT NULL,
    p_rate_limit integer DEFAULT NULL,
    p_rate_period_seconds integer DEFAULT NULL,
    p_weight integer DEFAULT NULL
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
    -- Into a variable (DESIGN.md, "Room to scale out", rule 9): Citus refuses now() inside
    -- ON CONFLICT DO UPDATE of a distributed or reference table.
    v_now timestamptz := pg_catalog.now();
    v_old codity.queues;
    v_max_attempts integer;
    v_backoff text;
    v_base_delay_ms integer;
    v_max_delay_ms integer;
    v_lease_seconds integer;
    v_max_crashes integer;
    v_job_timeout_seconds integer;
    v_keep_completed_seconds integer;
    v_keep_dead_letters_seconds integer;
    v_max_running integer;
    v_rate_limit integer;
    v_rate_period_seconds integer;
    v_weight integer;
    v_queue_id bigint;
    v_created boolean;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$' THEN
        RAISE EXCEPTION 'invalid queue name %', coalesce(quote_literal(p_name), 'NULL')
            USING ERRCODE = 'CD010',
                  HINT = 'Use 1 to 128 letters, digits, _ . : or -, starting with a letter or digit.';
    END IF;
    SELECT q.* INTO v_old FROM codity.queues q
    WHERE q.project_id = v_project_id AND q.name = p_name
    FOR UPDATE;
    -- What the queue will hold: the argument, else what it holds now, else the default.
    v_max_attempts := coalesce(p_max_attempts, v_old.max_attempts, 3);
    v_backoff := coalesce(p_backoff, v_old.backoff::text, 'exponential');
    v_base_delay_ms := coalesce(p_base_delay_ms, v_old.base_delay_ms, 1000);
    v_max_delay_ms := coalesce(p_max_delay_ms, v_old.max_delay_ms, 3600000);
    v_lease_seconds := coalesce(p_lease_seconds, v_old.lease_seconds, 30);
    v_max_crashes := coalesce(p_max_crashes, v_old.max_crashes, 5);
    -- 0 removes a timeout; NULL keeps the current one (none for a new queue).
    v_job_timeout_seconds := CASE WHEN p_job_timeout_seconds IS NULL THEN v_old.job_timeout_seconds
                                  ELSE NULLIF(p_job_timeout_seconds, 0) END;
    -- The same for retention: 0 keeps finished jobs forever; a new queue gets the defaults.
    v_keep_completed_seconds := CASE
        WHEN p_keep_completed_seconds IS NOT NULL THEN NULLIF(p_keep_completed_seconds, 0)
        WHEN v_old.id IS NOT NULL THEN v_old.keep_completed_seconds
        ELSE 604800 END;
    v_keep_dead_letters_seconds := CASE
        WHEN p_keep_dead_letters_seconds IS NOT NULL THEN NULLIF(p_keep_dead_letters_seconds, 0)
        WHEN v_old.id IS NOT NULL THEN v_old.keep_dead_letters_seconds
        ELSE 2592000 END;
    -- Limits: 0 removes one, NULL keeps it; none for a new queue. A rate limit is its count
    -- and its period together: removing the count removes the period.
    v_max_running := CASE WHEN p_max_running IS NULL THEN v_old.max_running
                          ELSE NULLIF(p_max_running, 0) END;
    v_rate_limit := CASE WHEN p_rate_limit IS NULL THEN v_old.rate_limit
                         ELSE NULLIF(p_rate_limit, 0) END;
    v_rate_period_seconds := CASE WHEN v_rate_limit IS NULL THEN NULL
                                  ELSE coalesce(p_rate_period_seconds, v_old.rate_period_seconds, 1) END;
    v_weight := coalesce(p_weight, v_old.weight, 1);

    IF v_backoff NOT IN ('fixed', 'linear', 'exponential') THEN
        RAISE EXCEPTION 'backoff must be fixed, linear or exponential, got %', quote_literal(v_backoff)
            USING ERRCODE = 'CD010';
    END IF;
    IF v_max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'max_attempts must be from 1 to 1000, got %', v_max_attempts USING ERRCODE = 'CD010';
    END IF;
    IF v_base_delay_ms < 0 THEN
        RAISE EXCEPTION 'base_delay_ms must not be negative, got %', v_base_delay_ms USING ERRCODE = 'CD010';
    END IF;
    IF v_max_delay_ms < v_base_delay_ms THEN
        RAISE EXCEPTION 'max_delay_ms must be at least base_delay_ms (%), got %', v_base_delay_ms, v_max_delay_ms
            USING ERRCODE = 'CD010';
    END IF;
    IF v_lease_seconds NOT BETWEEN 1 AND 86400 THEN
        RAISE EXCEPTION 'lease_seconds must be from 1 to 86400, got %', v_lease_seconds USING ERRCODE = 'CD010';
    END IF;
    IF v_max_crashes NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'max_crashes must be from 1 to 1000, got %', v_max_crashes USING ERRCODE = 'CD010';
    END IF;
    IF p_job_timeout_seconds < 0 THEN
        RAISE EXCEPTION 'job_timeout_seconds must be positive (or 0 for none), got %', p_job_timeout_seconds
            USING ERRCODE = 'CD010';
    END IF;
    IF p_keep_completed_seconds <> 0 AND p_keep_completed_seconds NOT BETWEEN 60 AND 315360000 THEN
        RAISE EXCEPTION 'keep_completed_seconds must be from 60 to 315360000 (10 years), or 0 to keep forever, got %',
                        p_keep_completed_seconds USING ERRCODE = 'CD010';
    END IF;
    IF p_keep_dead_letters_seconds <> 0 AND p_keep_dead_letters_seconds NOT BETWEEN 60 AND 315360000 THEN
        RAISE EXCEPTION 'keep_dead_letters_seconds must be from 60 to 315360000 (10 years), or 0 to keep forever, got %',
                        p_keep_dead_letters_seconds USING ERRCODE = 'CD010';
    END IF;
    IF p_max_running <> 0 AND p_max_running NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'max_running must be from 1 to 100000, or 0 for no limit, got %', p_max_running
            USING ERRCODE = 'CD010';
    END IF;
    IF p_rate_limit <> 0 AND p_rate_limit NOT BETWEEN 1 AND 1000000 THEN
        RAISE EXCEPTION 'rate_limit must be from 1 to 1000000 claims per period, or 0 for no limit, got %',
                        p_rate_limit USING ERRCODE = 'CD010';
    END IF;
    IF p_rate_period_seconds NOT BETWEEN 1 AND 86400 THEN
        RAISE EXCEPTION 'rate_period_seconds must be from 1 to 86400, got %', p_rate_period_seconds
            USING ERRCODE = 'CD010';
    END IF;
    IF v_weight NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'weight must be from 1 to 1000, got %', v_weight USING ERRCODE = 'CD010';
    END IF;

    INSERT INTO codity.queues AS q
        (project_id, name, max_attempts, backoff, base_delay_ms, max_delay_ms,
         lease_seconds, max_crashes, job_timeout_seconds, keep_completed_seconds,
         keep_dead_letters_seconds, max_running, rate_limit, rate_period_seconds, weight)
    VALUES
        (v_project_id, p_name, v_max_attempts, v_backoff::codity.backoff_kind, v_base_delay_ms,
         v_max_delay_ms, v_lease_seconds, v_max_crashes, v_job_timeout_seconds,
         v_keep_completed_seconds, v_keep_dead_letters_seconds, v_max_running, v_rate_limit,
         v_rate_period_seconds, v_weight)
    ON CONFLICT (project_id, name) DO UPDATE
    SET max_attempts = EXCLUDED.max_attempts, backoff = EXCLUDED.backoff,
        base_delay_ms = EXCLUDED.base_delay_ms, max_delay_ms = EXCLUDED.max_delay_ms,
        lease_seconds = EXCLUDED.lease_seconds, max_crashes = EXCLUDED.max_crashes,
        job_timeout_seconds = EXCLUDED.job_timeout_seconds,
        keep_completed_seconds = EXCLUDED.keep_completed_seconds,
        keep_dead_letters_seconds = EXCLUDED.keep_dead_letters_seconds,
        max_running = EXCLUDED.max_running, rate_limit = EXCLUDED.rate_limit,
        rate_period_seconds = EXCLUDED.rate_period_seconds, weight = EXCLUDED.weight,
        updated_at = v_now
    RETURNING q.id, (q.xmax = 0) INTO v_queue_id, v_created;
    -- Every queue has its totals row from the start (migration 0029): codity.roll_up adds
    -- to it, and the scheduler's cross-queue reads start from it (codity.promote).
    INSERT INTO codity.queue_totals (queue_id, project_id)
    VALUES (v_queue_id, v_project_id)
    ON CONFLICT (queue_id) DO NOTHING;
    -- The row a limited queue's claims lock (codity.claim_in_queue); kept when the limits
    -- go, harmless: only a limited queue's claims read it.
    IF v_max_running IS NOT NULL OR v_rate_limit IS NOT NULL THEN
        INSERT INTO codity.queue_limiters (queue_id, project_id)
        VALUES (v_queue_id, v_project_id)
        ON CONFLICT (queue_id) DO NOTHING;
    END IF;
    RETURN QUERY SELECT v_queue_id, v_created;
END;
$$;

COMMENT ON FUNCTION codity.create_queue(text, bigint, integer, text, integer, integer, integer, integer, integer, integer, integer, integer, integer, integer, integer) IS
'Create a queue with its retry policy, or change the settings you pass of the queue with that name.

max_attempts (1..1000, default 3), backoff (fixed | linear | exponential, default
exponential), base_delay_ms (1000) and max_delay_ms (3600000), lease_seconds (how long a
claim lasts without a heartbeat, 30), max_crashes (how many expired leases are refunded
before the job is dead-lettered, 5) and job_timeout_seconds (enforced by workers; none by
default, 0 removes it), keep_completed_seconds (how long completed and cancelled jobs and
their executions are kept after they finish, 604800 = 7 days) and
keep_dead_letters_seconds (dead-lettered jobs and their dead letters, 2592000 = 30 days),
each from 60 s to 10 years, 0 to keep forever; codity.prune deletes what has aged out;
max_running (at most this many jobs claimed or running at once across all workers) and
rate_limit per rate_period_seconds (at most that many claims per period, 1 s by default),
both enforced by the claim, none by default, 0 removes one; weight (1..1000, default 1),
the queue''s share of a worker''s room beside the other queues it serves that have work. On
an existing queue an argument left out keeps its value. created
is false when the queue already existed. Raises CD010.
Example: SELECT * FROM codity.create_queue(''emails'', p_max_attempts => 5, p_backoff => ''exponential'');';

REVOKE ALL ON FUNCTION codity.create_queue(text, bigint, integer, text, integer, integer, integer, integer, integer, integer, integer, integer, integer, integer, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.create_queue(text, bigint, integer, text, integer, integer, integer, integer, integer, integer, integer, integer, integer, integer, integer) TO codity_app;
