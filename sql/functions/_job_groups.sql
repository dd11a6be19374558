-- codity._job_groups: the positions of a batch of job ids, grouped by the jobs' queues.
--
-- The fenced batch calls that take only job ids (start_many, complete_many, as callers have
-- always used them) are wrappers: they call the body that takes the queue's id once per
-- queue of the batch (DESIGN.md, "Room to scale out", rule 1) and put the answers back in
-- input order through these positions (1-based). An id that names no job gets a group with
-- a NULL queue, in which the body finds nothing and raises CD003 for it.
-- Reads codity.jobs by id; locks nothing (the bodies lock what they change).
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._job_groups(p_job_ids bigint[])
RETURNS TABLE (queue_id bigint, positions bigint[])
LANGUAGE sql
STABLE
SECURITY INVOKER
AS $$
    SELECT j.queue_id, pg_catalog.array_agg(b.ord ORDER BY b.ord)
    FROM unnest(p_job_ids) WITH ORDINALITY AS b(job_id, ord)
    LEFT JOIN codity.jobs j ON j.id = b.job_id
    GROUP BY j.queue_id
    ORDER BY pg_catalog.min(b.ord);
$$;

COMMENT ON FUNCTION codity._job_groups(bigint[]) IS
'Private: the 1-based positions of a batch of job ids, grouped by queue (NULL for ids of no job), first group first.';

REVOKE ALL ON FUNCTION codity._job_groups(bigint[]) FROM PUBLIC;
