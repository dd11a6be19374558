-- codity.reap: expired leases go back to the queue with the attempt refunded; the crash cap.
--
-- Plain SQL that raises on failure; tests/test_sql_files.py runs the whole file in one call
-- in a fresh database (one transaction: time moves only through p_now). Every block uses a
-- queue of its own; reap is global, so each block reaps at a time no earlier block's lease
-- reaches (leases end by t0 + 1 hour, later blocks use later days).

-- A lease is reaped when it has expired, not a moment before; claimed and running alike.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    c1 record;
    c2 record;
BEGIN
    PERFORM codity.create_queue('reap-basic', p_lease_seconds => 30);
    v_worker := codity.register_worker('w-basic', p_now => t0);
    PERFORM codity.enqueue_many('reap-basic', '[{"task": "a"}, {"task": "b"}]', p_now => t0);
    SELECT * INTO c1 FROM codity.claim(v_worker, 'reap-basic', p_now => t0);
    SELECT * INTO c2 FROM codity.claim(v_worker, 'reap-basic', p_now => t0);
    PERFORM codity.start(c2.job_id, c2.fence, p_now => t0);

    ASSERT NOT EXISTS (SELECT 1 FROM codity.reap(t0 + interval '29.999 seconds')), 'a live lease is not reaped';
    ASSERT (SELECT array_agg(r.job_id ORDER BY r.job_id) FROM codity.reap(t0 + interval '30 seconds') r)
           = ARRAY[c1.job_id, c2.job_id], 'both expired leases are reaped at lock_expires_at';

    ASSERT NOT EXISTS (SELECT 1 FROM codity.jobs WHERE id IN (c1.job_id, c2.job_id)
                       AND NOT (status = 'queued' AND attempt = 0 AND crash_count = 1 AND lock_expires_at IS NULL
                                AND finished_at IS NULL AND execution_seq = 1)),
        'claimed and running jobs are queued again, attempt refunded, one crash counted';
    ASSERT NOT EXISTS (SELECT 1 FROM codity.job_executions WHERE job_id IN (c1.job_id, c2.job_id)
                       AND NOT (status = 'reaped' AND attempt_refunded AND finished_at = t0 + interval '30 seconds'
                                AND error = 'lease expired: the worker stopped heartbeating')),
        'the executions are closed as reaped, attempt_refunded';
    ASSERT NOT EXISTS (SELECT 1 FROM codity.reap(t0 + interval '31 seconds')), 'nothing is reaped twice';
END;
$$;

-- Reap returns one row per job: id, queue, the fence of the reaped execution, the outcome.
DO $$
DECLARE
    t0 timestamptz := '2030-01-02 12:00:00+00';
    v_worker bigint;
    c record;
    r record;
BEGIN
    PERFORM codity.create_queue('reap-rows', p_lease_seconds => 10);
    v_worker := codity.register_worker('w-rows', p_now => t0);
    PERFORM codity.enqueue('reap-rows', 't', p_now => t0);
    SELECT * INTO c FROM codity.claim(v_worker, 'reap-rows', p_now => t0);
    SELECT * INTO r FROM codity.reap(t0 + interval '10 seconds');
    ASSERT r.job_id = c.job_id AND r.fence = c.fence AND r.outcome = 'requeued'
           AND r.queue_id = (SELECT id FROM codity.queues WHERE name = 'reap-rows'), format('reap row: %s', r);
END;
$$;

-- A heartbeat keeps the lease alive; a completed job is never reaped.
DO $$
DECLARE
    t0 timestamptz := '2030-01-03 12:00:00+00';
    v_worker bigint;
    c1 record;
    c2 record;
