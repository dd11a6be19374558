-- codity.rate_limit_hit: count p_cost hits against a fixed-window limit, atomically.
--
-- Kept in PostgreSQL so the limit holds across any number of web replicas. The window is
-- date_bin(p_window, p_now): every replica agrees on it because time comes from the
-- database. The increment is one INSERT ... ON CONFLICT DO UPDATE whose WHERE re-checks the
-- limit on the row it locked, so concurrent callers serialize on that row and exactly
-- p_limit hits are admitted per window; a refused call adds nothing. Older windows of the
-- same bucket are deleted on the way. Locks one rate_limit_buckets row.
-- Callers: the web app (failed sign-ins per IP and per account, reserved here before the
-- password is checked and given back by codity.rate_limit_refund on success;
-- registrations per IP and per email; enqueues per project).

CREATE OR REPLACE FUNCTION codity.rate_limit_hit(
    p_bucket text,
    p_limit integer,
    p_window interval,
    p_cost integer DEFAULT 1,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (allowed boolean, hits integer, retry_after_seconds integer)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_window_start timestamptz;
    v_hits integer;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_bucket IS NULL OR length(p_bucket) NOT BETWEEN 1 AND 400 THEN
        RAISE EXCEPTION 'rate limit bucket must be 1 to 400 characters' USING ERRCODE = 'CD010';
    END IF;
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'rate limit must be at least 1, got %', p_limit USING ERRCODE = 'CD010';
    END IF;
    IF p_window IS NULL OR p_window <= interval '0' THEN
        RAISE EXCEPTION 'rate limit window must be positive, got %', p_window USING ERRCODE = 'CD010';
    END IF;
    IF p_cost IS NULL OR p_cost < 1 THEN
        RAISE EXCEPTION 'rate limit cost must be at least 1, got %', p_cost USING ERRCODE = 'CD010';
    END IF;

    v_window_start := pg_catalog.date_bin(p_window, p_now, timestamptz '2000-01-01 00:00:00+00');

    IF p_cost <= p_limit THEN
        INSERT INTO codity.rate_limit_buckets AS b (bucket, window_start, hits)
        VALUES (p_bucket, v_window_start, p_cost)
        ON CONFLICT (bucket, window_start) DO UPDATE
            SET hits = b.hits + EXCLUDED.hits
            WHERE b.hits + EXCLUDED.hits <= p_limit
        RETURNING b.hits INTO v_hits;
    END IF;

    DELETE FROM codity.rate_limit_buckets b
    WHERE b.bucket = p_bucket AND b.window_start < v_window_start;

    IF v_hits IS NOT NULL THEN
        RETURN QUERY SELECT true, v_hits, 0;
        RETURN;
    END IF;
    SELECT b.hits INTO v_hits
    FROM codity.rate_limit_buckets b
    WHERE b.bucket = p_bucket AND b.window_start = v_window_start;
    RETURN QUERY SELECT
        false,
        coalesce(v_hits, 0),
        greatest(1, ceil(extract(epoch FROM (v_window_start + p_window - p_now)))::integer);
END;
$$;

COMMENT ON FUNCTION codity.rate_limit_hit(text, integer, interval, integer, timestamptz) IS
'Count p_cost hits in the current fixed window of a bucket; allowed only while the window stays within p_limit.

Atomic across sessions: exactly p_limit hits are admitted per window however many callers
race, and a refused call is not counted. Returns whether the hits were admitted, the
window''s count, and the seconds until the window ends (for Retry-After) when refused.
Example: SELECT * FROM codity.rate_limit_hit(''auth:ip:10.0.0.7'', 5, interval ''15 minutes'');';

REVOKE ALL ON FUNCTION codity.rate_limit_hit(text, integer, interval, integer, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.rate_limit_hit(text, integer, interval, integer, timestamptz) TO codity_app;
