-- codity._notify: wake the workers of one queue.
--
-- A hint, never data: the payload is the queue id only (no tenant data, no job ids), on
-- the versioned channel codity_v1. PostgreSQL folds identical notifications raised in one
-- transaction into one, so callers raise at most one per queue. Delivered at COMMIT.
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._notify(p_queue_id bigint)
RETURNS void
LANGUAGE sql
VOLATILE
SECURITY INVOKER
AS $$
    SELECT pg_catalog.pg_notify('codity_v1', p_queue_id::text);
$$;

COMMENT ON FUNCTION codity._notify(bigint) IS
'Private: NOTIFY codity_v1 with the queue id, so listening workers claim at once.';

REVOKE ALL ON FUNCTION codity._notify(bigint) FROM PUBLIC;
