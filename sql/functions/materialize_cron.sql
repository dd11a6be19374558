-- codity.materialize_cron: create the due job of each schedule, exactly once.
--
-- Several schedulers run this at once with no leader: each due schedule row is taken
-- FOR UPDATE SKIP LOCKED, so exactly one of them materialises it; a scheduler that rolls
-- back releases the row and another takes it on its next tick. As a second wall, the job
-- carries the idempotency key 'codity:cron:<schedule id>:<due epoch>', so even two
-- materialisations of one occurrence could only ever insert one job.
--
-- Missed runs fire once, never as a backlog: the next run is computed from p_now, never
-- from the stored next_run_at, so an hour of downtime yields one job, not sixty.
-- One queue per statement (DESIGN.md, Citus). Caller: codity.tick.

CREATE OR REPLACE FUNCTION codity.materialize_cron(
    p_now timestamptz DEFAULT now(),
    p_limit integer DEFAULT 1000
)
RETURNS TABLE (schedule_id bigint, job_id bigint, due_at timestamptz, next_run_at timestamptz)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue codity.queues;
    v_schedule codity.scheduled_jobs;
    v_job_id bigint;
    v_next timestamptz;
    v_any boolean;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'limit must be positive, got %', p_limit USING ERRCODE = 'CD010';
    END IF;
    FOR v_queue IN
        SELECT q.* FROM codity.queues q
        WHERE EXISTS (
            SELECT 1 FROM codity.scheduled_jobs s
            WHERE s.queue_id = q.id AND NOT s.is_paused AND s.next_run_at <= p_now
        )
        ORDER BY q.id
    LOOP
        v_any := false;
        FOR v_schedule IN
            SELECT s.* FROM codity.scheduled_jobs s
            WHERE s.queue_id = v_queue.id AND NOT s.is_paused AND s.next_run_at <= p_now
            ORDER BY s.next_run_at, s.id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        LOOP
            INSERT INTO codity.jobs AS j
                (queue_id, project_id, task, payload, priority, status, run_at, max_attempts,
                 idempotency_key, schedule_id, created_at, updated_at)
            VALUES
                (v_queue.id, v_queue.project_id, v_schedule.task, v_schedule.payload, v_schedule.priority, 'queued',
                 v_schedule.next_run_at, v_queue.max_attempts,
                 format('codity:cron:%s:%s', v_schedule.id, extract(epoch FROM v_schedule.next_run_at)::bigint),
                 v_schedule.id, p_now, p_now)
            ON CONFLICT (queue_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
            RETURNING j.id INTO v_job_id;

            v_next := codity.cron_next(v_schedule.cron, p_now, v_schedule.time_zone);
            UPDATE codity.scheduled_jobs s
            SET next_run_at = v_next, last_run_at = v_schedule.next_run_at,
                last_job_id = coalesce(v_job_id, s.last_job_id), updated_at = p_now
            WHERE s.id = v_schedule.id;

            IF v_job_id IS NOT NULL THEN
                v_any := true;
                RETURN QUERY SELECT v_schedule.id, v_job_id, v_schedule.next_run_at, v_next;
            END IF;
        END LOOP;
        IF v_any AND NOT v_queue.is_paused THEN
            PERFORM codity._notify(v_queue.id);
        END IF;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION codity.materialize_cron(timestamptz, integer) IS
'Create the due job of every unpaused schedule exactly once and compute its next run from now.

Safe with any number of schedulers at once. A schedule that missed several occurrences
(downtime) fires once; the next run is the first occurrence after now.
Example: SELECT * FROM codity.materialize_cron();';

REVOKE ALL ON FUNCTION codity.materialize_cron(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.materialize_cron(timestamptz, integer) TO codity_app;
