-- codity.reap: requeue jobs whose lease expired, refunding the attempt.
--
-- A worker that was SIGKILLed, lost its network or froze stops heartbeating; its leases
-- run out. That is infrastructure failure, not job failure: the job goes back to queued
-- and the attempt is given back (the execution row says attempt_refunded = true).
-- Without the refund three rolling deploys against max_attempts = 3 would dead-letter
-- jobs that never failed. A job whose executions keep expiring (a handler that kills its
-- worker every time) is dead-lettered when crash_count reaches the queue's max_crashes.
--
-- Locks: per queue, the expired rows FOR UPDATE SKIP LOCKED (a row a worker is
-- completing right now is skipped, not waited for). The UPDATE repeats the whole
-- condition (status held, lease expired), so a job completed or heartbeated between the
-- SELECT and the UPDATE is left alone.
-- One queue per call (DESIGN.md, "Room to scale out", rules 1, 2 and 6): the body,
-- reap_in_queue(queue_id, ...), works on one queue and every statement filters on it; reap(),
-- which tick calls, first lists the queues that have an expired lease (a read of its own),
-- then calls the body for each.
-- NOTIFY: reap() wakes each queue with requeued jobs, from the caller's side; the body does
-- not, as Citus may run it on another node (rule 10).
-- Callers: codity.tick (scheduler loop or pg_cron).

CREATE OR REPLACE FUNCTION codity.reap_in_queue(
    p_queue_id bigint,
    p_now timestamptz DEFAULT now(),
    p_limit integer DEFAULT 1000
)
RETURNS TABLE (job_id bigint, queue_id bigint, fence integer, outcome text)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue record := codity._queue(p_queue_id, NULL);
    v_ids bigint[];
    v_project_ids bigint[];
    v_fences integer[];
    v_attempts integer[];
    v_worker_ids bigint[];
    v_claimed_at timestamptz[];
    v_started_at timestamptz[];
    v_dead codity.jobs;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'limit must be positive, got %', p_limit USING ERRCODE = 'CD010';
    END IF;
    PERFORM codity._check_transition('running', 'queued');
    PERFORM codity._check_transition('claimed', 'queued');

    -- Below the crash cap: back to queued, attempt refunded.
    WITH expired AS MATERIALIZED (
        SELECT j.id, j.attempt, j.worker_id, j.claimed_at, j.started_at FROM codity.jobs j
        WHERE j.queue_id = p_queue_id
          AND j.status IN ('claimed', 'running')
          AND j.lock_expires_at <= p_now
        ORDER BY j.lock_expires_at, j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ),
    requeued AS (
        UPDATE codity.jobs j
        SET status = 'queued',
            attempt = j.attempt - 1,
            crash_count = j.crash_count + 1,
            lock_expires_at = NULL,
            updated_at = p_now
        FROM expired e
        WHERE j.queue_id = p_queue_id AND j.id = e.id
          AND j.status IN ('claimed', 'running')
          AND j.lock_expires_at <= p_now
          AND j.crash_count + 1 < v_queue.max_crashes
        RETURNING j.id, j.project_id, j.execution_seq, e.attempt, e.worker_id, e.claimed_at,
                  e.started_at
    )
    SELECT coalesce(array_agg(r.id), '{}'), array_agg(r.project_id), array_agg(r.execution_seq),
           array_agg(r.attempt), array_agg(r.worker_id), array_agg(r.claimed_at),
           array_agg(r.started_at)
    INTO v_ids, v_project_ids, v_fences, v_attempts, v_worker_ids, v_claimed_at, v_started_at
    FROM requeued r;

    -- The execution rows in a statement of their own: an INSERT inside a CTE is never
    -- router-planned by Citus (DESIGN.md, "Room to scale out", rule 3).
    INSERT INTO codity.job_executions
        (job_id, queue_id, project_id, execution_seq, attempt, worker_id, status, claimed_at,
         started_at, finished_at, attempt_refunded, error)
    SELECT r.job_id, p_queue_id, r.project_id, r.fence, r.attempt, r.worker_id, 'reaped',
           r.claimed_at, r.started_at, p_now, true,
           'lease expired: the worker stopped heartbeating'
    FROM unnest(v_ids, v_project_ids, v_fences, v_attempts, v_worker_ids, v_claimed_at,
                v_started_at)
         AS r(job_id, project_id, fence, attempt, worker_id, claimed_at, started_at);

    RETURN QUERY
    SELECT r.job_id, p_queue_id, r.fence, 'requeued'::text
    FROM unnest(v_ids, v_fences) AS r(job_id, fence);


    -- At the crash cap: dead-letter, so a job that kills its worker cannot loop forever.
    FOR v_dead IN
        SELECT j.* FROM codity.jobs j
        WHERE j.queue_id = p_queue_id
          AND j.status IN ('claimed', 'running')
          AND j.lock_expires_at <= p_now
          AND j.crash_count + 1 >= v_queue.max_crashes
        ORDER BY j.id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM codity._check_transition(v_dead.status, 'dead_letter', v_dead.id);
        UPDATE codity.jobs j SET crash_count = j.crash_count + 1
        WHERE j.queue_id = p_queue_id AND j.id = v_dead.id;
        PERFORM codity._close_attempt(v_dead, 'reaped', p_now,
                                      'lease expired: the worker stopped heartbeating');
        PERFORM codity._dead_letter(
            p_queue_id, v_dead.id,
            format('crashed: lease expired %s times (max_crashes %s)', v_dead.crash_count + 1, v_queue.max_crashes),
            'lease expired: the worker stopped heartbeating',
            p_now);
        RETURN QUERY SELECT v_dead.id, p_queue_id, v_dead.execution_seq, 'dead_letter'::text;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION codity.reap_in_queue(bigint, timestamptz, integer) IS
