-- codity._at: the elements of an array at the given 1-based positions, in their order.
--
-- The wrappers over the per-queue bodies cut each argument array down to one queue's
-- positions (codity._job_groups) with it. NULL for a NULL array (STRICT), so an optional
-- array the caller left out stays left out in every group. Pure.
--
-- SECURITY INVOKER without SET: called only from definer functions; granted to nobody.
CREATE OR REPLACE FUNCTION codity._at(p_values anyarray, p_positions bigint[])
RETURNS anyarray
LANGUAGE sql
IMMUTABLE
STRICT
SECURITY INVOKER
AS $$
    SELECT pg_catalog.array_agg(p_values[u.pos] ORDER BY u.n)
    FROM unnest(p_positions) WITH ORDINALITY AS u(pos, n);
$$;

COMMENT ON FUNCTION codity._at(anyarray, bigint[]) IS
'Private: the elements of an array at the given 1-based positions, in that order (NULL for a NULL array).';

REVOKE ALL ON FUNCTION codity._at(anyarray, bigint[]) FROM PUBLIC;
