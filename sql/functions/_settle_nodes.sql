-- codity._settle_nodes: workflow nodes of one queue were just settled by a body by queue id.
--
-- Called by complete_many_in_queue (completed) and _dead_letter (dead_letter, from
-- fail_in_queue and reap_in_queue) in the transaction that settles the nodes, which it
-- holds locked. On a single server their children are told now (codity._settle_children:
-- released, counted down or cancelled in this transaction). On a Citus cluster this body may
-- run on the queue's node, where the children's shards are out of reach (and no NOTIFY may
-- be raised): one row per node that has a child to tell goes into codity.workflow_events, on
-- this queue's shard, and codity.tick folds it on the coordinator (codity._fold_settlements).
-- Every statement names the queue (DESIGN.md, "Room to scale out", rule 2); no NOTIFY here
-- (rule 10). SECURITY INVOKER without SET: called only from definer functions; granted to
-- nobody.

CREATE OR REPLACE FUNCTION codity._settle_nodes(
    p_queue_id bigint,
    p_job_ids bigint[],
    p_outcome text,
    p_now timestamptz
)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $$
DECLARE
    v_project_id bigint;
    v_told bigint[];
BEGIN
    IF NOT codity._settles_later() THEN
        PERFORM codity._settle_children(p_queue_id, p_job_ids, p_outcome, p_now);
        RETURN;
    END IF;
    -- Only nodes with a child still to tell: their edges are on this queue's shard (job_deps
    -- is keyed by the parent's queue), so a leaf, or a node whose edges are settled already,
    -- leaves no row.
    v_told := ARRAY(SELECT DISTINCT d.parent_id FROM codity.job_deps d
                    WHERE d.queue_id = p_queue_id AND d.parent_id = ANY (p_job_ids)
                      AND d.resolved IS NULL);
    IF cardinality(v_told) = 0 THEN
        RETURN;
    END IF;
    -- The queue's project, as on every job table's row (row-level security reads it).
    SELECT q.project_id INTO v_project_id FROM codity.queues q WHERE q.id = p_queue_id;
    INSERT INTO codity.workflow_events (queue_id, job_id, project_id, outcome, settled_at)
    SELECT p_queue_id, n.id, v_project_id, p_outcome, p_now
    FROM unnest(v_told) AS n(id);
END;
$$;

COMMENT ON FUNCTION codity._settle_nodes(bigint, bigint[], text, timestamptz) IS
'Private: tell the children of settled workflow nodes of one queue now (one server), or leave a row for codity.tick to fold (a Citus cluster).';

REVOKE ALL ON FUNCTION codity._settle_nodes(bigint, bigint[], text, timestamptz) FROM PUBLIC;
