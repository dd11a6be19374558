-- codity.get_job and codity.get_job_executions: a job's outcome, for a client that reads
-- no table.
--
-- A producer in any language enqueues through codity.enqueue and may want to know what
-- became of the job: its state, attempts, last error and result. A worker holding only
-- codity_worker reads no table, so these definer functions are its read path; codity_app
-- and codity_readonly may call them too (they also have the views). A job is addressed
-- within a project (NULL: the default project); a job of another project reads as missing
-- (CD003), as in the API. Read-only; locks nothing.

CREATE OR REPLACE FUNCTION codity.get_job(p_job_id bigint, p_project_id bigint DEFAULT NULL)
RETURNS TABLE (
    job_id bigint,
    queue text,
    task text,
    job_status codity.job_status,
    attempt integer,
    max_attempts integer,
    fence integer,
    run_at timestamptz,
    created_at timestamptz,
    started_at timestamptz,
    finished_at timestamptz,
    last_error text,
    result jsonb
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_project_id bigint := codity._project_id(p_project_id);
BEGIN
    RETURN QUERY
    SELECT j.id, q.name, j.task, j.status, j.attempt, j.max_attempts, j.execution_seq, j.run_at,
           j.created_at, j.started_at, j.finished_at, j.last_error,
           (SELECT x.result FROM codity.job_executions x
            WHERE x.queue_id = j.queue_id AND x.job_id = j.id AND x.execution_seq = j.execution_seq)
    FROM codity.jobs j
    JOIN codity.queues q ON q.id = j.queue_id
    WHERE j.id = p_job_id AND q.project_id = v_project_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % does not exist', p_job_id USING ERRCODE = 'CD003';
    END IF;
END;
$$;

COMMENT ON FUNCTION codity.get_job(bigint, bigint) IS
'A job''s state, attempts, current fence, times, last error and the result of its latest execution.

For clients that read no table (codity_worker). Raises CD003 when the project has no such
job. Every attempt: codity.get_job_executions.
Example: SELECT job_status, attempt, last_error, result FROM codity.get_job(42);';

REVOKE ALL ON FUNCTION codity.get_job(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.get_job(bigint, bigint) TO codity_app, codity_worker, codity_readonly;


CREATE OR REPLACE FUNCTION codity.get_job_executions(p_job_id bigint, p_project_id bigint DEFAULT NULL)
RETURNS TABLE (
    fence integer,
    attempt integer,
    execution_status codity.execution_status,
    worker_id bigint,
    claimed_at timestamptz,
    started_at timestamptz,
    finished_at timestamptz,
    attempt_refunded boolean,
    error text,
    result jsonb
)
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_project_id bigint := codity._project_id(p_project_id);
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id
        WHERE j.id = p_job_id AND q.project_id = v_project_id
    ) THEN
        RAISE EXCEPTION 'job % does not exist', p_job_id USING ERRCODE = 'CD003';
    END IF;
    -- The view: closed attempts from job_executions, the one still held from the job row.
    RETURN QUERY
    SELECT x.fence, x.attempt, x.status, x.worker_id, x.claimed_at, x.started_at,
           x.finished_at, x.attempt_refunded, x.error, x.result
    FROM codity.execution_overview x
    WHERE x.job_id = p_job_id
    ORDER BY x.fence;
END;
$$;

COMMENT ON FUNCTION codity.get_job_executions(bigint, bigint) IS
'Every attempt of a job, oldest first: fence, attempt, outcome, worker, times, refund, error and result.

Raises CD003 when the project has no such job.
Example: SELECT fence, attempt, execution_status, error FROM codity.get_job_executions(42);';

REVOKE ALL ON FUNCTION codity.get_job_executions(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.get_job_executions(bigint, bigint) TO codity_app, codity_worker, codity_readonly;
