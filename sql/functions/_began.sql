-- codity._began: when an attempt began, given the time the claim recorded and how long the
-- job then waited in the worker for a slot (migration 0041): moved on by the wait, never
-- past the attempt's end; unchanged for no wait (NULL or 0).
--
-- IMMUTABLE, and truly so: a wait is a whole number of milliseconds, an interval with no day
-- or month part, and adding one to a timestamptz does not depend on the time zone (the
-- operator is declared STABLE for the intervals that do). Citus refuses a STABLE operator
-- inside an UPDATE of a distributed table; a LANGUAGE sql function, inlined, costs nothing.
--
-- SECURITY INVOKER without SET: called only from definer functions; granted to nobody.
CREATE OR REPLACE FUNCTION codity._began(
    p_started_at timestamptz,
    p_waited_ms integer,
    p_ended_at timestamptz
)
RETURNS timestamptz
LANGUAGE sql
IMMUTABLE
SECURITY INVOKER
AS $$
    SELECT CASE WHEN p_waited_ms > 0
                THEN least(p_ended_at, p_started_at + p_waited_ms * interval '1 millisecond')
                ELSE p_started_at END;
$$;

COMMENT ON FUNCTION codity._began(timestamptz, integer, timestamptz) IS
'Private: an attempt''s start moved on by the milliseconds its job waited for a slot, never past its end.';

REVOKE ALL ON FUNCTION codity._began(timestamptz, integer, timestamptz) FROM PUBLIC;
