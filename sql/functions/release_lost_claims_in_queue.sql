-- codity.release_lost_claims_in_queue: give back what a claim whose answer was lost took.
--
-- A claim commits, then its connection drops before the answer arrives (a failover, a
-- partition, a call given up at its deadline): the jobs are running under this worker in
-- the database, and the worker never heard of them. Before this call they waited out their
-- whole lease, were reaped, and were charged a crash (issue 25, issue 29 item 7). The
-- worker knows exactly which jobs of the queue it holds (running, waiting for a slot, or
-- finished with the report not yet acknowledged); it calls this, before its next claim on
-- the queue, with that list, and every other job the queue says it holds goes back to the
-- queue at once, attempt not charged, as codity.release does.
--
-- Safe because the list is complete: a worker claims one queue at a time, and only after
-- this call has answered, so no claim of its own can be in flight that the list misses; an
-- answer on the dropped connection can no longer arrive. A claim still running on a server
-- that has not yet noticed the dropped connection commits after this call and its jobs are
-- reaped at the end of their lease, as before.
-- One queue per call (DESIGN.md, "Room to scale out", rules 1 and 2); raises no NOTIFY
-- (rule 10: the caller wakes the queue). Locks the job rows released, one at a time.
-- Caller: the Python worker, after a claim failed on a lost connection.

CREATE OR REPLACE FUNCTION codity.release_lost_claims_in_queue(
    p_queue_id bigint,
    p_worker_id bigint,
    p_known_job_ids bigint[],
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (job_id bigint)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_job record;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_known_job_ids IS NULL THEN
        RAISE EXCEPTION 'p_known_job_ids must be an array (empty when the worker holds none)'
            USING ERRCODE = 'CD010';
    END IF;
    FOR v_job IN
        SELECT j.id, j.execution_seq FROM codity.jobs j
        WHERE j.queue_id = p_queue_id AND j.worker_id = p_worker_id
          AND j.status IN ('claimed', 'running') AND j.id <> ALL (p_known_job_ids)
        ORDER BY j.id
    LOOP
        IF (SELECT r.accepted FROM codity.release_in_queue(p_queue_id, v_job.id, v_job.execution_seq, p_now) AS r) THEN
            RETURN QUERY SELECT v_job.id;
        END IF;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION codity.release_lost_claims_in_queue(bigint, bigint, bigint[], timestamptz) IS
'Release the jobs of one queue that a worker holds but does not know of (a claim whose answer was lost); returns their ids.

p_known_job_ids lists every job of the queue the worker holds: running, waiting to begin,
or finished and not yet reported. Every other job of the queue held by p_worker_id goes
back to the queue, attempt not charged (as codity.release_in_queue). Call it before the
next claim on the queue after a claim failed on a lost connection, never while a claim is
in flight. Raises no NOTIFY (the caller wakes the queue''s workers). Raises CD010 (NULL list).
Example: SELECT * FROM codity.release_lost_claims_in_queue(3, 7, ARRAY[41, 42]::bigint[]);';

REVOKE ALL ON FUNCTION codity.release_lost_claims_in_queue(bigint, bigint, bigint[], timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.release_lost_claims_in_queue(bigint, bigint, bigint[], timestamptz) TO codity_app, codity_worker;
