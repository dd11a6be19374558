-- codity._project_id: which project a call is about.
--
-- Every public function takes an optional project id; NULL means the installation's
-- default project, so a single-team user never names one. Read-only; locks nothing.
-- Called by every function that addresses a queue, schedule or job.
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._project_id(p_project_id bigint)
RETURNS bigint
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
AS $$
DECLARE
    v_id bigint;
BEGIN
    IF p_project_id IS NULL THEN
        SELECT p.id INTO v_id FROM codity.projects p WHERE p.is_default;
        IF v_id IS NULL THEN
            RAISE EXCEPTION 'no default project exists'
                USING ERRCODE = 'CD002',
                      HINT = 'Pass a project id, or mark one project is_default.';
        END IF;
        RETURN v_id;
    END IF;
    SELECT p.id INTO v_id FROM codity.projects p WHERE p.id = p_project_id;
    IF v_id IS NULL THEN
        RAISE EXCEPTION 'project % does not exist', p_project_id
            USING ERRCODE = 'CD002';
    END IF;
    RETURN v_id;
END;
$$;

COMMENT ON FUNCTION codity._project_id(bigint) IS
'Private: resolve an optional project id to a project (NULL = the default project); raises CD002.';

REVOKE ALL ON FUNCTION codity._project_id(bigint) FROM PUBLIC;
