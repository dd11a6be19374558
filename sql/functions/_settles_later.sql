-- codity._settles_later: whether workflow settlements are deferred (a Citus cluster).
--
-- True when codity.jobs is distributed by Citus. Then a body Citus runs on a queue's node
-- (complete_many_in_queue, fail_in_queue, reap_in_queue) cannot write the children of a
-- workflow node, which live in other queues' shards: it leaves a row in
-- codity.workflow_events, and codity.tick folds it (docs/DESIGN_DECISIONS.md 73). Citus
-- keeps its metadata on every node, so the answer is the same on the coordinator and in a
-- body delegated to a worker node. On a single server (no Citus catalogue) false, at the
-- cost of one catalogue look-up, and only for workflow nodes. Read-only.
-- SECURITY INVOKER without SET: called only from definer functions; granted to nobody.

CREATE OR REPLACE FUNCTION codity._settles_later()
RETURNS boolean
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
AS $$
DECLARE
    v_distributed boolean := false;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition'
            ' WHERE logicalrelid = ''codity.jobs''::pg_catalog.regclass)'
    INTO v_distributed;
    RETURN v_distributed;
END;
$$;

COMMENT ON FUNCTION codity._settles_later() IS
'Private: true on a Citus cluster whose jobs are distributed, where workflow settlements are folded by codity.tick instead of in the settling transaction.';

REVOKE ALL ON FUNCTION codity._settles_later() FROM PUBLIC;
