-- codity._limit_room: how many jobs a claim of a limited queue may take now.
--
-- Called by claim_in_queue only for a queue with max_running or a rate limit (migration
-- 0023, docs/DESIGN_DECISIONS.md 54). It locks the queue's codity.queue_limiters row first:
-- concurrent claims of the queue wait here for one another, and each counts after the one
-- before it committed (every statement of a function takes a new snapshot under READ
-- COMMITTED), so N running jobs are never exceeded and R claims per window never. The lock
-- is held until the claim's transaction ends; the claim records what it took in the window
-- (codity._limit_record). A job that completes, fails or is released or reaped makes room
-- without this lock: it only lowers the count.
-- Returns the room (0..p_limit) and the rate window the claim falls in (NULL: no rate).
-- SECURITY INVOKER, no SET: runs inside claim_in_queue with its settings.

CREATE OR REPLACE FUNCTION codity._limit_room(
    p_queue_id bigint,
    p_project_id bigint,
    p_limit integer,
    p_max_running integer,
    p_rate_limit integer,
    p_rate_period_seconds integer,
    p_now timestamptz,
    OUT room integer,
    OUT window_start timestamptz,
    OUT window_claims integer
)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $$
#variable_conflict use_variable
DECLARE
    v_limiter record;
    v_running integer;
BEGIN
    SELECT l.window_start, l.window_claims INTO v_limiter
    FROM codity.queue_limiters l WHERE l.queue_id = p_queue_id FOR UPDATE;
    IF NOT FOUND THEN  -- limits set by hand in the table: make the row, then lock it
        INSERT INTO codity.queue_limiters AS l (queue_id, project_id)
        VALUES (p_queue_id, p_project_id) ON CONFLICT (queue_id) DO NOTHING;
        SELECT l.window_start, l.window_claims INTO v_limiter
        FROM codity.queue_limiters l WHERE l.queue_id = p_queue_id FOR UPDATE;
    END IF;
    room := p_limit;
    IF p_max_running IS NOT NULL THEN
        SELECT count(*) INTO v_running
        FROM codity.jobs j
        WHERE j.queue_id = p_queue_id AND j.status IN ('claimed', 'running');
        room := least(room, p_max_running - v_running);
    END IF;
    IF p_rate_limit IS NOT NULL THEN
        window_start := pg_catalog.date_bin(pg_catalog.make_interval(secs => p_rate_period_seconds),
                                            p_now, timestamptz 'epoch');
        window_claims := CASE WHEN v_limiter.window_start = window_start
                              THEN v_limiter.window_claims ELSE 0 END;
        room := least(room, p_rate_limit - window_claims);
    END IF;
    room := greatest(room, 0);
END;
$$;

COMMENT ON FUNCTION codity._limit_room(bigint, bigint, integer, integer, integer, integer, timestamptz) IS
'Private: lock a limited queue''s limiter row and say how many jobs a claim may take now (concurrency and rate limits).';

REVOKE ALL ON FUNCTION codity._limit_room(bigint, bigint, integer, integer, integer, integer, timestamptz) FROM PUBLIC;
