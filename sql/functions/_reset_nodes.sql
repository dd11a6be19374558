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
-- Their queues are woken. Returns each given node with its new status. On a Citus cluster
-- (codity._settles_later) the given nodes' unfolded settlements are folded first, and the
-- same steps read the edges and the jobs apart and write the jobs queue by queue.
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
    v_queue bigint;
    v_dead_queues bigint[];
    v_dead_ids bigint[];
    v_counted_ids bigint[];
    v_counts integer[];
    v_node_queues bigint[];
    v_node_ids bigint[];
    v_node_statuses codity.job_status[];
    v_node_given boolean[];
    v_node_remaining integer[];
BEGIN
    SELECT w.kind = 'batch' AND w.sealed_at IS NULL INTO v_open_batch
    FROM codity.workflows w WHERE w.id = p_workflow_id;

    -- A Citus cluster: the given nodes' settlements the tick has not folded yet are folded
    -- first (the caller holds them, codity._hold_settlements, and the nodes' locks), so
    -- none is folded after they run again.
    PERFORM codity._fold_settlements(
        ARRAY(SELECT j.queue_id FROM codity.jobs j WHERE j.id = ANY (p_ids) AND j.workflow_id = p_workflow_id ORDER BY j.id),
        ARRAY(SELECT j.id FROM codity.jobs j WHERE j.id = ANY (p_ids) AND j.workflow_id = p_workflow_id ORDER BY j.id),
        p_now);

    IF codity._settles_later() THEN
        -- A Citus cluster: no job joined to the edges but on the parent's queue, and every
        -- write to the jobs on one queue's shard. The same three steps, from arrays.
        UPDATE codity.job_deps d SET resolved = NULL, resolved_at = NULL
        WHERE d.workflow_id = p_workflow_id AND d.parent_id = ANY (p_ids) AND d.resolved IS NOT NULL;

        SELECT pg_catalog.array_agg(j.queue_id), pg_catalog.array_agg(j.id)
        INTO v_dead_queues, v_dead_ids
        FROM codity.jobs j
        WHERE j.workflow_id = p_workflow_id AND j.id = ANY (p_ids) AND j.status = 'dead_letter';
        FOR v_queue IN SELECT DISTINCT q FROM unnest(v_dead_queues) AS q ORDER BY 1 LOOP
            UPDATE codity.dead_letters l SET replayed_at = p_now, replayed_job_id = l.job_id
            WHERE l.queue_id = v_queue
              AND l.job_id = ANY (ARRAY(SELECT n.id FROM unnest(v_dead_queues, v_dead_ids) AS n(q, id) WHERE n.q = v_queue))
              AND l.replayed_at IS NULL;
        END LOOP;

        -- Each node's edges that still count: open, or holding it behind a failed parent.
        SELECT pg_catalog.array_agg(e.child_id), pg_catalog.array_agg(e.n) INTO v_counted_ids, v_counts
        FROM (SELECT d.child_id, pg_catalog.count(*)::integer AS n FROM codity.job_deps d
              WHERE d.workflow_id = p_workflow_id
                AND (d.resolved IS NULL
                     OR (d.on_failure = 'hold' AND d.resolved IN ('dead_letter', 'cancelled')))
              GROUP BY d.child_id) AS e;
        SELECT pg_catalog.array_agg(j.queue_id), pg_catalog.array_agg(j.id), pg_catalog.array_agg(j.status),
               pg_catalog.array_agg(j.id = ANY (p_ids)),
               pg_catalog.array_agg(coalesce(x.n, 0) + CASE WHEN v_open_batch AND j.node_key IS NOT NULL THEN 1 ELSE 0 END)
        INTO v_node_queues, v_node_ids, v_node_statuses, v_node_given, v_node_remaining
        FROM (SELECT j.queue_id, j.id, j.status, j.node_key FROM codity.jobs j
              WHERE j.workflow_id = p_workflow_id AND (j.id = ANY (p_ids) OR j.status = 'waiting')) AS j
        LEFT JOIN unnest(v_counted_ids, v_counts) AS x(id, n) ON x.id = j.id;

        v_ids := '{}'; v_keys := '{}'; v_queue_ids := '{}'; v_previous := '{}'; v_statuses := '{}'; v_woken := '{}';
        FOR v_queue IN SELECT DISTINCT q FROM unnest(v_node_queues) AS q ORDER BY 1 LOOP
            WITH reset AS (
                UPDATE codity.jobs j
                SET deps_remaining = c.remaining,
                    status = CASE WHEN c.remaining > 0 THEN 'waiting'::codity.job_status ELSE 'queued'::codity.job_status END,
                    attempt = CASE WHEN c.given THEN 0 ELSE j.attempt END,
                    crash_count = CASE WHEN c.given THEN 0 ELSE j.crash_count END,
                    run_at = CASE WHEN c.given THEN p_now ELSE j.run_at END,
                    finished_at = NULL,
                    lock_expires_at = NULL,
                    updated_at = p_now
                FROM unnest(v_node_queues, v_node_ids, v_node_statuses, v_node_given, v_node_remaining)
                     AS c(queue_id, id, status, given, remaining)
                WHERE j.queue_id = v_queue AND c.queue_id = v_queue AND j.id = c.id
                  AND (c.given OR c.remaining IS DISTINCT FROM j.deps_remaining)
                RETURNING j.id, j.node_key, j.queue_id, c.status AS previous_status, j.status, c.given
            )
            SELECT v_ids || coalesce(pg_catalog.array_agg(r.id ORDER BY r.id) FILTER (WHERE r.given), '{}'),
                   v_keys || coalesce(pg_catalog.array_agg(r.node_key ORDER BY r.id) FILTER (WHERE r.given), '{}'),
                   v_queue_ids || coalesce(pg_catalog.array_agg(r.queue_id ORDER BY r.id) FILTER (WHERE r.given), '{}'),
                   v_previous || coalesce(pg_catalog.array_agg(r.previous_status ORDER BY r.id) FILTER (WHERE r.given), '{}'),
                   v_statuses || coalesce(pg_catalog.array_agg(r.status ORDER BY r.id) FILTER (WHERE r.given), '{}'),
                   v_woken || coalesce(pg_catalog.array_agg(DISTINCT r.queue_id) FILTER (WHERE r.status = 'queued'), '{}')
            INTO v_ids, v_keys, v_queue_ids, v_previous, v_statuses, v_woken
            FROM reset r;
        END LOOP;
    ELSE
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
    END IF;

    PERFORM codity._notify(q.id) FROM codity.queues q WHERE q.id = ANY (v_woken) AND NOT q.is_paused;
    RETURN QUERY
    SELECT r.id, r.node_key, r.queue_id, r.previous_status, r.status
    FROM unnest(v_ids, v_keys, v_queue_ids, v_previous, v_statuses) AS r(id, node_key, queue_id, previous_status, status);
END;
$$;

COMMENT ON FUNCTION codity._reset_nodes(bigint, bigint[], timestamptz) IS
'Private: finished nodes of a workflow run again: their edges reopened, counts recomputed, queued or waiting (callers lock them first).';

REVOKE ALL ON FUNCTION codity._reset_nodes(bigint, bigint[], timestamptz) FROM PUBLIC;
