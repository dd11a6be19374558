-- codity._reset_nodes: finished nodes of a workflow run again, after the parents that run
-- again with them (codity.retry_workflow, skip_node).
--
-- The caller has locked, in (depth, queue id, id) order, the nodes given (each completed,
-- dead-lettered, cancelled or waiting) and every waiting node of the workflow. Then:
-- 1. the edges out of the given nodes are reopened (outcome NULL): the children count them
--    again;
-- 2. each given node and each waiting node has its count of unsettled parents recomputed
--    from its edges: an edge counts while it is open, or when it holds the child ('hold'
--    from a failed parent); an open batch's callbacks count the seal as well;
-- 3. a given node starts afresh (attempts and crash count 0, due now, its dead letter marked
--    replayed into itself): queued when nothing is left to wait for, else waiting; a
--    waiting node whose count came to 0 is queued. The fence (execution_seq) keeps growing.
-- Their queues are woken. Returns each given node with its new status.
-- SECURITY INVOKER without SET: called only from definer functions; granted to nobody.

CREATE OR REPLACE FUNCTION codity._reset_nodes(
    p_workflow_id bigint,
    p_ids bigint[],
    p_now timestamptz
)
RETURNS TABLE (job_id bigint, node_key text, queue_id bigint, previous_status codity.job_status, job_status codity.job_status)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $$
#variable_conflict use_column
DECLARE
    v_open_batch boolean;
    v_ids bigint[];
    v_keys text[];
    v_queue_ids bigint[];
    v_previous codity.job_status[];
    v_statuses codity.job_status[];
    v_woken bigint[];
BEGIN
    SELECT w.kind = 'batch' AND w.sealed_at IS NULL INTO v_open_batch
    FROM codity.workflows w WHERE w.id = p_workflow_id;

    UPDATE codity.job_deps d SET resolved = NULL, resolved_at = NULL
    FROM codity.jobs p
    WHERE p.id = ANY (p_ids) AND p.workflow_id = p_workflow_id
      AND d.queue_id = p.queue_id AND d.parent_id = p.id AND d.resolved IS NOT NULL;

    UPDATE codity.dead_letters l SET replayed_at = p_now, replayed_job_id = l.job_id
    FROM codity.jobs j
    WHERE j.id = ANY (p_ids) AND j.workflow_id = p_workflow_id AND j.status = 'dead_letter'
      AND l.queue_id = j.queue_id AND l.job_id = j.id AND l.replayed_at IS NULL;

    WITH counted AS (
        SELECT j.queue_id, j.id, j.status, j.id = ANY (p_ids) AS given,
               (SELECT pg_catalog.count(*)::integer FROM codity.job_deps d
                WHERE d.child_queue_id = j.queue_id AND d.child_id = j.id
                  AND (d.resolved IS NULL
                       OR (d.on_failure = 'hold' AND d.resolved IN ('dead_letter', 'cancelled'))))
               + CASE WHEN v_open_batch AND j.node_key IS NOT NULL THEN 1 ELSE 0 END AS remaining
        FROM codity.jobs j
        WHERE j.workflow_id = p_workflow_id AND (j.id = ANY (p_ids) OR j.status = 'waiting')
    ),
    reset AS (
        UPDATE codity.jobs j
        SET deps_remaining = c.remaining,
            status = CASE WHEN c.remaining > 0 THEN 'waiting'::codity.job_status ELSE 'queued'::codity.job_status END,
            attempt = CASE WHEN c.given THEN 0 ELSE j.attempt END,
            crash_count = CASE WHEN c.given THEN 0 ELSE j.crash_count END,
            run_at = CASE WHEN c.given THEN p_now ELSE j.run_at END,
            finished_at = NULL,
            lock_expires_at = NULL,
            updated_at = p_now
        FROM counted c
        WHERE j.queue_id = c.queue_id AND j.id = c.id
          AND (c.given OR c.remaining IS DISTINCT FROM j.deps_remaining)
        RETURNING j.id, j.node_key, j.queue_id, c.status AS previous_status, j.status, c.given
    )
    SELECT coalesce(pg_catalog.array_agg(r.id ORDER BY r.id) FILTER (WHERE r.given), '{}'),
           coalesce(pg_catalog.array_agg(r.node_key ORDER BY r.id) FILTER (WHERE r.given), '{}'),
           coalesce(pg_catalog.array_agg(r.queue_id ORDER BY r.id) FILTER (WHERE r.given), '{}'),
           coalesce(pg_catalog.array_agg(r.previous_status ORDER BY r.id) FILTER (WHERE r.given), '{}'),
           coalesce(pg_catalog.array_agg(r.status ORDER BY r.id) FILTER (WHERE r.given), '{}'),
           coalesce(pg_catalog.array_agg(DISTINCT r.queue_id) FILTER (WHERE r.status = 'queued'), '{}')
    INTO v_ids, v_keys, v_queue_ids, v_previous, v_statuses, v_woken
    FROM reset r;

    PERFORM codity._notify(q.id) FROM codity.queues q WHERE q.id = ANY (v_woken) AND NOT q.is_paused;
    RETURN QUERY
    SELECT r.id, r.node_key, r.queue_id, r.previous_status, r.status
    FROM unnest(v_ids, v_keys, v_queue_ids, v_previous, v_statuses) AS r(id, node_key, queue_id, previous_status, status);
END;
$$;

COMMENT ON FUNCTION codity._reset_nodes(bigint, bigint[], timestamptz) IS
'Private: finished nodes of a workflow run again: their edges reopened, counts recomputed, queued or waiting (callers lock them first).';

REVOKE ALL ON FUNCTION codity._reset_nodes(bigint, bigint[], timestamptz) FROM PUBLIC;
