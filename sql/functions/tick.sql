-- codity.tick: one pass of every cluster-wide loop.
--
-- sweep_workers first (so dead workers' leases are cut), then reap (requeue them), then,
-- on a Citus cluster, the workflow settlements left by the bodies Citus ran on the queues'
-- nodes (codity._fold_settlements), then promote (due scheduled jobs), then
-- materialize_cron (due schedules), then roll_up (the dashboard's per-minute figures, once
-- a minute). Each step is safe
-- with several schedulers at once, so no leader is needed. The scheduler process calls
-- this every SCHEDULER_TICK_MS; pg_cron can call it instead (docs/RUNBOOK.md).

CREATE OR REPLACE FUNCTION codity.tick(
    p_now timestamptz DEFAULT now(),
    p_worker_stale_after interval DEFAULT NULL
)
RETURNS TABLE (workers_dead integer, reaped integer, dead_lettered integer, promoted integer, materialized integer)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_workers_dead integer;
    v_reaped integer;
    v_dead_lettered integer;
    v_promoted integer;
    v_materialized integer;
BEGIN
    PERFORM codity._check_clock(p_now);
    SELECT count(*) INTO v_workers_dead FROM codity.sweep_workers(p_now, p_worker_stale_after);
    SELECT count(*) FILTER (WHERE r.outcome = 'requeued'), count(*) FILTER (WHERE r.outcome = 'dead_letter')
    INTO v_reaped, v_dead_lettered
    FROM codity.reap(p_now) AS r;
    -- On a Citus cluster: the workflow nodes settled since the last tick (those reap just
    -- dead-lettered too) release, count down or cancel their children. Nothing on one server.
    PERFORM codity._fold_settlements(p_now);
    v_promoted := codity.promote(p_now);
    SELECT count(*) INTO v_materialized FROM codity.materialize_cron(p_now);
    PERFORM codity.roll_up(p_now);
    RETURN QUERY SELECT v_workers_dead, v_reaped, v_dead_lettered, v_promoted, v_materialized;
END;
$$;

COMMENT ON FUNCTION codity.tick(timestamptz, interval) IS
'Run sweep_workers, reap, promote, materialize_cron and roll_up once; returns what the
first four did.

Call it every few seconds from the scheduler process or from pg_cron; any number of
callers may run at once. Workers silent for p_worker_stale_after (NULL: the
installation''s worker_dead_after, see codity.configure) are declared dead.
Example: SELECT * FROM codity.tick();';

REVOKE ALL ON FUNCTION codity.tick(timestamptz, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.tick(timestamptz, interval) TO codity_app;
