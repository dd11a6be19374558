-- codity.skip_node: an operator marks one node of a workflow done without running it.
--
-- For a node that is waiting (held behind a failed parent, say), scheduled, queued,
-- dead-lettered or cancelled: it becomes completed, its last_error says it was skipped, and
-- what runs after it counts it as settled, with the outcome 'skipped' (its children read
-- that in codity.dep_results, and no result from it). A dead-lettered or cancelled node's
-- children that it cancelled come back first, with every node below them that nothing else
-- cancelled (codity._reset_nodes), so the rest of the graph runs on. A claimed or running
-- node, or one completed already, is an illegal transition (CD020).
--
-- Locks the workflow's waiting and cancelled nodes and this one in (depth, queue, id)
-- order (codity._lock_nodes), as settlements do; on a Citus cluster it first takes the turn
-- of the tick's fold (codity._hold_settlements) and folds the node's settlement if it is
-- still waiting in codity.workflow_events. Callers: the web API, operators.

CREATE OR REPLACE FUNCTION codity.skip_node(
    p_workflow_id bigint,
    p_node_key text,
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (job_id bigint, node_key text, previous_status codity.job_status, job_status codity.job_status)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_project_id bigint := codity._project_id(p_project_id);
    v_node record;
    v_revive bigint[];
    v_more bigint[];
    v_children bigint[];
    v_kept bigint[];
BEGIN
    PERFORM codity._check_clock(p_now);
    PERFORM codity._workflow(p_workflow_id, v_project_id);
    PERFORM codity._hold_settlements();  -- a Citus cluster: the tick folds none meanwhile
    SELECT j.id, j.queue_id INTO v_node FROM codity.jobs j
    WHERE j.workflow_id = p_workflow_id AND j.node_key = p_node_key;
    IF v_node.id IS NULL THEN
        RAISE EXCEPTION 'workflow % has no node "%"', p_workflow_id, pg_catalog.left(p_node_key, 200)
            USING ERRCODE = 'CD003';
    END IF;
    SELECT l.job_id, l.queue_id, l.job_status INTO v_node
    FROM codity._lock_nodes(p_workflow_id, '{waiting,cancelled}', v_node.id) AS l
    WHERE l.job_id = v_node.id;
    IF v_node.job_status IN ('claimed', 'running', 'completed') THEN
        RAISE EXCEPTION 'node "%" (job %) is %; only a node that is not running or done can be skipped',
            p_node_key, v_node.job_id, v_node.job_status
            USING ERRCODE = 'CD020',
                  HINT = CASE WHEN v_node.job_status = 'completed' THEN 'It ran already.'
                              ELSE 'Cancel it, or let it finish.' END;
    END IF;
    -- A Citus cluster: its settlement, if the tick has not folded it yet, is folded first.
    PERFORM codity._fold_settlements(ARRAY[v_node.queue_id], ARRAY[v_node.job_id], p_now);

    IF v_node.job_status IN ('dead_letter', 'cancelled') THEN
        -- The cancelled nodes below it whose every cancelling parent comes back too.
        v_revive := ARRAY[v_node.job_id];
        LOOP
            IF codity._settles_later() THEN
                -- A Citus cluster joins the jobs to the edges only on the parent's queue:
                -- the children, and those another failed parent cancels, from the edges first.
                v_children := ARRAY(SELECT DISTINCT e.child_id FROM codity.job_deps e
                                    WHERE e.workflow_id = p_workflow_id AND e.parent_id = ANY (v_revive));
                v_kept := ARRAY(SELECT DISTINCT o.child_id FROM codity.job_deps o
                                WHERE o.workflow_id = p_workflow_id AND o.child_id = ANY (v_children)
                                  AND o.on_failure = 'cancel' AND o.resolved IN ('dead_letter', 'cancelled')
                                  AND o.parent_id <> ALL (v_revive));
                v_more := ARRAY(SELECT c.id FROM codity.jobs c
                                WHERE c.workflow_id = p_workflow_id AND c.id = ANY (v_children)
                                  AND c.status = 'cancelled' AND c.id <> ALL (v_revive)
                                  AND c.id <> ALL (v_kept));
                EXIT WHEN cardinality(v_more) = 0;
                v_revive := v_revive || v_more;
                CONTINUE;
            END IF;
            v_more := ARRAY(
                SELECT DISTINCT c.id FROM codity.jobs p
                JOIN codity.job_deps e ON e.queue_id = p.queue_id AND e.parent_id = p.id
                JOIN codity.jobs c ON c.queue_id = e.child_queue_id AND c.id = e.child_id
                WHERE p.workflow_id = p_workflow_id AND p.id = ANY (v_revive)
                  AND c.status = 'cancelled' AND c.id <> ALL (v_revive)
                  AND NOT EXISTS (
                      SELECT 1 FROM codity.job_deps o
                      WHERE o.child_queue_id = c.queue_id AND o.child_id = c.id
                        AND o.on_failure = 'cancel' AND o.resolved IN ('dead_letter', 'cancelled')
                        AND o.parent_id <> ALL (v_revive)));
            EXIT WHEN cardinality(v_more) = 0;
            v_revive := v_revive || v_more;
        END LOOP;
        PERFORM 1 FROM codity._reset_nodes(p_workflow_id, v_revive, p_now);
    END IF;

    UPDATE codity.jobs j
    SET status = 'completed', finished_at = p_now, lock_expires_at = NULL, updated_at = p_now,
        last_error = pg_catalog.format('skipped by an operator (it was %s)', v_node.job_status)
    WHERE j.queue_id = v_node.queue_id AND j.id = v_node.job_id;
    PERFORM codity._settle_children(v_node.queue_id, ARRAY[v_node.job_id], 'skipped', p_now);
    RETURN QUERY SELECT v_node.job_id, p_node_key, v_node.job_status, 'completed'::codity.job_status;
END;
$$;

COMMENT ON FUNCTION codity.skip_node(bigint, text, bigint, timestamptz) IS
'Mark a workflow node done without running it: what runs after it goes on (outcome ''skipped'').

For a waiting, scheduled, queued, dead-lettered or cancelled node; the children a failed node
cancelled come back first. Raises CD008 (no such workflow in the project), CD003 (no node
with that key), CD020 (the node is claimed, running or completed).
Example: SELECT * FROM codity.skip_node(7, ''fetch'');';

REVOKE ALL ON FUNCTION codity.skip_node(bigint, text, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.skip_node(bigint, text, bigint, timestamptz) TO codity_app;
