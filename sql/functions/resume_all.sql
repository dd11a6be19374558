-- codity.resume_all: un-pause every queue and schedule (of one project, or of all).
--
-- The operator's "make everything run again" (codity resume). Schedules restart from
-- their next occurrence after now. Locks the paused rows.

CREATE OR REPLACE FUNCTION codity.resume_all(
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (queues_resumed integer, schedules_resumed integer)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue_id bigint;
    v_queues integer := 0;
    v_schedules integer := 0;
    v_schedule record;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_project_id IS NOT NULL THEN
        PERFORM codity._project_id(p_project_id);
    END IF;
    FOR v_queue_id IN
        UPDATE codity.queues q SET is_paused = false, paused_at = NULL, updated_at = p_now
        WHERE q.is_paused AND (p_project_id IS NULL OR q.project_id = p_project_id)
        RETURNING q.id
    LOOP
        PERFORM codity._notify(v_queue_id);
        v_queues := v_queues + 1;
    END LOOP;
    -- Each schedule's next run computed before its UPDATE, not inside it (DESIGN.md, "Room
    -- to scale out", rule 9: Citus refuses a function of the row's columns in an UPDATE).
    FOR v_schedule IN
        SELECT s.id, s.cron, s.time_zone FROM codity.scheduled_jobs s
        WHERE s.is_paused AND (p_project_id IS NULL OR s.project_id = p_project_id)
        ORDER BY s.id
        FOR UPDATE
    LOOP
        UPDATE codity.scheduled_jobs s
        SET is_paused = false,
            next_run_at = codity.cron_next(v_schedule.cron, p_now, v_schedule.time_zone),
            updated_at = p_now
        WHERE s.id = v_schedule.id;
        v_schedules := v_schedules + 1;
    END LOOP;
    RETURN QUERY SELECT v_queues, v_schedules;
END;
$$;

COMMENT ON FUNCTION codity.resume_all(bigint, timestamptz) IS
'Un-pause every queue and every schedule, in one project or (NULL) in all; returns the counts.

Example: SELECT * FROM codity.resume_all();';

REVOKE ALL ON FUNCTION codity.resume_all(bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.resume_all(bigint, timestamptz) TO codity_app;
