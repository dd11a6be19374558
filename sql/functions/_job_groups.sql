-- codity._job_groups: the positions of a batch of job ids, grouped by the jobs' queues.
--
-- The fenced batch calls that take only job ids (start_many, complete_many, as callers have
-- always used them) are wrappers: they call the body that takes the queue's id once per
-- queue of the batch (DESIGN.md, "Room to scale out", rule 1) and put the answers back in
-- input order through these positions (1-based). An id that names no job gets a group with
-- a NULL queue, in which the body finds nothing and raises CD003 for it.
-- Reads codity.jobs by id; locks nothing (the bodies lock what they change).
--
-- Why PL/pgSQL and two statements: on a Citus cluster the job ids are looked up across the
-- shards first (one statement on codity.jobs alone, which Citus runs on every shard), and
-- grouped afterwards from arrays; Citus refuses both a LANGUAGE sql function that reads a
-- distributed table with its arguments as parameters and a LEFT JOIN from a list of values
-- into one (docs/DESIGN_DECISIONS.md 61).
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._job_groups(p_job_ids bigint[])
RETURNS TABLE (queue_id bigint, positions bigint[])
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
AS $$
DECLARE
    v_ids bigint[];
    v_queues bigint[];
BEGIN
    SELECT pg_catalog.array_agg(j.id), pg_catalog.array_agg(j.queue_id)
    INTO v_ids, v_queues
    FROM codity.jobs j
    WHERE j.id = ANY (p_job_ids);
    RETURN QUERY
    SELECT f.queue_id, pg_catalog.array_agg(b.ord ORDER BY b.ord)
    FROM unnest(p_job_ids) WITH ORDINALITY AS b(job_id, ord)
    LEFT JOIN unnest(v_ids, v_queues) AS f(job_id, queue_id) ON f.job_id = b.job_id
    GROUP BY f.queue_id
    ORDER BY pg_catalog.min(b.ord);
END;
$$;

COMMENT ON FUNCTION codity._job_groups(bigint[]) IS
'Private: the 1-based positions of a batch of job ids, grouped by queue (NULL for ids of no job), first group first.';

REVOKE ALL ON FUNCTION codity._job_groups(bigint[]) FROM PUBLIC;