'Requeue the jobs of one queue whose lease expired, refunding the attempt; dead-letter those at the crash cap.

Each reaped execution is closed as reaped with attempt_refunded = true. A job reaped
max_crashes times (a handler that kills its worker) is dead-lettered instead. Safe to run
from several schedulers at once (SKIP LOCKED), and a job completed meanwhile is never
requeued. Returns one row per job touched. Raises no NOTIFY (the caller wakes the queue''s
workers: pg_notify(''codity_v1'', queue_id::text)). Raises CD001 (no queue with this id),
CD010 (limit not positive).
Example: SELECT * FROM codity.reap_in_queue(3);';

REVOKE ALL ON FUNCTION codity.reap_in_queue(bigint, timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.reap_in_queue(bigint, timestamptz, integer) TO codity_app;

-- Every queue with an expired lease: the list first, then the body once per queue (rule 6).
CREATE OR REPLACE FUNCTION codity.reap(
    p_now timestamptz DEFAULT now(),
    p_limit integer DEFAULT 1000
)
RETURNS TABLE (job_id bigint, queue_id bigint, fence integer, outcome text)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue record;
    v_reaped record;
    v_requeued boolean;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'limit must be positive, got %', p_limit USING ERRCODE = 'CD010';
    END IF;
    -- The queues with an expired lease, read first (a read locks nothing and may fan out);
    -- visiting every queue instead cost 40 ms per tick with 500 queues, 0.4 ms this way.
    -- From each queue's codity.queue_totals row, the job-side row every queue has, so that
    -- on a Citus cluster the probe per queue runs on the shards beside it (codity.promote).
    FOR v_queue IN
        SELECT q.id, q.is_paused
        FROM codity.queue_totals t
        JOIN codity.queues q ON q.id = t.queue_id
        WHERE EXISTS (
            SELECT 1 FROM codity.jobs j
            WHERE j.queue_id = t.queue_id AND j.status IN ('claimed', 'running')
              AND j.lock_expires_at <= p_now
        )
        ORDER BY q.id
    LOOP
        v_requeued := false;
        FOR v_reaped IN SELECT * FROM codity.reap_in_queue(v_queue.id, p_now, p_limit) LOOP
            job_id := v_reaped.job_id;
            queue_id := v_reaped.queue_id;
            fence := v_reaped.fence;
            outcome := v_reaped.outcome;
            RETURN NEXT;
            v_requeued := v_requeued OR v_reaped.outcome = 'requeued';
        END LOOP;
        -- The wakeup from this side, not from the body (rule 10).
        IF v_requeued AND NOT v_queue.is_paused THEN
            PERFORM codity._notify(v_queue.id);
        END IF;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION codity.reap(timestamptz, integer) IS
'Requeue jobs whose lease expired, refunding the attempt; dead-letter those at the crash cap.

Each reaped execution is closed as reaped with attempt_refunded = true. A job reaped
max_crashes times (a handler that kills its worker) is dead-lettered instead. Safe to run
from several schedulers at once (SKIP LOCKED), and a job completed meanwhile is never
requeued. Returns one row per job touched. Calls reap_in_queue(queue_id, ...) for each queue with an expired lease
and raises one codity_v1 NOTIFY for each queue with requeued jobs that is not paused.
Raises CD010 (limit not positive).
Example: SELECT * FROM codity.reap();';

REVOKE ALL ON FUNCTION codity.reap(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.reap(timestamptz, integer) TO codity_app;
