-- codity.dep_results: the parents of a workflow node, with their outcomes and results.
--
-- A node's handler reads what the nodes it runs after returned, in one call, on demand: the
-- claim copies nothing into it. Only the job's holder may read them (the fence of its
-- current execution), so a worker holding just codity_worker reads no other job's results.
-- Read-only. Caller: a worker, for the job it runs (ctx.parent_results in Python).

CREATE OR REPLACE FUNCTION codity.dep_results(
    p_queue_id bigint,
    p_job_id bigint,
    p_fence integer
)
RETURNS TABLE (
    node_key text,
    job_id bigint,
    queue_id bigint,
    job_status codity.job_status,
    outcome text,
    result jsonb
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM 1 FROM codity.jobs j
    WHERE j.queue_id = p_queue_id AND j.id = p_job_id AND j.execution_seq = p_fence
      AND j.status IN ('claimed', 'running');
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % of queue % is not held under fence %', p_job_id, p_queue_id, p_fence
            USING ERRCODE = 'CD003',
                  HINT = 'Only the worker running a job reads its parents'' results, with its fence.';
    END IF;
    RETURN QUERY
    SELECT p.node_key, p.id, p.queue_id, p.status, d.resolved, e.result
    FROM codity.job_deps d
    JOIN codity.jobs p ON p.queue_id = d.queue_id AND p.id = d.parent_id
    -- The latest completed run: a node retried with its workflow has run more than once.
    LEFT JOIN LATERAL (
        SELECT x.result FROM codity.job_executions x
        WHERE x.queue_id = p.queue_id AND x.job_id = p.id AND x.status = 'completed'
        ORDER BY x.execution_seq DESC
        LIMIT 1
    ) AS e ON true
    WHERE d.child_queue_id = p_queue_id AND d.child_id = p_job_id
    ORDER BY p.node_key;
END;
$$;

COMMENT ON FUNCTION codity.dep_results(bigint, bigint, integer) IS
'The nodes a workflow job runs after: key, job, queue, status, outcome (completed, skipped, dead_letter, cancelled; NULL while unsettled) and the result its completion recorded.

For the job''s holder: the job must be claimed or running under p_fence. Raises CD003
otherwise. A plain job has no parents: no row.
Example: SELECT node_key, result FROM codity.dep_results(3, 42, 1);';

REVOKE ALL ON FUNCTION codity.dep_results(bigint, bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.dep_results(bigint, bigint, integer) TO codity_app, codity_worker;
