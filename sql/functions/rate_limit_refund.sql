-- codity.rate_limit_refund: give back hits that codity.rate_limit_hit counted, in their window.
--
-- Sign-in limits count failures only, yet must stay exact under concurrency: the web app
-- reserves a hit (rate_limit_hit) before it checks a password, so concurrent failures can
-- never overshoot, and gives it back here when the attempt succeeded. The hit is named by
-- p_hit_at, the now() of the transaction that counted it (rate_limit_hit's own p_now), so
-- the refund lands in the window that hit was counted in and only while that window is
-- the current one: an ended window no longer limits anyone (the bucket's next hit deletes
-- it), and a later window holds other callers' hits. A p_hit_at after p_now is not an
-- error (the clock may have stepped back between the two transactions): such a hit is
-- given back only if it falls in the current window. A count never goes below zero: a
-- refund that finds fewer than p_cost hits gives back nothing. One UPDATE of one
-- rate_limit_buckets row, which it locks; callers refund their buckets in the order they
-- reserved them.
-- Callers: the web app (a login or refresh that succeeded, codity.web.ratelimit).

CREATE OR REPLACE FUNCTION codity.rate_limit_refund(
    p_bucket text,
    p_window interval,
    p_hit_at timestamptz,
    p_cost integer DEFAULT 1,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (refunded boolean, hits integer)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_window_start timestamptz;
    v_current_start timestamptz;
    v_hits integer;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_bucket IS NULL OR length(p_bucket) NOT BETWEEN 1 AND 400 THEN
        RAISE EXCEPTION 'rate limit bucket must be 1 to 400 characters' USING ERRCODE = 'CD010';
    END IF;
    IF p_window IS NULL OR p_window <= interval '0' THEN
        RAISE EXCEPTION 'rate limit window must be positive, got %', p_window USING ERRCODE = 'CD010';
    END IF;
    IF p_hit_at IS NULL THEN
        RAISE EXCEPTION 'the time the refunded hit was counted at must not be NULL'
            USING ERRCODE = 'CD010',
                  HINT = 'Pass the now() of the transaction that called rate_limit_hit.';
    END IF;
    IF p_cost IS NULL OR p_cost < 1 THEN
        RAISE EXCEPTION 'rate limit cost must be at least 1, got %', p_cost USING ERRCODE = 'CD010';
    END IF;

    v_window_start := pg_catalog.date_bin(p_window, p_hit_at, timestamptz '2000-01-01 00:00:00+00');
    v_current_start := pg_catalog.date_bin(p_window, p_now, timestamptz '2000-01-01 00:00:00+00');

    IF v_window_start = v_current_start THEN
        UPDATE codity.rate_limit_buckets AS b
        SET hits = b.hits - p_cost
        WHERE b.bucket = p_bucket AND b.window_start = v_window_start AND b.hits >= p_cost
        RETURNING b.hits INTO v_hits;
        IF v_hits IS NOT NULL THEN
            RETURN QUERY SELECT true, v_hits;
            RETURN;
        END IF;
    END IF;

    SELECT b.hits INTO v_hits
    FROM codity.rate_limit_buckets b
    WHERE b.bucket = p_bucket AND b.window_start = v_current_start;
    RETURN QUERY SELECT false, coalesce(v_hits, 0);
END;
$$;

COMMENT ON FUNCTION codity.rate_limit_refund(text, interval, timestamptz, integer, timestamptz) IS
'Give back p_cost hits that rate_limit_hit counted at p_hit_at, if their window is still the current one.

p_hit_at is the now() of the transaction that called rate_limit_hit. With a reservation
before the work and a refund after a success, a limit counts only failures and stays exact
under concurrency. A hit of an ended window is not given back, and a count never goes below
zero. Returns whether the hits were given back and the current window''s count.
Example: SELECT * FROM codity.rate_limit_refund(''signin:ip:10.0.0.7'', interval ''15 minutes'', now());';

REVOKE ALL ON FUNCTION codity.rate_limit_refund(text, interval, timestamptz, integer, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.rate_limit_refund(text, interval, timestamptz, integer, timestamptz) TO codity_app;
