-- codity.find_project: the id of a project named by id or by slug.
--
-- A worker serving several projects (`codity worker --queue acme/emails`) registers once in
-- each, and register_worker takes the project's id; an operator knows the slug. A worker
-- holding just codity_worker reads no table, so the slug is resolved here. NULL is the
-- installation's default project. Read-only; locks nothing. Caller: the Python worker at
-- start-up, any client.

CREATE OR REPLACE FUNCTION codity.find_project(p_project text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    IF p_project IS NULL THEN
        RETURN codity._project_id(NULL);
    END IF;
    IF p_project ~ '^[0-9]{1,18}$' THEN
        SELECT pg_catalog.array_agg(p.id) INTO v_ids FROM codity.projects p
        WHERE p.id = p_project::bigint OR p.slug = p_project;
    ELSE
        SELECT pg_catalog.array_agg(p.id ORDER BY p.id) INTO v_ids FROM codity.projects p
        WHERE p.slug = p_project;
    END IF;
    IF v_ids IS NULL THEN
        RAISE EXCEPTION 'no project has the id or slug "%"', pg_catalog.left(p_project, 100)
            USING ERRCODE = 'CD002';
    ELSIF cardinality(v_ids) > 1 THEN
        RAISE EXCEPTION 'the slug "%" names % projects (ids %)', p_project, cardinality(v_ids),
                        pg_catalog.array_to_string(v_ids, ', ')
            USING ERRCODE = 'CD010', HINT = 'Name the project by its id.';
    END IF;
    RETURN v_ids[1];
END;
$$;

COMMENT ON FUNCTION codity.find_project(text) IS
'The id of the project named by p_project: its id, or its slug; NULL is the installation''s default project.

For clients that read no table (codity_worker) and must register with a project''s id.
Raises CD002 (no such project), CD010 (a slug that names projects of several orgs, or
that is also another project''s id: name it by id).
Example: SELECT codity.find_project(''acme'');';

REVOKE ALL ON FUNCTION codity.find_project(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.find_project(text) TO codity_app, codity_worker;
