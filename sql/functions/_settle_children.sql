-- codity._settle_children: what settling workflow jobs does to the jobs that run after them.
--
-- Called in the transaction that settles the parents (completes, dead-letters or cancels
-- them), by complete_many_in_queue and _dead_letter (through codity._settle_nodes), cancel,
-- cancel_jobs, cancel_workflow and skip_node, and only for jobs of a workflow (workflow_id
-- IS NOT NULL): a plain job never comes here. On a Citus cluster the bodies Citus runs on a
-- queue's node leave a row in codity.workflow_events instead, and codity.tick folds those
-- into this function on the coordinator (codity._fold_settlements): the overload by arrays
-- takes parents of several queues and outcomes at once, so that their children are still
-- locked in the one global order below.
--
-- 1. The parents' open edges are resolved with the outcome (once: a repeated call after a
--    lost COMMIT finds them resolved and does nothing).
-- 2. Each child is told: deps_remaining goes down by the edges that count as settled (the
--    parent completed or was skipped, or its edge says 'ignore' or 'run'); an edge 'cancel'
--    from a dead-lettered or cancelled parent cancels the child; an edge 'hold' from one
--    leaves the child waiting, its count unchanged, until an operator retries or skips that
--    parent (codity.retry_workflow, skip_node, replay_dead_letter reopen the edge). A child
--    still waiting whose count reaches 0 becomes queued (scheduled when its run_at is later),
--    in this transaction, and its queue's workers are woken. A child on 'run' edges (every
--    edge of such a child is one) is released by the first dead-lettered parent, and
--    cancelled when its count reaches 0 without one.
-- 3. A child cancelled so settles its own children the same way, level after level.
--
-- Exactly once: every change to a child is an UPDATE of its row under the row lock, which
-- re-reads the row another transaction committed meanwhile (READ COMMITTED), so of two
-- transactions settling its last two parents at once only one sees the count reach 0.
-- No deadlock: children are locked in one global order, (depth, queue id, id), depth being
-- the longest path to the node from a root, and a level is taken only after every
-- shallower one. Locks the children's rows; touches the edges of the parents' queue only.
-- SECURITY INVOKER without SET: called only from definer functions; granted to nobody.

CREATE OR REPLACE FUNCTION codity._settle_children(
    p_queue_ids bigint[],
    p_parent_ids bigint[],
    p_outcomes text[],
    p_now timestamptz
)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $$
DECLARE
    -- Children told of a settled parent, not yet changed: one entry per edge.
    v_queues bigint[] := '{}';
    v_ids bigint[] := '{}';
    v_depths integer[] := '{}';
    v_ok integer[] := '{}';      -- 1 when the edge counts as settled
    v_cancel integer[] := '{}';  -- 1 when the edge cancels the child
    v_fire integer[] := '{}';    -- 1 when the edge releases the child now ('run', dead parent)
    v_watch integer[] := '{}';   -- 1 when the edge is 'run'
    v_depth integer;
    v_level record;
    v_queue bigint;
    v_child record;
    v_status codity.job_status;
    v_cancelled bigint[];
    v_queued boolean;
    v_more record;
    v_group record;