BEGIN
    PERFORM codity.create_queue('reap-alive', p_lease_seconds => 30);
    v_worker := codity.register_worker('w-alive', p_now => t0);
    PERFORM codity.enqueue_many('reap-alive', '[{"task": "beating"}, {"task": "done"}]', p_now => t0);
    SELECT * INTO c1 FROM codity.claim(v_worker, 'reap-alive', p_now => t0);
    SELECT * INTO c2 FROM codity.claim(v_worker, 'reap-alive', p_now => t0);
    PERFORM codity.start(c2.job_id, c2.fence, p_now => t0);
    PERFORM codity.complete(c2.job_id, c2.fence, p_now => t0 + interval '5 seconds');
    PERFORM codity.heartbeat(v_worker, ARRAY[c1.job_id], ARRAY[c1.fence], p_now => t0 + interval '25 seconds');
    ASSERT NOT EXISTS (SELECT 1 FROM codity.reap(t0 + interval '50 seconds')), 'extended lease and finished job are left alone';
    ASSERT (SELECT status FROM codity.jobs WHERE id = c1.job_id) = 'claimed', 'the heartbeating job is still held';
    ASSERT (SELECT status FROM codity.jobs WHERE id = c2.job_id) = 'completed', 'the completed job stays completed';
    ASSERT (SELECT count(*) FROM codity.reap(t0 + interval '55 seconds')) = 1, 'once heartbeats stop, the lease runs out';
END;
$$;

-- After a reap the old worker's complete is refused and the new claim gets a new fence.
DO $$
DECLARE
    t0 timestamptz := '2030-01-04 12:00:00+00';
    v_frozen bigint;
    v_healthy bigint;
    c1 record;
    c2 record;
    r record;
BEGIN
    PERFORM codity.create_queue('reap-zombie', p_lease_seconds => 30);
    v_frozen := codity.register_worker('w-frozen', p_now => t0);
    v_healthy := codity.register_worker('w-healthy', p_now => t0);
    PERFORM codity.enqueue('reap-zombie', 't', p_now => t0);
    SELECT * INTO c1 FROM codity.claim(v_frozen, 'reap-zombie', p_now => t0);
    PERFORM codity.start(c1.job_id, c1.fence, p_now => t0);
    PERFORM codity.reap(t0 + interval '31 seconds');
    SELECT * INTO c2 FROM codity.claim(v_healthy, 'reap-zombie', p_now => t0 + interval '32 seconds');
    ASSERT c2.fence = 2 AND c2.attempt = 1, 'reclaimed: fence 2, still attempt 1';
    SELECT * INTO r FROM codity.complete(c1.job_id, c1.fence, p_now => t0 + interval '33 seconds');
    ASSERT NOT r.accepted AND r.job_status = 'claimed', 'the frozen worker''s complete is refused';
    SELECT * INTO r FROM codity.heartbeat(v_frozen, ARRAY[c1.job_id], ARRAY[c1.fence], p_now => t0 + interval '34 seconds');
    ASSERT r.state = 'lost', 'its heartbeat learns the job is lost';
    PERFORM codity.start(c2.job_id, c2.fence, p_now => t0 + interval '35 seconds');
    ASSERT (SELECT accepted FROM codity.complete(c2.job_id, c2.fence, p_now => t0 + interval '36 seconds')), 'the new owner completes';
END;
$$;

-- A job whose lease keeps expiring is dead-lettered at the queue's max_crashes.
DO $$
DECLARE
    t0 timestamptz := '2030-01-05 12:00:00+00';
    v_worker bigint;
    v_job bigint;
    c record;
    r record;
    d codity.dead_letters;
BEGIN
    PERFORM codity.create_queue('reap-crash', p_lease_seconds => 10, p_max_crashes => 3, p_max_attempts => 5);
    v_worker := codity.register_worker('w-crash', p_now => t0);
    v_job := (SELECT job_id FROM codity.enqueue('reap-crash', 'segfault', '{"n": 1}', p_priority => 2, p_now => t0));
    FOR i IN 1..2 LOOP
        SELECT * INTO c FROM codity.claim(v_worker, 'reap-crash', p_now => t0 + make_interval(mins => i));
        PERFORM codity.start(c.job_id, c.fence, p_now => t0 + make_interval(mins => i));
        SELECT * INTO r FROM codity.reap(t0 + make_interval(mins => i, secs => 10));
        ASSERT r.outcome = 'requeued', format('crash %s is refunded', i);
    END LOOP;
    ASSERT (SELECT crash_count = 2 AND attempt = 0 FROM codity.jobs WHERE id = v_job), 'two crashes, no attempt charged';

    SELECT * INTO c FROM codity.claim(v_worker, 'reap-crash', p_now => t0 + interval '3 minutes');
    SELECT * INTO r FROM codity.reap(t0 + interval '3 minutes 10 seconds');
    ASSERT r.job_id = v_job AND r.outcome = 'dead_letter' AND r.fence = 3, format('the third crash dead-letters: %s', r);
    ASSERT (SELECT status = 'dead_letter' AND crash_count = 3 AND lock_expires_at IS NULL
                   AND finished_at = t0 + interval '3 minutes 10 seconds'
            FROM codity.jobs WHERE id = v_job), 'the job is dead';
    ASSERT (SELECT status = 'reaped' AND NOT attempt_refunded FROM codity.job_executions WHERE job_id = v_job AND execution_seq = 3),
        'the last execution is reaped without refund';
    SELECT * INTO d FROM codity.dead_letters WHERE job_id = v_job;
    ASSERT d.reason = 'crashed: lease expired 3 times (max_crashes 3)', d.reason;
    ASSERT d.payload = '{"n": 1}' AND d.task = 'segfault' AND d.priority = 2 AND d.attempts = 1, 'payload copied';
    ASSERT d.error = 'lease expired: the worker stopped heartbeating', d.error;
