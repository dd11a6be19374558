-- codity.delete_schedule: remove a cron schedule.
--
-- Only the definition goes: jobs it already created stay, with jobs.schedule_id set to
-- NULL here (no foreign key does it since migration 0031), so history outlives the
-- schedule. A scheduler materialising this schedule at the same moment holds its row FOR
-- UPDATE; the DELETE waits for that tick to commit, then removes the row, and the UPDATE
-- that follows sees the job that tick made. Locks the schedule row and its jobs' rows (on a
-- Citus cluster, a write to every shard of the jobs: a schedule is deleted rarely).
-- Callers: operators, the web API.

CREATE OR REPLACE FUNCTION codity.delete_schedule(
    p_name text,
    p_project_id bigint DEFAULT NULL
)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
DECLARE
    v_project_id bigint := codity._project_id(p_project_id);
    v_id bigint;
BEGIN
    DELETE FROM codity.scheduled_jobs s
    WHERE s.project_id = v_project_id AND s.name = p_name
    RETURNING s.id INTO v_id;
    IF v_id IS NULL THEN
        RAISE EXCEPTION 'schedule "%" does not exist', p_name USING ERRCODE = 'CD006';
    END IF;
    UPDATE codity.jobs j SET schedule_id = NULL WHERE j.schedule_id = v_id;
    RETURN v_id;
END;
$$;

COMMENT ON FUNCTION codity.delete_schedule(text, bigint) IS
'Delete a cron schedule; returns its id. Jobs it created stay, no longer linked to it.

Raises CD006 when the project has no schedule of that name.
Example: SELECT codity.delete_schedule(''nightly-report'');';

REVOKE ALL ON FUNCTION codity.delete_schedule(text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.delete_schedule(text, bigint) TO codity_app;