BEGIN
    -- The parents' edges, one statement per parent queue and outcome (on a Citus cluster
    -- each names the shard of that queue), in queue order.
    FOR v_group IN
        SELECT g.q, g.outcome, pg_catalog.array_agg(g.id) AS ids
        FROM unnest(p_queue_ids, p_parent_ids, p_outcomes) AS g(q, id, outcome)
        GROUP BY g.q, g.outcome
        ORDER BY g.q, g.outcome
    LOOP
        WITH resolved AS (
            UPDATE codity.job_deps d SET resolved = v_group.outcome, resolved_at = p_now
            WHERE d.queue_id = v_group.q AND d.parent_id = ANY (v_group.ids) AND d.resolved IS NULL
            RETURNING d.child_queue_id, d.child_id, d.child_depth, d.on_failure
        )
        SELECT pg_catalog.array_agg(d.child_queue_id) AS queues,
               pg_catalog.array_agg(d.child_id) AS ids,
               pg_catalog.array_agg(d.child_depth) AS depths,
               pg_catalog.array_agg(CASE WHEN v_group.outcome IN ('completed', 'skipped')
                                              OR d.on_failure IN ('ignore', 'run') THEN 1 ELSE 0 END) AS ok,
               pg_catalog.array_agg(CASE WHEN v_group.outcome NOT IN ('completed', 'skipped')
                                              AND d.on_failure = 'cancel' THEN 1 ELSE 0 END) AS cancel,
               pg_catalog.array_agg(CASE WHEN v_group.outcome = 'dead_letter' AND d.on_failure = 'run' THEN 1 ELSE 0 END) AS fire,
               pg_catalog.array_agg(CASE WHEN d.on_failure = 'run' THEN 1 ELSE 0 END) AS watch
        INTO v_more
        FROM resolved AS d;
        IF v_more.ids IS NOT NULL THEN
            v_queues := v_queues || v_more.queues;
            v_ids := v_ids || v_more.ids;
            v_depths := v_depths || v_more.depths;
            v_ok := v_ok || v_more.ok;
            v_cancel := v_cancel || v_more.cancel;
            v_fire := v_fire || v_more.fire;
            v_watch := v_watch || v_more.watch;
        END IF;
    END LOOP;

    WHILE cardinality(v_ids) > 0 LOOP
        v_depth := (SELECT pg_catalog.min(x) FROM unnest(v_depths) AS x);
        -- This level, one entry per child, and what is left for the deeper ones.
        SELECT pg_catalog.array_agg(c.q ORDER BY c.q, c.id) AS queues,
               pg_catalog.array_agg(c.id ORDER BY c.q, c.id) AS ids,
               pg_catalog.array_agg(c.ok ORDER BY c.q, c.id) AS ok,
               pg_catalog.array_agg(c.cancel ORDER BY c.q, c.id) AS cancel,
               pg_catalog.array_agg(c.fire ORDER BY c.q, c.id) AS fire,
               pg_catalog.array_agg(c.watch ORDER BY c.q, c.id) AS watch
        INTO v_level
        FROM (SELECT e.q, e.id, pg_catalog.sum(e.ok)::integer AS ok, pg_catalog.sum(e.cancel)::integer AS cancel,
                     pg_catalog.sum(e.fire)::integer AS fire, pg_catalog.sum(e.watch)::integer AS watch
              FROM unnest(v_queues, v_ids, v_depths, v_ok, v_cancel, v_fire, v_watch)
                   AS e(q, id, depth, ok, cancel, fire, watch)
              WHERE e.depth = v_depth
              GROUP BY e.q, e.id) AS c;
        SELECT coalesce(pg_catalog.array_agg(e.q), '{}'), coalesce(pg_catalog.array_agg(e.id), '{}'),
               coalesce(pg_catalog.array_agg(e.depth), '{}'), coalesce(pg_catalog.array_agg(e.ok), '{}'),
               coalesce(pg_catalog.array_agg(e.cancel), '{}'), coalesce(pg_catalog.array_agg(e.fire), '{}'),
               coalesce(pg_catalog.array_agg(e.watch), '{}')
        INTO v_queues, v_ids, v_depths, v_ok, v_cancel, v_fire, v_watch
        FROM unnest(v_queues, v_ids, v_depths, v_ok, v_cancel, v_fire, v_watch)
             AS e(q, id, depth, ok, cancel, fire, watch)
        WHERE e.depth <> v_depth;

        FOR v_queue IN SELECT DISTINCT q FROM unnest(v_level.queues) AS q ORDER BY q LOOP
            -- One UPDATE per child, in id order: each an index probe and the row's lock,
            -- whatever the number of children (a join with the array let the planner scan
            -- the queue's jobs once per child: 23 s for a fan-out of 10,000).
            v_cancelled := '{}';
            v_queued := false;
            FOR v_child IN
                SELECT c.id, c.ok, c.cancel, c.fire, c.watch
                FROM unnest(v_level.queues, v_level.ids, v_level.ok, v_level.cancel, v_level.fire, v_level.watch)
                     AS c(q, id, ok, cancel, fire, watch)
                WHERE c.q = v_queue
                ORDER BY c.id
            LOOP
                -- A 'run' child whose last watched parent settled with none dead: cancelled.
                UPDATE codity.jobs j
                SET deps_remaining = j.deps_remaining - v_child.ok,
                    status = CASE WHEN v_child.cancel > 0
                                       OR (v_child.watch > 0 AND v_child.fire = 0 AND j.deps_remaining - v_child.ok <= 0)
                                  THEN 'cancelled'::codity.job_status
                                  WHEN v_child.fire = 0 AND j.deps_remaining - v_child.ok > 0 THEN 'waiting'::codity.job_status
                                  WHEN j.run_at <= p_now THEN 'queued'::codity.job_status
                                  ELSE 'scheduled'::codity.job_status END,
                    finished_at = CASE WHEN v_child.cancel > 0
                                            OR (v_child.watch > 0 AND v_child.fire = 0 AND j.deps_remaining - v_child.ok <= 0)
                                       THEN p_now END,
                    last_error = CASE WHEN v_child.cancel > 0
                                      THEN 'cancelled: a job it runs after did not complete'
                                      WHEN v_child.watch > 0 AND v_child.fire = 0 AND j.deps_remaining - v_child.ok <= 0
                                      THEN 'cancelled: no job it watches was dead-lettered'
                                      ELSE j.last_error END,
                    updated_at = p_now
                WHERE j.queue_id = v_queue AND j.id = v_child.id AND j.status = 'waiting'
                RETURNING j.status INTO v_status;
                IF v_status = 'cancelled' THEN
                    v_cancelled := v_cancelled || v_child.id;
                ELSIF v_status = 'queued' THEN
                    v_queued := true;
                END IF;
                v_status := NULL;
            END LOOP;
            IF v_queued AND NOT (SELECT q.is_paused FROM codity.queues q WHERE q.id = v_queue) THEN
                PERFORM codity._notify(v_queue);
            END IF;
            IF cardinality(v_cancelled) > 0 THEN
                -- Their own children, one level deeper or more: taken in a later turn.
                WITH resolved AS (
                    UPDATE codity.job_deps d SET resolved = 'cancelled', resolved_at = p_now
                    WHERE d.queue_id = v_queue AND d.parent_id = ANY (v_cancelled)
                      AND d.resolved IS NULL
                    RETURNING d.child_queue_id, d.child_id, d.child_depth, d.on_failure
                )
                SELECT pg_catalog.array_agg(d.child_queue_id) AS queues, pg_catalog.array_agg(d.child_id) AS ids,
                       pg_catalog.array_agg(d.child_depth) AS depths,
                       pg_catalog.array_agg(CASE WHEN d.on_failure IN ('ignore', 'run') THEN 1 ELSE 0 END) AS ok,
                       pg_catalog.array_agg(CASE WHEN d.on_failure = 'cancel' THEN 1 ELSE 0 END) AS cancel,
                       pg_catalog.array_agg(CASE WHEN d.on_failure = 'run' THEN 1 ELSE 0 END) AS watch
                INTO v_more
                FROM resolved AS d;
                IF v_more.ids IS NOT NULL THEN
                    v_queues := v_queues || v_more.queues;
                    v_ids := v_ids || v_more.ids;
                    v_depths := v_depths || v_more.depths;
                    v_ok := v_ok || v_more.ok;
                    v_cancel := v_cancel || v_more.cancel;
                    v_fire := v_fire || array_fill(0, ARRAY[cardinality(v_more.ids)]);
                    v_watch := v_watch || v_more.watch;
                END IF;
            END IF;
        END LOOP;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION codity._settle_children(bigint[], bigint[], text[], timestamptz) IS
'Private: resolve the workflow edges of settled parents of any queues, each with its outcome, and release, count down or cancel their children, level by level, in the same transaction.';

REVOKE ALL ON FUNCTION codity._settle_children(bigint[], bigint[], text[], timestamptz) FROM PUBLIC;

-- The parents of one queue, all settled the same way: what every settlement on one server
-- calls, and the operators' actions on a Citus cluster too (they run on the coordinator).
CREATE OR REPLACE FUNCTION codity._settle_children(
    p_queue_id bigint,
    p_parent_ids bigint[],
    p_outcome text,
    p_now timestamptz
)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $$
BEGIN
    PERFORM codity._settle_children(
        pg_catalog.array_fill(p_queue_id, ARRAY[cardinality(p_parent_ids)]),
        p_parent_ids,
        pg_catalog.array_fill(p_outcome, ARRAY[cardinality(p_parent_ids)]),
        p_now);
END;
$$;

COMMENT ON FUNCTION codity._settle_children(bigint, bigint[], text, timestamptz) IS
'Private: resolve the workflow edges of settled parents (completed, skipped, dead_letter or cancelled) and release, count down or cancel their children, level by level, in the same transaction.';

REVOKE ALL ON FUNCTION codity._settle_children(bigint, bigint[], text, timestamptz) FROM PUBLIC;
