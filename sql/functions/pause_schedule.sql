-- codity.pause_schedule / codity.resume_schedule: stop and restart a cron schedule.
--
-- Resuming recomputes next_run_at from now, so a schedule paused for a week does not
-- fire for the occurrences it slept through. Locks the schedule row.

CREATE OR REPLACE FUNCTION codity.pause_schedule(
    p_name text,
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
DECLARE
    v_project_id bigint := codity._project_id(p_project_id);
BEGIN
    PERFORM codity._check_clock(p_now);
    UPDATE codity.scheduled_jobs s SET is_paused = true, updated_at = p_now
    WHERE s.project_id = v_project_id AND s.name = p_name AND NOT s.is_paused;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM codity.scheduled_jobs s WHERE s.project_id = v_project_id AND s.name = p_name) THEN
        RAISE EXCEPTION 'schedule "%" does not exist', p_name USING ERRCODE = 'CD006';
    END IF;
    RETURN false;
END;
$$;

COMMENT ON FUNCTION codity.pause_schedule(text, bigint, timestamptz) IS
'Pause a cron schedule; returns false if it was already paused. Raises CD006.

Example: SELECT codity.pause_schedule(''nightly-report'');';

CREATE OR REPLACE FUNCTION codity.resume_schedule(
    p_name text,
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
DECLARE
    v_project_id bigint := codity._project_id(p_project_id);
    v_schedule record;
BEGIN
    PERFORM codity._check_clock(p_now);
    -- The next run computed before the UPDATE, not inside it (DESIGN.md, "Room to scale
    -- out", rule 9: Citus refuses a function of the row's columns in an UPDATE).
    SELECT s.id, s.cron, s.time_zone INTO v_schedule
    FROM codity.scheduled_jobs s
    WHERE s.project_id = v_project_id AND s.name = p_name AND s.is_paused
    FOR UPDATE;
    IF FOUND THEN
        UPDATE codity.scheduled_jobs s
        SET is_paused = false,
            next_run_at = codity.cron_next(v_schedule.cron, p_now, v_schedule.time_zone),
            updated_at = p_now
        WHERE s.id = v_schedule.id;
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM codity.scheduled_jobs s WHERE s.project_id = v_project_id AND s.name = p_name) THEN
        RAISE EXCEPTION 'schedule "%" does not exist', p_name USING ERRCODE = 'CD006';
    END IF;
    RETURN false;
END;
$$;

COMMENT ON FUNCTION codity.resume_schedule(text, bigint, timestamptz) IS
'Resume a paused cron schedule from its next occurrence after now; returns false if it was not paused.

Example: SELECT codity.resume_schedule(''nightly-report'');';

REVOKE ALL ON FUNCTION codity.pause_schedule(text, bigint, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION codity.resume_schedule(text, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.pause_schedule(text, bigint, timestamptz) TO codity_app;
GRANT EXECUTE ON FUNCTION codity.resume_schedule(text, bigint, timestamptz) TO codity_app;
