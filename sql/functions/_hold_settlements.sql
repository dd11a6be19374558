-- codity._hold_settlements: an operator's action on workflow nodes keeps codity.tick from
-- folding settlements until it commits (a Citus cluster only).
--
-- On a Citus cluster a node's settlement may still wait in codity.workflow_events when an
-- operator acts on the node (retry_workflow, skip_node, replay_dead_letter, retry_job and
-- their bulk forms): the action first folds that node's rows itself, under the node's row
-- lock (codity._fold_settlements by ids), so what it changes is what one server would show,
-- and a settlement older than the action is never folded after it. This transaction-level
-- advisory lock, taken before the action locks any row, makes the tick's fold (which only
-- tries it, and leaves the rows for the next tick when it is taken) and the actions take
-- turns: neither ever waits for a row the other holds while holding the lock the other
-- waits for. On a single server nothing is deferred and nothing is locked.
-- The lock lives on the coordinator, where every caller runs. SECURITY INVOKER without SET:
-- called only from definer functions; granted to nobody.

CREATE OR REPLACE FUNCTION codity._hold_settlements()
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $$
BEGIN
    IF codity._settles_later() THEN
        PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('codity.workflow_events', 0));
    END IF;
END;
$$;

COMMENT ON FUNCTION codity._hold_settlements() IS
'Private: on a Citus cluster, keep codity.tick from folding workflow settlements until this transaction ends (operators'' actions on nodes).';

REVOKE ALL ON FUNCTION codity._hold_settlements() FROM PUBLIC;
