-- codity._close_attempt: write the execution row of a held job's attempt as it ends.
--
-- Since migration 0013 an attempt's row is written once, by whatever ends it; the job row
-- (locked by the caller, still as it was while held) holds everything the row records:
-- worker, claim and start times, attempt and fence. The single-job endings call this —
-- fail, release, cancel, and reap at the crash cap; the batch endings (complete_many,
-- cancel_jobs, reap below the cap) write the same columns for many jobs in one statement.
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._close_attempt(
    p_job codity.jobs,
    p_status codity.execution_status,
    p_now timestamptz,
    p_error text DEFAULT NULL,
    p_refunded boolean DEFAULT false
)
RETURNS void
LANGUAGE sql
VOLATILE
SECURITY INVOKER
AS $$
    INSERT INTO codity.job_executions
        (job_id, queue_id, project_id, execution_seq, attempt, worker_id, status, claimed_at,
         started_at, finished_at, attempt_refunded, error)
    VALUES ((p_job).id, (p_job).queue_id, (p_job).project_id, (p_job).execution_seq,
            (p_job).attempt, (p_job).worker_id, p_status, (p_job).claimed_at, (p_job).started_at,
            p_now, p_refunded, p_error);
$$;

COMMENT ON FUNCTION codity._close_attempt(codity.jobs, codity.execution_status, timestamptz, text, boolean) IS
'Private: insert the execution row of the held job p_job, ending as p_status at p_now.';

REVOKE ALL ON FUNCTION codity._close_attempt(codity.jobs, codity.execution_status, timestamptz, text, boolean) FROM PUBLIC;
