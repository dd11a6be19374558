-- codity.deregister_worker: a worker leaves cleanly.
--
-- Whatever it still holds goes back to the queue without charging the attempt (the same
-- as codity.release), so a drain that ran out of time loses nothing. Locks the worker's
-- held jobs, one queue at a time. Caller: the Python worker on shutdown.

CREATE OR REPLACE FUNCTION codity.deregister_worker(
    p_worker_id bigint,
    p_now timestamptz DEFAULT now()
)
RETURNS integer
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
DECLARE
    v_job record;
    v_released integer := 0;
BEGIN
    PERFORM codity._check_clock(p_now);
    PERFORM 1 FROM codity.workers w WHERE w.id = p_worker_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'worker % does not exist', p_worker_id USING ERRCODE = 'CD004';
    END IF;

    FOR v_job IN
        SELECT j.queue_id, j.id, j.execution_seq FROM codity.jobs j
        WHERE j.worker_id = p_worker_id AND j.status IN ('claimed', 'running')
        ORDER BY j.id
    LOOP
        IF (SELECT r.accepted FROM codity.release_in_queue(v_job.queue_id, v_job.id, v_job.execution_seq, p_now) AS r) THEN
            v_released := v_released + 1;
            -- The wakeup from this side, not from the body (DESIGN.md, "Room to scale out",
            -- rule 10); repeats for one queue fold into one notification at commit.
            PERFORM codity._notify(v_job.queue_id);
        END IF;
    END LOOP;

    UPDATE codity.workers w
    SET status = 'stopped', stopped_at = p_now
    WHERE w.id = p_worker_id AND w.status <> 'stopped';
    RETURN v_released;
END;
$$;

COMMENT ON FUNCTION codity.deregister_worker(bigint, timestamptz) IS
'Mark a worker stopped and release the jobs it still holds (attempt not charged); returns how many.

Example: SELECT codity.deregister_worker(1);';

REVOKE ALL ON FUNCTION codity.deregister_worker(bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.deregister_worker(bigint, timestamptz) TO codity_app, codity_worker;