END;
$$;

-- max_crashes = 1: the first expiry dead-letters a claimed job (claimed -> dead_letter).
DO $$
DECLARE
    t0 timestamptz := '2030-01-06 12:00:00+00';
    v_worker bigint;
    c record;
    r record;
BEGIN
    PERFORM codity.create_queue('reap-crash-once', p_lease_seconds => 10, p_max_crashes => 1);
    v_worker := codity.register_worker('w-crash-once', p_now => t0);
    PERFORM codity.enqueue('reap-crash-once', 't', p_now => t0);
    SELECT * INTO c FROM codity.claim(v_worker, 'reap-crash-once', p_now => t0);
    SELECT * INTO r FROM codity.reap(t0 + interval '10 seconds');
    ASSERT r.outcome = 'dead_letter', 'a claimed job at the cap is dead-lettered';
    ASSERT (SELECT status FROM codity.jobs WHERE id = c.job_id) = 'dead_letter', 'claimed -> dead_letter';
END;
$$;

-- p_limit caps the rows reaped per queue; the rest wait for the next pass. Bad limit: CD010.
DO $$
DECLARE
    t0 timestamptz := '2030-01-07 12:00:00+00';
    v_worker bigint;
    v_msg text;
BEGIN
    PERFORM codity.create_queue('reap-limit', p_lease_seconds => 10);
    v_worker := codity.register_worker('w-limit', p_now => t0);
    PERFORM codity.enqueue_many('reap-limit', (SELECT jsonb_agg(jsonb_build_object('task', 't')) FROM generate_series(1, 3)), p_now => t0);
    PERFORM codity.claim(v_worker, 'reap-limit', 3, p_now => t0);
    ASSERT (SELECT count(*) FROM codity.reap(t0 + interval '1 minute', 2)) = 2, 'limit 2 reaps 2';
    ASSERT (SELECT count(*) FROM codity.reap(t0 + interval '1 minute', 2)) = 1, 'the next pass reaps the rest';
    BEGIN
        PERFORM codity.reap(t0, 0);
        RAISE EXCEPTION 'expected CD010';
    EXCEPTION WHEN SQLSTATE 'CD010' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'limit must be positive, got 0', v_msg;
    END;
END;
$$;

-- Reap works across queues, one queue per statement, and leaves other queues' live leases.
DO $$
DECLARE
    t0 timestamptz := '2030-01-08 12:00:00+00';
    v_worker bigint;
BEGIN
    PERFORM codity.create_queue('reap-short', p_lease_seconds => 5);
    PERFORM codity.create_queue('reap-long', p_lease_seconds => 600);
    v_worker := codity.register_worker('w-mixed', p_now => t0);
    PERFORM codity.enqueue('reap-short', 't', p_now => t0);
    PERFORM codity.enqueue('reap-long', 't', p_now => t0);
    PERFORM codity.claim(v_worker, 'reap-short', p_now => t0);
    PERFORM codity.claim(v_worker, 'reap-long', p_now => t0);
    ASSERT (SELECT array_agg(q.name) FROM codity.reap(t0 + interval '1 minute') r JOIN codity.queues q ON q.id = r.queue_id)
           = ARRAY['reap-short'], 'only the short lease expired';
END;
$$;
