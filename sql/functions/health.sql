-- codity.health: what quietly kills a PostgreSQL queue, checked now, one row per check.
--
-- A queue table is updated all day; it stays small only while vacuum can remove the row
-- versions it leaves behind. These are the conditions that stop that or that fail work
-- outright, each with the value seen, the threshold and whether it is passed:
--
-- - oldest_transaction_seconds: the oldest open transaction (or snapshot) of this
--   database, idle in transaction or running. While it is open no row version newer than
--   its snapshot can be vacuumed anywhere in the database: dead jobs pile up in the claim
--   index and every claim reads past them.
-- - idle_in_transaction_sessions: sessions of this database idle inside a transaction for
--   longer than the threshold's tenth (the usual cause of the above: a client that began
--   and never committed).
-- - prepared_transaction_oldest_seconds: a forgotten two-phase transaction holds the
--   horizon just the same, and survives restarts.
-- - notify_queue_usage_ratio: pg_notification_queue_usage(), the share of the 8 GB NOTIFY queue in
--   use. A listener that never reads keeps it from emptying; when it is full, every enqueue
--   that notifies fails at COMMIT.
-- - jobs_dead_tuples: dead row versions in codity.jobs (pg_stat_user_tables). Passed when
--   over 10,000 and twice what autovacuum would have acted on (50 + 20 % of the live rows):
--   vacuum is not keeping up, or cannot remove them (see the first check).
-- - claim_index_bytes_per_entry: the claim index's size over its entries at the last vacuum
--   (pg_class.reltuples). A healthy B-tree entry here takes about 40 bytes; passed when the
--   index is over 8 MB and more than 400 bytes per entry (mostly empty or dead pages: a
--   REINDEX CONCURRENTLY gives them back).
-- - replication_slot_retained_bytes: the WAL the most demanding replication slot keeps on
--   disk; an abandoned slot keeps it forever and fills the disk. Its xmin holds the horizon
--   too (shown in the detail).
-- - synchronous_standbys: standbys streaming as synchronous (pg_stat_replication). Passed
--   when synchronous_standby_names asks for one and none is connected: every commit waits,
--   until one is back or the setting is cleared (pg_auto_failover clears it when its
--   monitor sees the standby gone); and when the setting is empty while a physical
--   replication slot has no standby streaming from it: the primary runs alone, and losing
--   it now loses the commits since.
-- - seconds_since_primary_changed: how long ago this server began its current timeline
--   (the newest timeline history file in pg_wal, written when a standby is promoted: a
--   failover, a switchover, a point-in-time restore); -1 when it never changed. Passed for
--   an hour after a change, so that operators see that one happened.
-- - workers_silent: active workers whose last heartbeat is older than twice the interval
--   they promised: reconnecting after an outage, or about to be declared dead.
--
-- Reads the statistics views only, with the caller's rights (SECURITY INVOKER): PostgreSQL
-- shows another role's transaction start, xmin and state only to a member of
-- pg_read_all_stats (or pg_monitor), so grant that to the login the web app and the
-- monitoring use (docs/RUNBOOK.md, "Health alarms"); without it the transaction checks see
-- that login's own sessions only, and the standby and timeline checks say they cannot see
-- (pg_ls_waldir needs pg_monitor). codity_owner stays a member of no role, so no definer
-- function can read other sessions' queries. No query text, user or address is shown.
-- Callers: GET /api/v1/metrics, codity status, the dashboard's overview, operators.

CREATE OR REPLACE FUNCTION codity.health(
    p_transaction_seconds double precision DEFAULT 300,
    p_notify_usage double precision DEFAULT 0.5,
    p_slot_bytes double precision DEFAULT 1073741824
)
RETURNS TABLE (check_name text, value double precision, threshold double precision,
               alarm boolean, detail text)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_oldest record;
    v_prepared record;
    v_idle integer;
    v_usage double precision := pg_catalog.pg_notification_queue_usage();
    v_dead double precision;
    v_live double precision;
    v_index_bytes double precision;
    v_index_entries double precision;
    v_slot record;
    v_sync integer;
    v_hidden integer;
    v_wanted text := pg_catalog.current_setting('synchronous_standby_names');
    v_lone_slot text;
    v_timeline record;
    v_silent integer;
