-- codity.cancel_workflow: an operator stops a whole workflow (or batch).
--
-- Every node that has not finished is cancelled in one transaction: waiting, scheduled and
-- queued ones outright, claimed and running ones too with their execution closed (their
-- workers learn it at the next heartbeat, and the fence refuses what they send after, as
-- codity.cancel does). Their edges are resolved 'cancelled'. An open batch is sealed: it
-- takes no member after. Nodes that finished stay as they are. Calling it again cancels
-- nothing more (no row), so a repeated request is harmless.
--
-- Locks: the batch's workflow row when it is open (the row add_to_batch and seal_batch
-- lock first), then the unfinished nodes in (depth, queue, id) order (codity._lock_nodes),
-- the order settlements lock children in. A heartbeat holding two of its worker's nodes
-- in another order can still meet it; PostgreSQL ends one of the two with 40P01, and this
-- function then starts over (up to five times) while the heartbeat is sent again next
-- beat. Callers: the web API, operators.

CREATE OR REPLACE FUNCTION codity.cancel_workflow(
    p_workflow_id bigint,
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (job_id bigint, node_key text, previous_status codity.job_status)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_project_id bigint := codity._project_id(p_project_id);
    v_workflow record;
    v_try integer := 0;
    v_queue bigint;
    v_ids bigint[];
    v_keys text[];
    v_queues bigint[];
    v_previous codity.job_status[];
BEGIN
    PERFORM codity._check_clock(p_now);
    v_workflow := codity._workflow(p_workflow_id, v_project_id);
    LOOP
        v_try := v_try + 1;
        BEGIN
            IF v_workflow.kind = 'batch' THEN
                UPDATE codity.workflows w SET sealed_at = p_now
                WHERE w.id = p_workflow_id AND w.sealed_at IS NULL;
            END IF;
            SELECT coalesce(pg_catalog.array_agg(l.job_id), '{}'), coalesce(pg_catalog.array_agg(l.node_key), '{}'),
                   coalesce(pg_catalog.array_agg(l.queue_id), '{}'), coalesce(pg_catalog.array_agg(l.job_status), '{}')
            INTO v_ids, v_keys, v_queues, v_previous
            FROM codity._lock_nodes(p_workflow_id, '{waiting,scheduled,queued,claimed,running}') AS l;
            EXIT;
        EXCEPTION WHEN deadlock_detected THEN
            IF v_try >= 5 THEN
                RAISE;
            END IF;
        END;
    END LOOP;

    FOR v_queue IN SELECT DISTINCT q FROM unnest(v_queues) AS q ORDER BY q LOOP
        -- A held node's attempt ends here: its execution row is written now (the job row
        -- still holds the attempt's worker and times).
        INSERT INTO codity.job_executions
            (job_id, queue_id, project_id, execution_seq, attempt, worker_id, status, claimed_at,
             started_at, finished_at, error)
        SELECT j.id, j.queue_id, j.project_id, j.execution_seq, j.attempt, j.worker_id, 'cancelled',
               j.claimed_at, j.started_at, p_now, 'cancelled with its workflow'
        FROM codity.jobs j
        WHERE j.queue_id = v_queue AND j.id = ANY (v_ids) AND j.status IN ('claimed', 'running');
        UPDATE codity.jobs j
        SET status = 'cancelled', finished_at = p_now, lock_expires_at = NULL, updated_at = p_now,
            last_error = 'cancelled with its workflow'
        WHERE j.queue_id = v_queue AND j.id = ANY (v_ids);
    END LOOP;
    -- Every unfinished node is cancelled already: settling them only resolves their edges.
    FOR v_queue IN SELECT DISTINCT q FROM unnest(v_queues) AS q ORDER BY q LOOP
        PERFORM codity._settle_children(
            v_queue,
            ARRAY(SELECT n.id FROM unnest(v_ids, v_queues) AS n(id, q) WHERE n.q = v_queue),
            'cancelled', p_now);
    END LOOP;

    RETURN QUERY
    SELECT n.id, n.node_key, n.previous_status
    FROM unnest(v_ids, v_keys, v_previous) AS n(id, node_key, previous_status)
    ORDER BY n.id;
END;
$$;

COMMENT ON FUNCTION codity.cancel_workflow(bigint, bigint, timestamptz) IS
'Cancel every unfinished node of a workflow or batch; a running one is told at its worker''s next heartbeat.

Returns one row per node cancelled (none when nothing was left to cancel); an open batch is
sealed. Raises CD008 (no such workflow in the project).
Example: SELECT * FROM codity.cancel_workflow(7);';

REVOKE ALL ON FUNCTION codity.cancel_workflow(bigint, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.cancel_workflow(bigint, bigint, timestamptz) TO codity_app;
