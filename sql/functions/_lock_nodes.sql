-- codity._lock_nodes: lock a workflow's nodes in the order settlements lock them.
--
-- Every node of the workflow whose status is one of p_statuses, plus the node p_also (when
-- given), locked FOR UPDATE in (depth, queue id, id) order, depth being the longest path to
-- the node from a root (a root: 0). codity._settle_children takes children in that order, so
-- an operator's action that locks this way never holds a deeper node while waiting for a
-- shallower one a settlement holds. A node whose status changed while this waited for it is
-- returned only if its new status still matches. Returns the locked nodes, in that order.
-- On a Citus cluster (codity._settles_later) the same order is taken one (depth, queue)
-- group a statement, each on its queue's shard.
-- SECURITY INVOKER without SET: called only from definer functions; granted to nobody.

CREATE OR REPLACE FUNCTION codity._lock_nodes(
    p_workflow_id bigint,
    p_statuses codity.job_status[],
    p_also bigint DEFAULT NULL
)
RETURNS TABLE (job_id bigint, queue_id bigint, node_key text, job_status codity.job_status, depth integer)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $$
#variable_conflict use_column
DECLARE
    v_ids bigint[];
    v_queues bigint[];
    v_children bigint[];
    v_depths integer[];
    v_group record;
BEGIN
    IF NOT codity._settles_later() THEN
        RETURN QUERY
        SELECT l.id, l.queue_id, l.node_key, l.status, l.depth
        FROM (
            SELECT j.id, j.queue_id, j.node_key, j.status,
                   coalesce((SELECT pg_catalog.max(d.child_depth) FROM codity.job_deps d
                             WHERE d.child_queue_id = j.queue_id AND d.child_id = j.id), 0) AS depth
            FROM codity.jobs j
            WHERE j.workflow_id = p_workflow_id AND (j.status = ANY (p_statuses) OR j.id = p_also)
            ORDER BY depth, j.queue_id, j.id
            FOR UPDATE OF j
        ) AS l
        ORDER BY l.depth, l.queue_id, l.id;
        RETURN;
    END IF;

    -- A Citus cluster locks no rows of several shards in one statement, and joins the jobs
    -- to the edges only on the parent's queue: the nodes and their depths are read first
    -- (reads over the shards), then each (depth, queue) group is locked by a statement on
    -- its queue's shard, in the same order.
    SELECT pg_catalog.array_agg(j.id), pg_catalog.array_agg(j.queue_id) INTO v_ids, v_queues
    FROM codity.jobs j
    WHERE j.workflow_id = p_workflow_id AND (j.status = ANY (p_statuses) OR j.id = p_also);
    SELECT pg_catalog.array_agg(e.child_id), pg_catalog.array_agg(e.depth) INTO v_children, v_depths
    FROM (SELECT d.child_id, pg_catalog.max(d.child_depth) AS depth FROM codity.job_deps d
          WHERE d.workflow_id = p_workflow_id GROUP BY d.child_id) AS e;
    FOR v_group IN
        SELECT coalesce(x.depth, 0) AS depth, n.q, pg_catalog.array_agg(n.id ORDER BY n.id) AS ids
        FROM unnest(v_ids, v_queues) AS n(id, q)
        LEFT JOIN unnest(v_children, v_depths) AS x(id, depth) ON x.id = n.id
        GROUP BY 1, 2
        ORDER BY 1, 2
    LOOP
        RETURN QUERY
        SELECT j.id, j.queue_id, j.node_key, j.status, v_group.depth
        FROM codity.jobs j
        WHERE j.queue_id = v_group.q AND j.id = ANY (v_group.ids)
          AND (j.status = ANY (p_statuses) OR j.id = p_also)
        ORDER BY j.id
        FOR UPDATE;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION codity._lock_nodes(bigint, codity.job_status[], bigint) IS
'Private: lock the workflow''s nodes in these states (and one more node) in (depth, queue, id) order, the order settlements lock children in.';

REVOKE ALL ON FUNCTION codity._lock_nodes(bigint, codity.job_status[], bigint) FROM PUBLIC;
