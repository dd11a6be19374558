-- codity.configure: the installation's settings, read and changed in one place.
--
-- Today one setting: worker_dead_after, how long a worker may go without a heartbeat before
-- codity.tick declares it dead and requeues its jobs (attempt refunded). It was a constant
-- in tick's default, unrelated to how often workers heartbeat. It must allow at least two
-- heartbeats of every active worker (each declared its interval at registration), so a
-- healthy worker that misses one is never swept: a change that would break that is refused
-- (CD010), naming the slowest worker. Called with no argument it only reads.
-- Locks the settings row. Callers: operators (psql), deployment scripts.

CREATE OR REPLACE FUNCTION codity.configure(p_worker_dead_after interval DEFAULT NULL)
RETURNS TABLE (worker_dead_after interval, updated_at timestamptz)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_slowest record;
BEGIN
    IF p_worker_dead_after IS NOT NULL THEN
        IF p_worker_dead_after NOT BETWEEN interval '2 seconds' AND interval '1 hour' THEN
            RAISE EXCEPTION 'worker_dead_after must be from 2 seconds to 1 hour, got %', p_worker_dead_after
                USING ERRCODE = 'CD010';
        END IF;
        PERFORM 1 FROM codity.settings st FOR UPDATE;
        SELECT w.id, w.name, w.heartbeat_seconds INTO v_slowest
        FROM codity.workers w
        WHERE w.status = 'active'
        ORDER BY w.heartbeat_seconds DESC, w.id
        LIMIT 1;
        IF v_slowest.id IS NOT NULL
           AND pg_catalog.make_interval(secs => 2 * v_slowest.heartbeat_seconds) > p_worker_dead_after THEN
            RAISE EXCEPTION 'worker_dead_after % would declare active worker % dead between two of its heartbeats',
                            p_worker_dead_after, v_slowest.id
                USING ERRCODE = 'CD010',
                      DETAIL = pg_catalog.format('Worker %s (%s) heartbeats every %s s.',
                                                 v_slowest.id, v_slowest.name, v_slowest.heartbeat_seconds),
                      HINT = 'Allow at least two heartbeats of every active worker.';
        END IF;
        UPDATE codity.settings st
        SET worker_dead_after = p_worker_dead_after, updated_at = pg_catalog.now();
    END IF;
    RETURN QUERY SELECT st.worker_dead_after, st.updated_at FROM codity.settings st;
END;
$$;

COMMENT ON FUNCTION codity.configure(interval) IS
'Read the installation''s settings, or change worker_dead_after (how long a silent worker lives).

worker_dead_after (default 15 s, from 2 s to 1 h) must allow two heartbeats of every
active worker; a change that would not is refused with CD010 naming the slowest worker.
With no argument, only reads.
Example: SELECT * FROM codity.configure(p_worker_dead_after => interval ''30 seconds'');';

REVOKE ALL ON FUNCTION codity.configure(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.configure(interval) TO codity_app;
