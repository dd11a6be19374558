-- codity._began: when an attempt began, given the time the claim recorded and how long the
-- job then waited in the worker for a slot (migration 0041): moved on by the wait, never
-- past the attempt's end; unchanged for no wait (NULL or 0).
--
-- IMMUTABLE, and built only of immutable parts so that PostgreSQL inlines it (it does not
-- inline a function whose body is more volatile than declared, and a call per row cost
-- complete_many about 2 µs per job): the wait is added in UTC, to a timestamp, since
-- timestamptz + interval is STABLE (an interval with a day or month part depends on the
-- time zone). Citus refuses a STABLE operator on a column inside an UPDATE of a distributed
-- table, so the body's immutability is also what lets it run there.
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
                THEN least(p_ended_at, ((p_started_at AT TIME ZONE 'UTC')
                                        + p_waited_ms * interval '1 millisecond') AT TIME ZONE 'UTC')
                ELSE p_started_at END;
$$;

COMMENT ON FUNCTION codity._began(timestamptz, integer, timestamptz) IS
'Private: an attempt''s start moved on by the milliseconds its job waited for a slot, never past its end.';

REVOKE ALL ON FUNCTION codity._began(timestamptz, integer, timestamptz) FROM PUBLIC;