BEGIN
    IF p_transaction_seconds IS NULL OR p_transaction_seconds <= 0
       OR p_notify_usage IS NULL OR p_notify_usage NOT BETWEEN 0 AND 1
       OR p_slot_bytes IS NULL OR p_slot_bytes < 0 THEN
        RAISE EXCEPTION 'thresholds must be positive (p_notify_usage from 0 to 1), got %, %, %',
                        p_transaction_seconds, p_notify_usage, p_slot_bytes
            USING ERRCODE = 'CD010';
    END IF;

    SELECT a.pid, a.state,
           extract(epoch FROM pg_catalog.clock_timestamp() - coalesce(a.xact_start, a.query_start))::float8
               AS seconds
    INTO v_oldest
    FROM pg_catalog.pg_stat_activity a
    WHERE a.datname = pg_catalog.current_database()
      AND a.pid <> pg_catalog.pg_backend_pid()
      AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
    ORDER BY coalesce(a.xact_start, a.query_start)
    LIMIT 1;
    check_name := 'oldest_transaction_seconds';
    value := coalesce(v_oldest.seconds, 0);
    threshold := p_transaction_seconds;
    alarm := value > threshold;
    detail := CASE WHEN v_oldest.pid IS NULL THEN 'no transaction open'
                   ELSE pg_catalog.format('pid %s, %s, open for %s s', v_oldest.pid,
                                          coalesce(v_oldest.state, 'state hidden'),
                                          round(v_oldest.seconds::numeric, 1)) END;
    RETURN NEXT;

    SELECT count(*) INTO v_idle
    FROM pg_catalog.pg_stat_activity a
    WHERE a.datname = pg_catalog.current_database()
      AND a.state IN ('idle in transaction', 'idle in transaction (aborted)')
      AND a.state_change < pg_catalog.clock_timestamp()
                           - pg_catalog.make_interval(secs => p_transaction_seconds / 10);
    check_name := 'idle_in_transaction_sessions';
    value := v_idle;
    threshold := 0;
    alarm := v_idle > 0;
    detail := pg_catalog.format('idle in a transaction for over %s s', p_transaction_seconds / 10);
    RETURN NEXT;

    SELECT p.gid, extract(epoch FROM pg_catalog.clock_timestamp() - p.prepared)::float8 AS seconds
    INTO v_prepared
    FROM pg_catalog.pg_prepared_xacts p
    WHERE p.database = pg_catalog.current_database()
    ORDER BY p.prepared
    LIMIT 1;
    check_name := 'prepared_transaction_oldest_seconds';
    value := coalesce(v_prepared.seconds, 0);
    threshold := p_transaction_seconds;
    alarm := value > threshold;
    detail := CASE WHEN v_prepared.gid IS NULL THEN 'none'
                   ELSE pg_catalog.format('gid %L', v_prepared.gid) END;
    RETURN NEXT;

    check_name := 'notify_queue_usage_ratio';
    value := v_usage;
    threshold := p_notify_usage;
    alarm := v_usage > p_notify_usage;
    detail := 'share of the NOTIFY queue in use; at 1 every notifying commit fails';
    RETURN NEXT;

    SELECT s.n_dead_tup::float8, s.n_live_tup::float8 INTO v_dead, v_live
    FROM pg_catalog.pg_stat_user_tables s
    WHERE s.relid = 'codity.jobs'::regclass;
    check_name := 'jobs_dead_tuples';
    value := coalesce(v_dead, 0);
    threshold := greatest(10000, 2 * (50 + 0.2 * coalesce(v_live, 0)));
    alarm := value > threshold;
    detail := pg_catalog.format('%s live rows', coalesce(v_live, 0));
    RETURN NEXT;

    SELECT pg_catalog.pg_relation_size(c.oid)::float8, greatest(c.reltuples, 0)::float8
    INTO v_index_bytes, v_index_entries
    FROM pg_catalog.pg_class c
    WHERE c.oid = 'codity.jobs_claim_idx'::regclass;
    check_name := 'claim_index_bytes_per_entry';
    value := v_index_bytes / greatest(v_index_entries, 1);
    threshold := 400;
    alarm := v_index_bytes > 8388608 AND value > threshold;
    detail := pg_catalog.format('%s bytes for about %s entries', v_index_bytes, v_index_entries);
    RETURN NEXT;

    SELECT r.slot_name, r.active, r.xmin, r.catalog_xmin,
           coalesce(pg_catalog.pg_wal_lsn_diff(
               CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()
                    ELSE pg_catalog.pg_current_wal_lsn() END, r.restart_lsn), 0)::float8 AS bytes
    INTO v_slot
    FROM pg_catalog.pg_replication_slots r
    ORDER BY r.restart_lsn NULLS LAST
    LIMIT 1;
    check_name := 'replication_slot_retained_bytes';
    value := coalesce(v_slot.bytes, 0);
    threshold := p_slot_bytes;
    alarm := value > threshold;
    detail := CASE WHEN v_slot.slot_name IS NULL THEN 'no replication slot'
                   ELSE pg_catalog.format('slot %s, %s%s', v_slot.slot_name,
                                          CASE WHEN v_slot.active THEN 'active' ELSE 'inactive' END,
                                          CASE WHEN v_slot.xmin IS NOT NULL OR v_slot.catalog_xmin IS NOT NULL
                                               THEN ', holding the xmin horizon' ELSE '' END) END;
    RETURN NEXT;

    SELECT count(*) FILTER (WHERE r.sync_state IN ('sync', 'quorum')),
           count(*) FILTER (WHERE r.sync_state IS NULL)
    INTO v_sync, v_hidden
    FROM pg_catalog.pg_stat_replication r;
    SELECT r.slot_name INTO v_lone_slot
    FROM pg_catalog.pg_replication_slots r
    WHERE r.slot_type = 'physical' AND NOT r.active
    ORDER BY r.slot_name
    LIMIT 1;
    check_name := 'synchronous_standbys';
    value := v_sync;
    threshold := 1;
    alarm := v_hidden = 0 AND v_sync = 0 AND (v_wanted <> '' OR v_lone_slot IS NOT NULL);
    detail := CASE
        WHEN v_hidden > 0 THEN 'hidden: grant pg_read_all_stats to see the standbys'
        WHEN alarm AND v_wanted <> '' THEN pg_catalog.format(
            'synchronous_standby_names is %L and no synchronous standby is connected: commits wait', v_wanted)
        WHEN alarm THEN pg_catalog.format(
            'no standby streams from slot %s: the primary runs alone', v_lone_slot)
        WHEN v_wanted = '' AND v_sync = 0 THEN 'no synchronous standby asked for'
        ELSE pg_catalog.format('%s synchronous standby(s) streaming', v_sync) END;
    RETURN NEXT;

    BEGIN
        SELECT pg_catalog.substr(w.name, 1, 8) AS timeline,
               extract(epoch FROM pg_catalog.clock_timestamp() - w.modification)::float8 AS seconds
        INTO v_timeline
        FROM pg_catalog.pg_ls_waldir() AS w
        WHERE w.name ~ '^[0-9A-F]{8}\.history$'
        ORDER BY w.name DESC
        LIMIT 1;
        check_name := 'seconds_since_primary_changed';
        value := coalesce(v_timeline.seconds, -1);
        detail := CASE WHEN v_timeline.timeline IS NULL THEN 'timeline 1: never changed'
                       ELSE pg_catalog.format('timeline %s began %s s ago (a failover, a switchover or a restore)',
                                              ('x' || v_timeline.timeline)::bit(32)::integer,
                                              round(v_timeline.seconds::numeric)) END;
    EXCEPTION WHEN insufficient_privilege THEN
        check_name := 'seconds_since_primary_changed';
        value := -1;
        detail := 'hidden: grant pg_monitor to see when the primary changed';
    END;
    threshold := 3600;
    alarm := value >= 0 AND value < threshold;
    RETURN NEXT;

    SELECT count(*) INTO v_silent
    FROM codity.workers w
    WHERE w.status = 'active'
      AND w.last_heartbeat_at < pg_catalog.clock_timestamp()
                                - pg_catalog.make_interval(secs => 2 * w.heartbeat_seconds::float8);
    check_name := 'workers_silent';
    value := v_silent;
    threshold := 0;
    alarm := v_silent > 0;
    detail := 'active workers not heard from for twice their heartbeat: reconnecting, or about to be declared dead';
    RETURN NEXT;
