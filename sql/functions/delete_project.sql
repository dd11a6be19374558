-- codity.delete_project: remove a project with its queues, jobs, executions, dead letters,
-- schedules, workers and API keys.
--
-- Why a function: execution rows carry no foreign key (migration 0019), so the project's
-- cascade (projects -> queues -> jobs, dead letters, minutes, schedules) does not reach
-- them, and codity_app, which deletes projects for the web API, may not delete another
-- project's rows under row-level security. The project goes first, then the executions of
-- the queues it had: an attempt's end that waited on one of its jobs has either written its
-- row before (deleted here) or finds its job gone (and writes none).
--
-- Refused for the installation's default project (the functions fall back to it). While a
-- transaction acts for an org (codity.org_id, set by the web API), a project of another org
-- is unknown. Locks the project row, then what its deletion cascades to.
-- Callers: the web API (DELETE /api/v1/projects/{id}), operators.

CREATE OR REPLACE FUNCTION codity.delete_project(p_project_id bigint)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
DECLARE
    v_project record;
    v_queue_ids bigint[];
BEGIN
    SELECT p.id, p.org_id, p.is_default INTO v_project
    FROM codity.projects p
    WHERE p.id = p_project_id
    FOR UPDATE;
    IF v_project.id IS NULL
       OR (codity.current_org_id() IS NOT NULL AND v_project.org_id <> codity.current_org_id()) THEN
        RAISE EXCEPTION 'project % does not exist', p_project_id USING ERRCODE = 'CD002';
    END IF;
    IF v_project.is_default THEN
        RAISE EXCEPTION 'project % is the installation''s default project; it cannot be deleted',
                        p_project_id
            USING ERRCODE = 'CD021',
                  HINT = 'Mark another project is_default first.';
    END IF;
    SELECT coalesce(pg_catalog.array_agg(q.id), '{}') INTO v_queue_ids
    FROM codity.queues q
    WHERE q.project_id = p_project_id;
    DELETE FROM codity.projects p WHERE p.id = p_project_id;
    DELETE FROM codity.job_executions x WHERE x.queue_id = ANY (v_queue_ids);
    RETURN p_project_id;
END;
$$;

COMMENT ON FUNCTION codity.delete_project(bigint) IS
'Delete a project with everything in it (queues, jobs, executions, dead letters, schedules, workers, API keys); returns its id.

Refused for the installation''s default project (CD021). While a transaction acts for an
org (codity.org_id), a project of another org is unknown. Raises CD002 (no such project).
Example: SELECT codity.delete_project(7);';

REVOKE ALL ON FUNCTION codity.delete_project(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.delete_project(bigint) TO codity_app;
