-- codity.worker_queues: the queues a worker serves, with the ids its wake-ups name.
--
-- A NOTIFY on codity_v1 carries a queue id only (a hint, never data), and a worker holding
-- just codity_worker may read no table: this is how it maps an id to a queue it claims
-- from. One row per queue the worker registered for (every queue of its project when it
-- named none), with the pause flag so a client can skip a paused one, and the queue's
-- limits (migration 0023) so a client can claim a limited queue again as soon as it may
-- rather than at its next poll, and the lease a claim or heartbeat grants (migration 0034)
-- so a worker cut off from the database stops its handlers in time, and the weight
-- (migration 0035) by which it shares its room among the queues with work. Read-only.
-- Caller: a worker right after register_worker, and again when an unknown id arrives.

CREATE OR REPLACE FUNCTION codity.worker_queues(p_worker_id bigint)
RETURNS TABLE (queue_id bigint, queue text, is_paused boolean, max_running integer,
               rate_limit integer, rate_period_seconds integer, lease_seconds integer,
               weight integer)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_worker record;
BEGIN
    SELECT w.project_id, w.queues INTO v_worker FROM codity.workers w WHERE w.id = p_worker_id;
    IF v_worker.project_id IS NULL THEN
        RAISE EXCEPTION 'worker % does not exist', p_worker_id USING ERRCODE = 'CD004';
    END IF;
    RETURN QUERY
    SELECT q.id, q.name, q.is_paused, q.max_running, q.rate_limit, q.rate_period_seconds,
           q.lease_seconds, q.weight
    FROM codity.queues q
    WHERE q.project_id = v_worker.project_id
      AND (cardinality(v_worker.queues) = 0 OR q.name = ANY (v_worker.queues))
    ORDER BY q.name;
END;
$$;

COMMENT ON FUNCTION codity.worker_queues(bigint) IS
'The queues a worker may claim from, with the id that codity_v1 notifications carry, the pause flag, the limits, the lease and the weight.

lease_seconds is how long a claim or a heartbeat leases the queue''s jobs for, counted from
the call: a worker that has had no heartbeat answered for that long must stop its handlers. weight
is the queue''s share of the worker''s room beside the other queues with work.

Every queue of the worker''s project when it registered with none. Raises CD004 (unknown
worker).
Example: SELECT * FROM codity.worker_queues(1);';

REVOKE ALL ON FUNCTION codity.worker_queues(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.worker_queues(bigint) TO codity_app, codity_worker;
