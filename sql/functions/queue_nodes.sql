-- codity.queue_nodes: on a Citus cluster, the worker node holding each queue a worker serves.
--
-- A worker sends its by-queue calls (claim_in_queue, complete_many_in_queue, fail_in_queue,
-- release_in_queue, release_lost_claims_in_queue) straight to the node that holds the
-- queue's shards, where Citus runs the body locally, instead of through the coordinator,
-- which would pass each call on (docs/DESIGN_DECISIONS.md 77). This is how it learns where
-- that is: one row per queue the worker registered for (every queue of its project when it
-- named none) whose shards live on a worker node, with the node's address as the
-- coordinator knows it (pg_dist_node). No rows on a single server, on a database whose jobs
-- are not distributed, and for a queue whose shards the coordinator holds itself. A route
-- gone stale after a shard move costs a hop, never a wrong answer: a node that no longer
-- holds the queue passes the call whole to the one that does. Read-only; reads Citus's
-- catalogue through dynamic SQL, since a single server has none.
-- Caller: a worker after register_worker, and again with every heartbeat.

CREATE OR REPLACE FUNCTION codity.queue_nodes(p_worker_id bigint)
RETURNS TABLE (queue_id bigint, node_host text, node_port integer)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
DECLARE
    v_queue_ids bigint[];
BEGIN
    -- The worker's queues as codity.worker_queues gives them (raises CD004 for no worker).
    v_queue_ids := ARRAY(SELECT w.queue_id FROM codity.worker_queues(p_worker_id) AS w);
    IF NOT codity._settles_later() THEN  -- true exactly when codity.jobs is distributed
        RETURN;
    END IF;
    RETURN QUERY EXECUTE
        'SELECT DISTINCT ON (q.id) q.id, n.nodename::text, n.nodeport'
        ' FROM pg_catalog.unnest($1) AS q(id)'
        ' JOIN pg_catalog.pg_dist_placement p'
        '   ON p.shardid = pg_catalog.get_shard_id_for_distribution_column('
        '        ''codity.jobs''::pg_catalog.regclass, q.id)'
        ' JOIN pg_catalog.pg_dist_node n ON n.groupid = p.groupid'
        ' WHERE n.groupid <> 0 AND n.isactive AND n.noderole = ''primary'''
        ' ORDER BY q.id, n.nodeid'
        USING v_queue_ids;
END;
$$;

COMMENT ON FUNCTION codity.queue_nodes(bigint) IS
'On a Citus cluster, the address of the worker node that holds each queue the worker serves (as the coordinator knows it), so that the worker can send its by-queue calls there directly.

No rows on a single server, or for a queue whose shards the coordinator holds. A route that
went stale after a shard move still works: the node passes the call on. Raises CD004
(unknown worker).
Example: SELECT * FROM codity.queue_nodes(1);';

REVOKE ALL ON FUNCTION codity.queue_nodes(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.queue_nodes(bigint) TO codity_app, codity_worker;