END;
$$;

COMMENT ON FUNCTION codity.health(double precision, double precision, double precision) IS
'The conditions that quietly stop a PostgreSQL queue, one row per check: value, threshold, alarm, detail.

Checks: oldest_transaction_seconds and prepared_transaction_oldest_seconds (an open or
prepared transaction holds back vacuum: dead jobs pile up; p_transaction_seconds, 300),
idle_in_transaction_sessions (idle in a transaction for over a tenth of that),
notify_queue_usage_ratio (p_notify_usage, 0.5; when full, enqueues fail at commit),
jobs_dead_tuples (vacuum not keeping up), claim_index_bytes_per_entry (a bloated claim
index), replication_slot_retained_bytes (p_slot_bytes, 1 GiB), synchronous_standbys
(commits waiting for a standby that is gone, or a primary running alone beside an unused
slot), seconds_since_primary_changed (-1: never; an alarm for an hour after a failover),
workers_silent (reconnecting, or about to be declared dead). docs/RUNBOOK.md says what to
do about each. Raises CD010 (a threshold out of range).
Example: SELECT * FROM codity.health() WHERE alarm;';

REVOKE ALL ON FUNCTION codity.health(double precision, double precision, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.health(double precision, double precision, double precision) TO codity_app, codity_readonly;
