-- codity._lock_nodes: lock a workflow's nodes in the order settlements lock them.
--
-- Every node of the workflow whose status is one of p_statuses, plus the node p_also (when
-- given), locked FOR UPDATE in (depth, queue id, id) order, depth being the longest path to
-- the node from a root (a root: 0). codity._settle_children takes children in that order, so
-- an operator's action that locks this way never holds a deeper node while waiting for a
-- shallower one a settlement holds. A node whose status changed while this waited for it is
-- returned only if its new status still matches. Returns the locked nodes, in that order.
-- SECURITY INVOKER without SET: called only from definer functions; granted to nobody.

CREATE OR REPLACE FUNCTION codity._lock_nodes(
    p_workflow_id bigint,
    p_statuses codity.job_status[],
    p_also bigint DEFAULT NULL
)
RETURNS TABLE (job_id bigint, queue_id bigint, node_key text, job_status codity.job_status, depth integer)
LANGUAGE sql
VOLATILE
SECURITY INVOKER
AS $$
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
$$;

COMMENT ON FUNCTION codity._lock_nodes(bigint, codity.job_status[], bigint) IS
'Private: lock the workflow''s nodes in these states (and one more node) in (depth, queue, id) order, the order settlements lock children in.';

REVOKE ALL ON FUNCTION codity._lock_nodes(bigint, codity.job_status[], bigint) FROM PUBLIC;
