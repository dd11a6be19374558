-- codity.create_schedule: define a cron schedule, or update it; idempotent on name.
--
-- The expression and time zone are validated (CD012, CD013) and the first run computed
-- with codity.cron_next before anything is written. Re-running with the same arguments
-- leaves one schedule; changing the expression recomputes next_run_at from now.
-- Callers: operators, the web API, codity demo.

CREATE OR REPLACE FUNCTION codity.create_schedule(
    p_name text,
    p_queue text,
    p_cron text,
    p_task text,
    p_payload jsonb DEFAULT '{}',
    p_time_zone text DEFAULT 'UTC',
    p_priority integer DEFAULT 0,
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (schedule_id bigint, next_run_at timestamptz, created boolean)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue record := codity._queue(p_queue, p_project_id);
    v_next timestamptz;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_name IS NULL OR length(p_name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'schedule name must be 1 to 200 characters' USING ERRCODE = 'CD010';
    END IF;
    IF p_task IS NULL OR length(p_task) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'task must be 1 to 200 characters' USING ERRCODE = 'CD010';
    END IF;
    IF p_priority IS NULL OR p_priority NOT BETWEEN -1000 AND 1000 THEN
        RAISE EXCEPTION 'priority must be from -1000 to 1000, got %', p_priority USING ERRCODE = 'CD010';
    END IF;
    IF octet_length(coalesce(p_payload, '{}'::jsonb)::text) > 65536 THEN
        RAISE EXCEPTION 'payload is % bytes; the limit is 65536', octet_length(p_payload::text)
            USING ERRCODE = 'CD011';
    END IF;
    PERFORM codity.cron_validate(p_cron, coalesce(p_time_zone, 'UTC'));
    v_next := codity.cron_next(p_cron, p_now, coalesce(p_time_zone, 'UTC'));

    RETURN QUERY
    INSERT INTO codity.scheduled_jobs AS s
        (project_id, queue_id, name, cron, time_zone, task, payload, priority, next_run_at, created_at, updated_at)
    VALUES
        (v_queue.project_id, v_queue.id, p_name, p_cron, coalesce(p_time_zone, 'UTC'), p_task,
         coalesce(p_payload, '{}'::jsonb), p_priority, v_next, p_now, p_now)
    ON CONFLICT (project_id, name) DO UPDATE
    SET queue_id = EXCLUDED.queue_id, cron = EXCLUDED.cron, time_zone = EXCLUDED.time_zone,
        task = EXCLUDED.task, payload = EXCLUDED.payload, priority = EXCLUDED.priority,
        next_run_at = CASE WHEN s.cron = EXCLUDED.cron AND s.time_zone = EXCLUDED.time_zone
                           THEN s.next_run_at ELSE EXCLUDED.next_run_at END,
        updated_at = p_now
    RETURNING s.id, s.next_run_at, (s.xmax = 0);
END;
$$;

COMMENT ON FUNCTION codity.create_schedule(text, text, text, text, jsonb, text, integer, bigint, timestamptz) IS
'Create or update a cron schedule that enqueues a task into a queue; returns its next run.

Five-field cron (minute hour day-of-month month day-of-week, with lists, ranges, steps
and names) evaluated in p_time_zone. Raises CD001 (unknown queue), CD010, CD011, CD012
(bad cron expression), CD013 (unknown time zone).
Example: SELECT * FROM codity.create_schedule(''nightly-report'', ''reports'', ''0 2 * * *'', ''reports.nightly'', ''{}'', ''Europe/London'');';

REVOKE ALL ON FUNCTION codity.create_schedule(text, text, text, text, jsonb, text, integer, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.create_schedule(text, text, text, text, jsonb, text, integer, bigint, timestamptz) TO codity_app;
