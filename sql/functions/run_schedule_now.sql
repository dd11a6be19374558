-- codity.run_schedule_now: enqueue one job from a schedule at once, off the cron timetable.
--
-- The job is what codity.materialize_cron would create (the schedule's queue, task,
-- payload and priority, the queue's max_attempts, schedule_id set), due at p_now, and the
-- same NOTIFY wakes the queue's workers. It carries no idempotency key: every call is a
-- deliberate extra run, and keys of the form codity:cron:<id>:<epoch> stay reserved for
-- the timetable, so a manual run can never swallow (or be swallowed by) a cron occurrence.
-- The schedule row is not changed: next_run_at, last_run_at and last_job_id describe the
-- timetable only. A paused schedule can still be run by hand (pausing stops the timetable).
--
-- Locks: the schedule row FOR SHARE (a concurrent delete or update waits until this job is
-- in; the job's foreign key would take a similar lock anyway) and the inserted job.
-- One queue per statement (DESIGN.md, Citus). Callers: operators, the web API ("run now").

CREATE OR REPLACE FUNCTION codity.run_schedule_now(
    p_name text,
    p_project_id bigint DEFAULT NULL,
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
    v_schedule codity.scheduled_jobs;
    v_queue codity.queues;
    v_job_id bigint;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_now IS NULL OR NOT isfinite(p_now) THEN
        RAISE EXCEPTION 'now must be a finite time' USING ERRCODE = 'CD010';
    END IF;
    SELECT s.* INTO v_schedule FROM codity.scheduled_jobs s
    WHERE s.project_id = v_project_id AND s.name = p_name
    FOR SHARE;
    IF v_schedule.id IS NULL THEN
        RAISE EXCEPTION 'schedule "%" does not exist', p_name USING ERRCODE = 'CD006';
    END IF;
    SELECT q.* INTO STRICT v_queue FROM codity.queues q WHERE q.id = v_schedule.queue_id;

    INSERT INTO codity.jobs AS j
        (queue_id, project_id, task, payload, priority, status, run_at, max_attempts,
         schedule_id, created_at, updated_at)
    VALUES
        (v_queue.id, v_queue.project_id, v_schedule.task, v_schedule.payload, v_schedule.priority, 'queued',
         p_now, v_queue.max_attempts, v_schedule.id, p_now, p_now)
    RETURNING j.id INTO v_job_id;

    IF NOT v_queue.is_paused THEN
        PERFORM codity._notify(v_queue.id);
    END IF;
    RETURN v_job_id;
END;
$$;

COMMENT ON FUNCTION codity.run_schedule_now(text, bigint, timestamptz) IS
'Enqueue one job from a schedule now, leaving its timetable (next_run_at) unchanged; returns the job id.

The job gets the schedule''s queue, task, payload and priority and is linked to it by
schedule_id. Works on a paused schedule too. Raises CD006 for an unknown schedule.
Example: SELECT codity.run_schedule_now(''nightly-report'');';

REVOKE ALL ON FUNCTION codity.run_schedule_now(text, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.run_schedule_now(text, bigint, timestamptz) TO codity_app;
