-- codity._workflow: a workflow (or batch) of a project, by id, or CD008.
--
-- Read-only; locks nothing (the callers that change a batch lock its row themselves).
-- p_kind 'batch' asks for a batch: a workflow of the other kind is "no such batch", with a
-- hint saying what it is. SECURITY INVOKER without SET: called only from definer
-- functions; granted to nobody.

CREATE OR REPLACE FUNCTION codity._workflow(
    p_workflow_id bigint,
    p_project_id bigint,
    p_kind text DEFAULT NULL,
    OUT id bigint,
    OUT project_id bigint,
    OUT kind text,
    OUT sealed_at timestamptz,
    OUT nodes integer,
    OUT edges integer
)
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
AS $$
#variable_conflict use_column
BEGIN
    SELECT w.id, w.project_id, w.kind, w.sealed_at, w.nodes, w.edges
    INTO id, project_id, kind, sealed_at, nodes, edges
    FROM codity.workflows w
    WHERE w.id = p_workflow_id AND w.project_id = p_project_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION '% % does not exist', coalesce(p_kind, 'workflow'), p_workflow_id USING ERRCODE = 'CD008';
    END IF;
    IF p_kind IS NOT NULL AND kind <> p_kind THEN
        RAISE EXCEPTION '% % does not exist', p_kind, p_workflow_id
            USING ERRCODE = 'CD008', HINT = pg_catalog.format('%s is a %s.', p_workflow_id, kind);
    END IF;
END;
$$;

COMMENT ON FUNCTION codity._workflow(bigint, bigint, text) IS
'Private: the workflow (or, with p_kind, the batch) of the project with this id; CD008 when there is none.';

REVOKE ALL ON FUNCTION codity._workflow(bigint, bigint, text) FROM PUBLIC;
