-- codity._workflow_unfinished: whether a workflow still has a node that has not finished.
--
-- Retention (codity.prune) keeps every job of a workflow until all of its nodes have
-- finished: a parent's result stays readable (codity.dep_results) while a child may still
-- run. Read-only; one probe of jobs_workflow_idx. SECURITY INVOKER without SET: called
-- only from definer functions; granted to nobody.

CREATE OR REPLACE FUNCTION codity._workflow_unfinished(p_workflow_id bigint)
RETURNS boolean
LANGUAGE sql
STABLE
SECURITY INVOKER
AS $$
    SELECT EXISTS (
        SELECT 1 FROM codity.jobs w
        WHERE w.workflow_id = p_workflow_id
          AND w.status <> ALL ('{completed,dead_letter,cancelled}'::codity.job_status[])
    );
$$;

COMMENT ON FUNCTION codity._workflow_unfinished(bigint) IS
'Private: true while a node of the workflow is not completed, dead-lettered or cancelled (codity.prune keeps the workflow''s jobs until then).';

REVOKE ALL ON FUNCTION codity._workflow_unfinished(bigint) FROM PUBLIC;
