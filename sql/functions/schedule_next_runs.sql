-- codity.schedule_next_runs: the next occurrences of a schedule, for people to check a
-- cron expression against the calendar (DST changes included) before it surprises them.
--
-- Each run is codity.cron_next of the previous one, starting from p_now (not from the
-- stored next_run_at, which may be overdue until the scheduler's next tick), in the
-- schedule's time zone: exactly the instants codity.materialize_cron would pick if it ran
-- on time. Paused schedules answer too (what would run once resumed). Reads one schedule
-- row; locks nothing; writes nothing. At most 100 runs, so a call stays cheap.
-- Callers: the web API (GET /schedules/{name}/next-runs), operators in psql.

CREATE OR REPLACE FUNCTION codity.schedule_next_runs(
    p_name text,
    p_count integer DEFAULT 5,
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (run_at timestamptz, local_time timestamp)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
DECLARE
    v_project_id bigint := codity._project_id(p_project_id);
    v_schedule codity.scheduled_jobs;
    v_at timestamptz := p_now;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_count IS NULL OR p_count NOT BETWEEN 1 AND 100 THEN
        RAISE EXCEPTION 'count must be from 1 to 100, got %', p_count USING ERRCODE = 'CD010';
    END IF;
    SELECT s.* INTO v_schedule FROM codity.scheduled_jobs s
    WHERE s.project_id = v_project_id AND s.name = p_name;
    IF v_schedule.id IS NULL THEN
        RAISE EXCEPTION 'schedule "%" does not exist', p_name USING ERRCODE = 'CD006';
    END IF;
    FOR i IN 1 .. p_count LOOP
        v_at := codity.cron_next(v_schedule.cron, v_at, v_schedule.time_zone);
        run_at := v_at;
        local_time := v_at AT TIME ZONE v_schedule.time_zone;
        RETURN NEXT;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION codity.schedule_next_runs(text, integer, bigint, timestamptz) IS
'The next p_count (1..100) runs of a schedule after p_now, each with its wall-clock time in the schedule''s zone.

Chains codity.cron_next from p_now, so the answer honours daylight-saving changes exactly
as materialisation will. Raises CD006 for an unknown schedule, CD010 for a bad count.
Example: SELECT * FROM codity.schedule_next_runs(''nightly-report'', 3);';

REVOKE ALL ON FUNCTION codity.schedule_next_runs(text, integer, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.schedule_next_runs(text, integer, bigint, timestamptz) TO codity_app;
