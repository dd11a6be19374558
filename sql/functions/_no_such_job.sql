-- codity._no_such_job: the message of CD003, the same for every fenced call.
--
-- The bodies look a job up within the queue they were given (DESIGN.md, "Room to scale
-- out", rule 2), so a job id that names a job of another queue is as unknown to them as one
-- that names no job: the message says which queue was searched. The wrappers that take
-- only a job id pass NULL for a job they found in no queue, and the message is then the one
-- callers have always had.
--
-- SECURITY INVOKER without SET, no table read: called only from definer functions;
-- granted to nobody.

CREATE OR REPLACE FUNCTION codity._no_such_job(p_queue_id bigint, p_job_id bigint)
RETURNS text
LANGUAGE sql
IMMUTABLE
SECURITY INVOKER
AS $$
    SELECT CASE WHEN p_queue_id IS NULL THEN pg_catalog.format('job %s does not exist', p_job_id)
                ELSE pg_catalog.format('job %s does not exist in queue %s', p_job_id, p_queue_id) END;
$$;

COMMENT ON FUNCTION codity._no_such_job(bigint, bigint) IS
'Private: the CD003 message for a job not found (in the queue searched, when there is one).';

REVOKE ALL ON FUNCTION codity._no_such_job(bigint, bigint) FROM PUBLIC;
