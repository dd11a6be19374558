-- codity.backoff_delay: how long a failed job waits before its next attempt.
--
-- fixed: base; linear: base * attempt; exponential: base * 2^(attempt - 1); each clamped
-- to max_delay_ms, then full jitter: a uniform draw from [0, clamped]. Without jitter,
-- five hundred jobs failing in one outage retry at the same instant and knock the
-- recovering service over again. The random draw is a parameter so tests can pin it.
-- Pure; called by codity.fail.

CREATE OR REPLACE FUNCTION codity.backoff_delay(
    p_backoff codity.backoff_kind,
    p_base_delay_ms integer,
    p_max_delay_ms integer,
    p_attempt integer,
    p_random double precision DEFAULT random()
)
RETURNS interval
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT pg_catalog.make_interval(secs => floor(
        LEAST(
            CASE p_backoff
                WHEN 'fixed' THEN p_base_delay_ms::numeric
                WHEN 'linear' THEN p_base_delay_ms::numeric * GREATEST(p_attempt, 1)
                ELSE p_base_delay_ms::numeric * power(2::numeric, LEAST(GREATEST(p_attempt, 1) - 1, 64))
            END,
            p_max_delay_ms::numeric
        ) * LEAST(GREATEST(p_random, 0), 1)::numeric
    )::double precision / 1000.0);
$$;

COMMENT ON FUNCTION codity.backoff_delay(codity.backoff_kind, integer, integer, integer, double precision) IS
'The retry delay after a failed attempt: fixed, linear or exponential, clamped to the maximum, then full jitter.

With p_random = 1 it returns the clamped delay itself; the default draws uniformly from
[0, clamped].
Example: SELECT codity.backoff_delay(''exponential'', 1000, 60000, 3, 1.0);  -- 4 seconds';

REVOKE ALL ON FUNCTION codity.backoff_delay(codity.backoff_kind, integer, integer, integer, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.backoff_delay(codity.backoff_kind, integer, integer, integer, double precision) TO codity_app, codity_worker, codity_readonly;
