-- codity.roll_up: close the minutes that have ended into codity.queue_minutes.
--
-- For each queue and minute: the executions that completed and that failed in it (by
-- finish time), the jobs dead-lettered in it, and, for the latest closed minute, the
-- queue's depth (claimable, scheduled, running; capped, from codity.queue_depths). A
-- minute is closed 15 seconds after it ends, so a call that took its time to commit is
-- still counted (finished_at is its transaction's start). At most one hour is rolled per
-- call; a scheduler that was down catches up an hour per tick. Rows older than
-- rollup_state.keep are deleted. The same minutes' executions completed, failed and reaped
-- and jobs dead-lettered are added to codity.queue_totals, which only grows: the Prometheus
-- counters (migration 0022) read it, as the rows it was counted from are pruned.
-- Locks: the one rollup_state row, FOR UPDATE SKIP LOCKED, so of several schedulers
-- exactly one rolls a minute up and none waits. Cheap when nothing is due (one read).
-- Caller: codity.tick.

CREATE OR REPLACE FUNCTION codity.roll_up(p_now timestamptz DEFAULT now())
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
DECLARE
    v_due timestamptz := date_trunc('minute', p_now - interval '15 seconds');
    v_state codity.rollup_state;
    v_from timestamptz;
    v_until timestamptz;
    v_minutes integer;
    v_add record;
BEGIN
    PERFORM codity._check_clock(p_now);
    SELECT * INTO v_state FROM codity.rollup_state;
    IF v_state.rolled_until >= v_due THEN
        RETURN 0;
    END IF;
    SELECT * INTO v_state FROM codity.rollup_state FOR UPDATE SKIP LOCKED;
    IF NOT FOUND OR v_state.rolled_until >= v_due THEN
        RETURN 0;  -- another scheduler is rolling up, or just did
    END IF;
    v_from := greatest(coalesce(v_state.rolled_until, v_due - interval '1 hour'),
                       v_due - v_state.keep);
    v_until := least(v_due, v_from + interval '1 hour');

    INSERT INTO codity.queue_minutes AS m (queue_id, project_id, minute, completed, failed)
    SELECT x.queue_id, q.project_id, date_trunc('minute', x.finished_at),
           count(*) FILTER (WHERE x.status = 'completed'),
           count(*) FILTER (WHERE x.status = 'failed')
    FROM codity.queues q
    JOIN codity.job_executions x
      ON x.queue_id = q.id AND x.finished_at >= v_from AND x.finished_at < v_until
    WHERE x.status IN ('completed', 'failed')
    GROUP BY 1, 2, 3
    ON CONFLICT (queue_id, minute) DO UPDATE
        SET completed = excluded.completed, failed = excluded.failed;

    INSERT INTO codity.queue_minutes AS m (queue_id, project_id, minute, dead_lettered)
    SELECT d.queue_id, q.project_id, date_trunc('minute', d.dead_at), count(*)
    FROM codity.queues q
    JOIN codity.dead_letters d
      ON d.queue_id = q.id AND d.dead_at >= v_from AND d.dead_at < v_until
    GROUP BY 1, 2, 3
    ON CONFLICT (queue_id, minute) DO UPDATE SET dead_lettered = excluded.dead_lettered;

    IF v_until = v_due THEN
        INSERT INTO codity.queue_minutes AS m
            (queue_id, project_id, minute, claimable, scheduled, running)
        SELECT d.queue_id, q.project_id, v_until - interval '1 minute', d.claimable, d.scheduled,
               d.running
        FROM codity.queue_depths(NULL, NULL, p_now) d
        JOIN codity.queues q ON q.id = d.queue_id
        WHERE d.claimable + d.scheduled + d.running > 0
        ON CONFLICT (queue_id, minute) DO UPDATE
            SET claimable = excluded.claimable, scheduled = excluded.scheduled,
                running = excluded.running;
    END IF;

    -- The totals: what each queue finished in these minutes, read per queue from its totals
    -- row (every queue has one, migration 0029; on a Citus cluster the counts run on the
    -- shards beside it), then added queue by queue.
    FOR v_add IN
        SELECT t.queue_id, x.completed, x.failed, x.reaped, d.dead_lettered
        FROM codity.queue_totals t
        CROSS JOIN LATERAL (
            SELECT count(*) FILTER (WHERE e.status = 'completed') AS completed,
                   count(*) FILTER (WHERE e.status = 'failed') AS failed,
                   count(*) FILTER (WHERE e.status = 'reaped') AS reaped
            FROM codity.job_executions e
            WHERE e.queue_id = t.queue_id AND e.finished_at >= v_from AND e.finished_at < v_until
        ) x
        CROSS JOIN LATERAL (
            SELECT count(*) AS dead_lettered
            FROM codity.dead_letters l
            WHERE l.queue_id = t.queue_id AND l.dead_at >= v_from AND l.dead_at < v_until
        ) d
        WHERE x.completed + x.failed + x.reaped + d.dead_lettered > 0
        ORDER BY t.queue_id
    LOOP
        UPDATE codity.queue_totals t
        SET completed = t.completed + v_add.completed, failed = t.failed + v_add.failed,
            reaped = t.reaped + v_add.reaped, dead_lettered = t.dead_lettered + v_add.dead_lettered
        WHERE t.queue_id = v_add.queue_id;
    END LOOP;

    DELETE FROM codity.queue_minutes WHERE minute < v_due - v_state.keep;
    UPDATE codity.rollup_state SET rolled_until = v_until, updated_at = p_now;
    v_minutes := (extract(epoch FROM v_until - v_from) / 60)::integer;
    RETURN v_minutes;
END;
$$;

COMMENT ON FUNCTION codity.roll_up(timestamptz) IS
'Roll the minutes that ended (15 s ago or more) into codity.queue_minutes: per queue,
executions completed and failed, jobs dead-lettered, and the latest depth sample; add the
same minutes to codity.queue_totals (with executions reaped); delete rows older than
rollup_state.keep. Returns how many minutes it rolled (0: nothing due, or
another caller is at it). codity.tick calls it; safe to call from several sessions.
Example: SELECT codity.roll_up();';

REVOKE ALL ON FUNCTION codity.roll_up(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.roll_up(timestamptz) TO codity_app;
