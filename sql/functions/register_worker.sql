-- codity.register_worker: a worker announces itself and gets the id it claims with.
--
-- The queues it names must exist (CD001), so a typo fails at start-up, not silently; it
-- may claim from those only (codity.claim), or from any queue of its project when it names
-- none. The worker belongs to the project (the API lists workers per project).
-- Inserts one row; locks nothing else. Caller: the Python worker at start-up, any client.

CREATE OR REPLACE FUNCTION codity.register_worker(
    p_name text,
    p_queues text[] DEFAULT '{}',
    p_capacity integer DEFAULT 5,
    p_host text DEFAULT '',
    p_pid integer DEFAULT NULL,
    p_project_id bigint DEFAULT NULL,
    p_heartbeat_seconds numeric DEFAULT 5,
    p_now timestamptz DEFAULT now()
)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
DECLARE
    v_project_id bigint := codity._project_id(p_project_id);
    v_queue text;
    v_id bigint;
    v_dead_after interval;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_name IS NULL OR length(p_name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'worker name must be 1 to 200 characters' USING ERRCODE = 'CD010';
    END IF;
    IF p_capacity IS NULL OR p_capacity NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'capacity must be from 1 to 10000, got %', p_capacity USING ERRCODE = 'CD010';
    END IF;
    SELECT st.worker_dead_after INTO v_dead_after FROM codity.settings st;
    IF p_heartbeat_seconds IS NULL OR p_heartbeat_seconds <= 0
       OR pg_catalog.make_interval(secs => 2 * p_heartbeat_seconds) > v_dead_after THEN
        RAISE EXCEPTION 'a worker that heartbeats every % s is declared dead after % without one',
                        p_heartbeat_seconds, v_dead_after
            USING ERRCODE = 'CD010',
                  DETAIL = 'The dead-worker threshold must allow at least two heartbeats.',
                  HINT = pg_catalog.format(
                      'Heartbeat at most every %s s, or raise the threshold with codity.configure.',
                      pg_catalog.trim_scale(extract(epoch FROM v_dead_after) / 2));
    END IF;
    FOREACH v_queue IN ARRAY coalesce(p_queues, '{}') LOOP
        PERFORM codity._queue(v_queue, v_project_id);
    END LOOP;

    INSERT INTO codity.workers
        (project_id, name, host, pid, queues, capacity, heartbeat_seconds, status, started_at, last_heartbeat_at)
    VALUES
        (v_project_id, p_name, coalesce(p_host, ''), p_pid, coalesce(p_queues, '{}'), p_capacity,
         p_heartbeat_seconds, 'active', p_now, p_now)
    RETURNING id INTO v_id;
    RETURN v_id;
END;
$$;

COMMENT ON FUNCTION codity.register_worker(text, text[], integer, text, integer, bigint, numeric, timestamptz) IS
'Register a worker (name, queues, capacity, host, pid) and return the id it claims with.

Every queue named must exist in the project (CD001). The worker may claim from those
queues only (every queue of its project when it names none); codity.worker_queues gives
their ids, which codity_v1 notifications carry. capacity is what the worker declares it
runs at once: shown to operators, kept by the worker, not enforced by claim. The worker
is active from now and must heartbeat at least every p_heartbeat_seconds, which must fit
twice into the installation''s dead-worker threshold (codity.configure; CD010 otherwise);
codity.sweep_workers declares it dead when it stops.
Example: SELECT codity.register_worker(''worker-1'', ARRAY[''emails''], 5, ''host-a'', 4242);';

REVOKE ALL ON FUNCTION codity.register_worker(text, text[], integer, text, integer, bigint, numeric, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.register_worker(text, text[], integer, text, integer, bigint, numeric, timestamptz) TO codity_app, codity_worker;
