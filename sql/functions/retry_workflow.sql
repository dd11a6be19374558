-- codity.retry_workflow: an operator runs a workflow (or batch) again, whole or in part.
--
-- p_mode says which finished nodes run again:
--   failed                 the dead-lettered and cancelled ones (the default): a node that
--                          completed keeps its result and is not run again;
--   failed_and_downstream  those and every node after them, completed ones included (a
--                          child that ran on an 'ignore' edge without its parent's result);
--   all                    every node, from the roots; nothing may be unfinished.
-- A node that runs again waits for those of its parents that run again too, and is queued
-- when none does (codity._reset_nodes: edges reopened, counts recomputed, attempts reset,
-- its dead letter marked replayed into itself). A 'run' node (a batch's "any dead"
-- callback) runs again only when one of its parents does: with every parent completed it
-- has nothing to watch. A node claimed or running in the part asked for, or (for all,
-- failed_and_downstream) a queued or scheduled one there, is an illegal transition (CD020)
-- naming it: cancel it or wait. Nothing to retry: no row.
--
-- Locks the workflow's finished and waiting nodes in (depth, queue, id) order
-- (codity._lock_nodes), as settlements do; on a Citus cluster it first takes the turn of the
-- tick's fold (codity._hold_settlements), and the nodes it resets fold their settlements
-- still waiting in codity.workflow_events first (codity._reset_nodes). Callers: the web
-- API, operators.

CREATE OR REPLACE FUNCTION codity.retry_workflow(
    p_workflow_id bigint,
    p_mode text DEFAULT 'failed',
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (job_id bigint, node_key text, queue_id bigint, previous_status codity.job_status, job_status codity.job_status)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_project_id bigint := codity._project_id(p_project_id);
    v_workflow record;
    v_asked bigint[];
    v_ids bigint[];
    v_busy record;
    v_level bigint[];
    v_run bigint[];
    v_fed bigint[];
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_mode IS NULL OR p_mode <> ALL (ARRAY['failed', 'failed_and_downstream', 'all']) THEN
        RAISE EXCEPTION 'retry mode must be "failed", "failed_and_downstream" or "all", got %',
            coalesce(pg_catalog.quote_literal(p_mode), 'NULL')
            USING ERRCODE = 'CD010';
    END IF;
    v_workflow := codity._workflow(p_workflow_id, v_project_id);
    PERFORM codity._hold_settlements();  -- a Citus cluster: the tick folds none meanwhile
    PERFORM 1 FROM codity._lock_nodes(p_workflow_id, '{waiting,completed,dead_letter,cancelled}');

    -- The nodes asked for: the failed ones, and for the two wider modes what runs after.
    IF p_mode = 'all' THEN
        v_asked := ARRAY(SELECT j.id FROM codity.jobs j WHERE j.workflow_id = p_workflow_id);
    ELSIF codity._settles_later() THEN
        -- A Citus cluster runs no recursive query over several shards: the same walk, a
        -- level a statement, over the workflow's edges.
        v_asked := ARRAY(SELECT j.id FROM codity.jobs j
                         WHERE j.workflow_id = p_workflow_id AND j.status IN ('dead_letter', 'cancelled'));
        v_level := v_asked;
        WHILE p_mode = 'failed_and_downstream' AND cardinality(v_level) > 0 LOOP
            v_level := ARRAY(SELECT DISTINCT d.child_id FROM codity.job_deps d
                             WHERE d.workflow_id = p_workflow_id AND d.parent_id = ANY (v_level)
                               AND d.child_id <> ALL (v_asked));
            v_asked := v_asked || v_level;
        END LOOP;
    ELSE
        v_asked := ARRAY(
            WITH RECURSIVE asked (queue_id, id) AS (
                SELECT j.queue_id, j.id FROM codity.jobs j
                WHERE j.workflow_id = p_workflow_id AND j.status IN ('dead_letter', 'cancelled')
                UNION
                SELECT d.child_queue_id, d.child_id
                FROM asked a JOIN codity.job_deps d ON d.queue_id = a.queue_id AND d.parent_id = a.id
                WHERE p_mode = 'failed_and_downstream'
            )
            SELECT a.id FROM asked a);
    END IF;

    SELECT j.id, j.node_key, j.status INTO v_busy
    FROM codity.jobs j
    WHERE j.workflow_id = p_workflow_id AND j.id = ANY (v_asked)
      AND j.status IN ('claimed', 'running', 'queued', 'scheduled')
    ORDER BY j.id
    LIMIT 1;
    IF v_busy.id IS NOT NULL THEN
        RAISE EXCEPTION 'node % (job %) of workflow % is %; it cannot run again before it finishes',
            coalesce(pg_catalog.quote_ident(v_busy.node_key), 'member'), v_busy.id, p_workflow_id, v_busy.status
            USING ERRCODE = 'CD020',
                  HINT = 'Wait for it to finish, cancel it, or retry only the failed nodes.';
    END IF;

    -- Waiting nodes are recounted by _reset_nodes without being restarted; a 'run' node
    -- none of whose parents runs again has nothing to watch and stays as it is.
    IF codity._settles_later() THEN
        -- A Citus cluster joins the jobs to the edges only on the parent's queue: the 'run'
        -- nodes and those a parent asked for feeds are read from the edges first.
        v_run := ARRAY(SELECT d.child_id FROM codity.job_deps d
                       WHERE d.workflow_id = p_workflow_id AND d.on_failure = 'run');
        v_fed := ARRAY(SELECT d.child_id FROM codity.job_deps d
                       WHERE d.workflow_id = p_workflow_id AND d.parent_id = ANY (v_asked));
        SELECT coalesce(pg_catalog.array_agg(j.id ORDER BY j.id), '{}') INTO v_ids
        FROM codity.jobs j
        WHERE j.workflow_id = p_workflow_id AND j.id = ANY (v_asked) AND j.status <> 'waiting'
          AND NOT (j.id = ANY (v_run) AND j.id <> ALL (v_fed));
    ELSE
        SELECT coalesce(pg_catalog.array_agg(j.id ORDER BY j.id), '{}') INTO v_ids
        FROM codity.jobs j JOIN unnest(v_asked) AS r(id) ON r.id = j.id
        WHERE j.workflow_id = p_workflow_id AND j.status <> 'waiting'
          AND NOT (EXISTS (SELECT 1 FROM codity.job_deps d
                           WHERE d.child_queue_id = j.queue_id AND d.child_id = j.id AND d.on_failure = 'run')
                   AND NOT EXISTS (SELECT 1 FROM codity.job_deps d JOIN unnest(v_asked) AS p(id) ON p.id = d.parent_id
                                   WHERE d.child_queue_id = j.queue_id AND d.child_id = j.id));
    END IF;
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM codity._reset_nodes(p_workflow_id, v_ids, p_now);
END;
$$;

COMMENT ON FUNCTION codity.retry_workflow(bigint, text, bigint, timestamptz) IS
'Run a workflow''s nodes again: the failed ones (p_mode ''failed'', the default), those and everything after them (''failed_and_downstream''), or all (''all'').

Returns each node that runs again, queued or waiting for its parents that run again; no row
when nothing is to retry. Raises CD008 (no such workflow in the project), CD010 (unknown
mode), CD020 (a node in that part is queued, claimed or running), writing nothing then.
Example: SELECT * FROM codity.retry_workflow(7);';

REVOKE ALL ON FUNCTION codity.retry_workflow(bigint, text, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.retry_workflow(bigint, text, bigint, timestamptz) TO codity_app;
