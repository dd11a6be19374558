-- codity._fold_settlements: workflow settlements left in codity.workflow_events (a Citus
-- cluster) told to the children, and deleted, in one transaction.
--
-- On a Citus cluster the bodies Citus runs on a queue's node leave one row per settled
-- workflow node (codity._settle_nodes). Here, on the coordinator, where a transaction may
-- write the shards of every queue:
-- 1. the rows are deleted, queue by queue (each DELETE names its queue's shard), and what
--    they said is gathered: the node, its queue, its outcome;
-- 2. codity._settle_children is called once with all of them: edges resolved, children
--    released (queued, and their queues woken from here, the coordinator), counted down or
--    cancelled, locked in the one global order (depth, queue id, id) across every queue.
-- Exactly once: a row is folded by the transaction that deletes it, and only that one (a
-- concurrent DELETE of the same row waits and then finds it gone); a crash before the commit
-- leaves it for the next call. Folding the same settlement twice would change nothing
-- either: _settle_children resolves only open edges.
--
-- codity._fold_settlements(p_now), by codity.tick: every queue's rows, when no operator's
-- action holds the settlements (codity._hold_settlements; then the next tick folds them);
-- returns how many rows it folded. codity._fold_settlements(p_queue_ids, p_job_ids, p_now),
-- by the operators' actions, which hold the settlements and the nodes' row locks: only
-- those nodes' rows. On a single server both return 0 at once (nothing is ever deferred).
-- SECURITY INVOKER without SET: called only from definer functions; granted to nobody.

CREATE OR REPLACE FUNCTION codity._fold_settlements(
    p_queue_ids bigint[],
    p_job_ids bigint[],
    p_now timestamptz
)
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $$
DECLARE
    v_queue bigint;
    v_ids bigint[];
    v_gone record;
    v_queues bigint[] := '{}';
    v_nodes bigint[] := '{}';
    v_outcomes text[] := '{}';
BEGIN
    IF NOT codity._settles_later() THEN
        RETURN 0;
    END IF;
    FOR v_queue IN
        SELECT DISTINCT n.q FROM unnest(p_queue_ids) AS n(q) WHERE n.q IS NOT NULL ORDER BY 1
    LOOP
        -- Every node of the queue (NULL ids: every row of the queue, for the tick).
        v_ids := ARRAY(SELECT n.id FROM unnest(p_queue_ids, p_job_ids) AS n(q, id)
                       WHERE n.q = v_queue AND n.id IS NOT NULL);
        WITH gone AS (
            DELETE FROM codity.workflow_events e
            WHERE e.queue_id = v_queue
              AND (p_job_ids IS NULL OR e.job_id = ANY (v_ids))
            RETURNING e.job_id, e.outcome
        )
        SELECT pg_catalog.array_agg(g.job_id) AS ids, pg_catalog.array_agg(g.outcome) AS outcomes
        INTO v_gone
        FROM gone g;
        IF v_gone.ids IS NOT NULL THEN
            v_queues := v_queues || pg_catalog.array_fill(v_queue, ARRAY[cardinality(v_gone.ids)]);
            v_nodes := v_nodes || v_gone.ids;
            v_outcomes := v_outcomes || v_gone.outcomes;
        END IF;
    END LOOP;
    IF cardinality(v_nodes) > 0 THEN
        PERFORM codity._settle_children(v_queues, v_nodes, v_outcomes, p_now);
    END IF;
    RETURN cardinality(v_nodes);
END;
$$;

COMMENT ON FUNCTION codity._fold_settlements(bigint[], bigint[], timestamptz) IS
'Private: fold the deferred settlements of the given workflow nodes (p_job_ids NULL: of every node of the given queues) into their children, and delete them.';

REVOKE ALL ON FUNCTION codity._fold_settlements(bigint[], bigint[], timestamptz) FROM PUBLIC;

CREATE OR REPLACE FUNCTION codity._fold_settlements(p_now timestamptz)
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $$
BEGIN
    IF NOT codity._settles_later()
       OR NOT pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtextextended('codity.workflow_events', 0)) THEN
        RETURN 0;
    END IF;
    -- The queues with a row: a read over every shard of the small table, then one
    -- statement per queue (DESIGN.md, "Room to scale out", rule 6).
    RETURN codity._fold_settlements(
        ARRAY(SELECT DISTINCT e.queue_id FROM codity.workflow_events e), NULL, p_now);
END;
$$;

COMMENT ON FUNCTION codity._fold_settlements(timestamptz) IS
'Private: fold every deferred workflow settlement into the children (codity.tick, on a Citus cluster), unless an operator''s action holds them; returns how many.';

REVOKE ALL ON FUNCTION codity._fold_settlements(timestamptz) FROM PUBLIC;
