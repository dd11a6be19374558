-- codity.prune_housekeeping: delete what no longer matters outside the queues: workers long
-- gone, refresh tokens long expired, old fence rejections.
--
-- codity.prune keeps the job tables bounded; these three grew for as long as Codity ran
-- (docs/DESIGN_DECISIONS.md 57). Deleted: a
-- worker that stopped or was declared dead more than p_keep_workers ago (7 days; at least
-- an hour, longer than any worker_dead_after, since a dead worker that heartbeats again
-- becomes active) and holds no job; a refresh token that expired more than
-- p_keep_refresh_tokens ago (1 day), once no token of its family that is not revoked is
-- younger: a rotated token presented again revokes its family, and that must keep working
-- while the family can still be refreshed. Presented later, a deleted token is refused as
-- unknown instead of expired, with the same 401. Executions and jobs keep the id of a
-- pruned worker (worker ids on them are not foreign keys, migration 0014). A fence rejection
-- older than p_keep_fence_rejections (30 days): counted into codity.fence_rejection_totals
-- in the transaction that deletes it, so /metrics' total (totals plus rows) never falls.
-- At most p_limit rows of each per call, oldest first; rows locked by another session (a
-- worker heartbeating, a token being rotated) are skipped. Not a hot path: it reads the
-- jobs of a worker by worker_id across queues, as codity.sweep_workers does.
-- Callers: the scheduler process after codity.prune, pg_cron (docs/RUNBOOK.md).

CREATE OR REPLACE FUNCTION codity.prune_housekeeping(
    p_now timestamptz DEFAULT now(),
    p_limit integer DEFAULT 1000,
    p_keep_workers interval DEFAULT interval '7 days',
    p_keep_refresh_tokens interval DEFAULT interval '1 day',
    p_keep_fence_rejections interval DEFAULT interval '30 days'
)
RETURNS TABLE (workers integer, refresh_tokens integer, fence_rejections integer)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_busy bigint[];
    v_workers integer;
    v_tokens integer;
    v_rejections bigint[];
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'p_limit must be from 1 to 100000, got %', coalesce(p_limit::text, 'NULL')
            USING ERRCODE = 'CD010';
    END IF;
    IF p_keep_workers IS NULL OR p_keep_workers < interval '1 hour' THEN
        RAISE EXCEPTION 'p_keep_workers must be at least 1 hour, got %',
            coalesce(p_keep_workers::text, 'NULL')
            USING ERRCODE = 'CD010';
    END IF;
    IF p_keep_refresh_tokens IS NULL OR p_keep_refresh_tokens < interval '0' THEN
        RAISE EXCEPTION 'p_keep_refresh_tokens must be 0 or more, got %',
            coalesce(p_keep_refresh_tokens::text, 'NULL')
            USING ERRCODE = 'CD010';
    END IF;
    IF p_keep_fence_rejections IS NULL OR p_keep_fence_rejections < interval '0' THEN
        RAISE EXCEPTION 'p_keep_fence_rejections must be 0 or more, got %',
            coalesce(p_keep_fence_rejections::text, 'NULL')
            USING ERRCODE = 'CD010';
    END IF;

    -- The workers that still hold a job, read first: a stopped or dead worker can lose its
    -- jobs (reap) but never gain one (claim refuses it, and a heartbeat that revives it
    -- makes it active, which the locked re-check below sees). On a Citus cluster this is a
    -- read of every shard, and the DELETE then touches the reference table alone (Citus
    -- refuses a row lock over a join of the two).
    v_busy := ARRAY(
        SELECT DISTINCT j.worker_id FROM codity.jobs j
        WHERE j.status IN ('claimed', 'running') AND j.worker_id IS NOT NULL);
    DELETE FROM codity.workers w
    WHERE w.id = ANY (ARRAY(
        SELECT o.id
        FROM codity.workers o
        WHERE o.status <> 'active' AND o.stopped_at < p_now - p_keep_workers
          AND NOT (o.id = ANY (v_busy))
        ORDER BY o.stopped_at
        LIMIT p_limit
        FOR UPDATE OF o SKIP LOCKED));
    GET DIAGNOSTICS v_workers = ROW_COUNT;

    DELETE FROM codity.refresh_tokens t
    WHERE t.id = ANY (ARRAY(
        SELECT o.id
        FROM codity.refresh_tokens o
        WHERE o.expires_at < p_now - p_keep_refresh_tokens
          -- A rotated token stays while its family can still be refreshed: presented again,
          -- it must still revoke the family (reuse detection, docs/SECURITY.md).
          AND NOT EXISTS (
              SELECT 1 FROM codity.refresh_tokens n
              WHERE n.family_id = o.family_id AND n.revoked_at IS NULL
                AND n.expires_at >= p_now - p_keep_refresh_tokens)
        ORDER BY o.expires_at
        LIMIT p_limit
        FOR UPDATE OF o SKIP LOCKED));
    GET DIAGNOSTICS v_tokens = ROW_COUNT;

    -- Old fence rejections, locked first (so no other call counts them too), counted into
    -- the totals, then deleted: three statements of one transaction, no modifying CTE.
    v_rejections := ARRAY(
        SELECT o.id FROM codity.fence_rejections o
        WHERE o.rejected_at < p_now - p_keep_fence_rejections
        ORDER BY o.rejected_at
        LIMIT p_limit
        FOR UPDATE OF o SKIP LOCKED);
    IF cardinality(v_rejections) > 0 THEN
        INSERT INTO codity.fence_rejection_totals AS t (project_id, queue_id, rejections)
        SELECT f.project_id, f.queue_id, count(*)
        FROM codity.fence_rejections f WHERE f.id = ANY (v_rejections)
        GROUP BY f.project_id, f.queue_id
        ON CONFLICT (project_id, queue_id)
            DO UPDATE SET rejections = t.rejections + EXCLUDED.rejections;
        DELETE FROM codity.fence_rejections f WHERE f.id = ANY (v_rejections);
    END IF;

    RETURN QUERY SELECT v_workers, v_tokens, cardinality(v_rejections);
END;
$$;

COMMENT ON FUNCTION codity.prune_housekeeping(timestamptz, integer, interval, interval, interval) IS
'Delete workers gone for longer than p_keep_workers (default 7 days, at least 1 hour) that hold no job, refresh tokens expired for longer than p_keep_refresh_tokens (1 day) whose family has no live token left, and fence rejections older than p_keep_fence_rejections (30 days), counted into codity.fence_rejection_totals as they go.

At most p_limit (1..100000, default 1000) rows of each per call, oldest first; rows locked
by another session are skipped. Returns how many of each it deleted: call it again while
they are not zero. The scheduler calls it after every tick, after codity.prune. Raises
CD010 (p_limit or a period out of range).
Example: SELECT * FROM codity.prune_housekeeping();';

REVOKE ALL ON FUNCTION codity.prune_housekeeping(timestamptz, integer, interval, interval, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.prune_housekeeping(timestamptz, integer, interval, interval, interval) TO codity_app;
