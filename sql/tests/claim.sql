-- codity.claim: order, limit, lease, fence token, the open attempt, paused queues, bad input.
--
-- Plain SQL that raises on failure; tests/test_sql_files.py runs the whole file in one call
-- in a fresh database (one transaction: time moves only through p_now). Every block uses a
-- queue of its own.

-- Claimed in priority DESC, run_at, id order: the index order, returned in that order too.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    v_expected bigint[];
    v_got bigint[];
BEGIN
    PERFORM codity.create_queue('claim-order');
    v_worker := codity.register_worker('w-order', ARRAY['claim-order'], p_now => t0);
    -- Inserted in an order unlike the claim order, so only the ORDER BY can produce it.
    PERFORM codity.enqueue_many('claim-order', jsonb_build_array(
        jsonb_build_object('task', 'low-old', 'priority', -5, 'run_at', t0 - interval '3 hours'),
        jsonb_build_object('task', 'mid-new', 'priority', 0, 'run_at', t0 - interval '1 minute'),
        jsonb_build_object('task', 'high', 'priority', 10, 'run_at', t0),
        jsonb_build_object('task', 'mid-old', 'priority', 0, 'run_at', t0 - interval '2 hours'),
        jsonb_build_object('task', 'mid-new-2', 'priority', 0, 'run_at', t0 - interval '1 minute')
    ), p_now => t0);
    SELECT array_agg(j.id ORDER BY j.priority DESC, j.run_at, j.id) INTO v_expected
    FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id WHERE q.name = 'claim-order';
    -- One at a time: which job a claim picks.
    v_got := '{}';
    FOR i IN 1..5 LOOP
        v_got := v_got || (SELECT c.job_id FROM codity.claim(v_worker, 'claim-order', 1, p_now => t0) AS c);
    END LOOP;
    ASSERT v_got = v_expected, format('claim order %s, expected %s', v_got, v_expected);
    -- All at once: the rows come back in the same order.
    UPDATE codity.jobs SET status = 'queued', attempt = 0, lock_expires_at = NULL WHERE id = ANY (v_got);
    SELECT array_agg(c.job_id) INTO v_got FROM codity.claim(v_worker, 'claim-order', 10, p_now => t0) AS c;
    ASSERT v_got = v_expected, format('claim batch order %s, expected %s', v_got, v_expected);
    ASSERT (SELECT array_agg(j.task ORDER BY array_position(v_got, j.id)) FROM codity.jobs j WHERE j.id = ANY (v_got))
           = ARRAY['high', 'mid-old', 'mid-new', 'mid-new-2', 'low-old'], 'priority first, then oldest run_at, then id';
END;
$$;

-- A claim hands out at most p_limit jobs, due ones only, from the named queue only.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
BEGIN
    PERFORM codity.create_queue('claim-limit');
    PERFORM codity.create_queue('claim-limit-other');
    v_worker := codity.register_worker('w-limit', ARRAY['claim-limit'], p_now => t0);
    PERFORM codity.enqueue_many('claim-limit', (SELECT jsonb_agg(jsonb_build_object('task', 't' || i)) FROM generate_series(1, 5) i), p_now => t0);
    PERFORM codity.enqueue('claim-limit', 'later', p_run_at => t0 + interval '10 seconds', p_now => t0);
    PERFORM codity.enqueue('claim-limit-other', 'elsewhere', p_now => t0);

    ASSERT (SELECT count(*) FROM codity.claim(v_worker, 'claim-limit', 2, p_now => t0)) = 2, 'limit 2 claims 2';
    ASSERT (SELECT count(*) FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id
            WHERE q.name = 'claim-limit' AND j.status = 'queued') = 3, 'the other three stay queued';
    -- Later than its run_at the delayed job is still scheduled: only promote makes it claimable.
    ASSERT (SELECT array_agg(c.task ORDER BY c.task) FROM codity.claim(v_worker, 'claim-limit', 1000, p_now => t0 + interval '1 minute') c)
           = ARRAY['t3', 't4', 't5'], 'a scheduled job is not claimed before promote';
    ASSERT (SELECT status FROM codity.jobs WHERE task = 'elsewhere') = 'queued', 'another queue''s job is untouched';
    ASSERT NOT EXISTS (SELECT 1 FROM codity.claim(v_worker, 'claim-limit', 5, p_now => t0 + interval '1 minute')),
        'an empty queue returns no rows';
END;
$$;

-- A queued job whose run_at is still ahead of p_now is not handed out.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    v_job bigint;
BEGIN
    PERFORM codity.create_queue('claim-due');
    v_worker := codity.register_worker('w-due', p_now => t0);
    v_job := (SELECT job_id FROM codity.enqueue('claim-due', 't', p_now => t0));
    ASSERT NOT EXISTS (SELECT 1 FROM codity.claim(v_worker, 'claim-due', 1, p_now => t0 - interval '1 second')),
        'a job is not due before its run_at';
    ASSERT (SELECT job_id FROM codity.claim(v_worker, 'claim-due', 1, p_now => t0)) = v_job, 'due at run_at exactly';
END;
$$;

-- What a claim writes: the lease, the charged attempt and the fence token, on the job row.
-- The execution row waits for the attempt's end (migration 0013); until then the open
-- attempt shows in codity.execution_overview, read from the job.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    c record;
    j codity.jobs;
    x record;
BEGIN
    PERFORM codity.create_queue('claim-lease', p_lease_seconds => 45, p_job_timeout_seconds => 120, p_max_attempts => 4);
    v_worker := codity.register_worker('w-lease', p_now => t0);
    PERFORM codity.enqueue('claim-lease', 'report', '{"id": 9}', p_priority => 3, p_now => t0);
    SELECT * INTO c FROM codity.claim(v_worker, 'claim-lease', p_now => t0 + interval '5 seconds');
    ASSERT c.fence = 1 AND c.attempt = 1 AND c.max_attempts = 4, format('fence %s attempt %s/%s', c.fence, c.attempt, c.max_attempts);
    ASSERT c.task = 'report' AND c.payload = '{"id": 9}' AND c.priority = 3, 'the job is handed over whole';
    ASSERT c.lease_expires_at = t0 + interval '50 seconds', format('lease is claim time + lease_seconds, got %s', c.lease_expires_at);
    ASSERT c.timeout_seconds = 120, 'the queue''s job timeout comes with the job';
    ASSERT c.run_at = t0 AND c.created_at = t0, 'run_at and created_at are reported';

    SELECT * INTO j FROM codity.jobs WHERE id = c.job_id;
    ASSERT j.status = 'claimed' AND j.worker_id = v_worker, 'the job is claimed by the worker';
    ASSERT j.claimed_at = t0 + interval '5 seconds' AND j.lock_expires_at = c.lease_expires_at, 'claim time and lease stored';
    ASSERT j.attempt = 1 AND j.execution_seq = 1, 'attempt charged, fence issued';

    ASSERT NOT EXISTS (SELECT 1 FROM codity.job_executions WHERE job_id = c.job_id),
        'no execution row while the attempt is held';
    SELECT * INTO x FROM codity.execution_overview WHERE job_id = c.job_id;
    ASSERT x.fence = 1 AND x.attempt = 1 AND x.worker_id = v_worker AND x.queue_id = j.queue_id,
        'the open attempt is listed with its fence and attempt';
    ASSERT x.status = 'claimed' AND x.claimed_at = t0 + interval '5 seconds' AND x.finished_at IS NULL, 'the attempt is open';
END;
$$;

-- The fence grows on every claim and is never reused, even when the attempt is refunded.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    c record;
BEGIN
    PERFORM codity.create_queue('claim-fence');
    v_worker := codity.register_worker('w-fence', p_now => t0);
    PERFORM codity.enqueue('claim-fence', 't', p_now => t0);
    FOR i IN 1..3 LOOP
        SELECT * INTO c FROM codity.claim(v_worker, 'claim-fence', p_now => t0);
        ASSERT c.fence = i, format('claim %s has fence %s', i, c.fence);
        ASSERT c.attempt = 1, 'a released attempt is not charged again';
        PERFORM codity.release(c.job_id, c.fence, p_now => t0);
    END LOOP;
    ASSERT (SELECT array_agg(execution_seq ORDER BY execution_seq) FROM codity.job_executions WHERE job_id = c.job_id)
           = ARRAY[1, 2, 3], 'one execution per claim';
END;
$$;

-- A paused queue hands out nothing; its jobs stay queued.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
BEGIN
    PERFORM codity.create_queue('claim-paused');
    v_worker := codity.register_worker('w-paused', p_now => t0);
    PERFORM codity.enqueue('claim-paused', 't', p_now => t0);
    PERFORM codity.pause_queue('claim-paused', p_now => t0);
    ASSERT NOT EXISTS (SELECT 1 FROM codity.claim(v_worker, 'claim-paused', 10, p_now => t0)), 'paused: nothing claimed';
    ASSERT (SELECT status FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id WHERE q.name = 'claim-paused') = 'queued',
        'the job waits';
    PERFORM codity.resume_queue('claim-paused', p_now => t0);
    ASSERT (SELECT count(*) FROM codity.claim(v_worker, 'claim-paused', 10, p_now => t0)) = 1, 'resumed: claimed';
END;
$$;

-- Bad input: limit outside 1..1000 (CD010), unknown worker (CD004), a worker that stopped or
-- was declared dead (CD005), unknown queue (CD001). None of them writes anything.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    v_stopped bigint;
    v_dead bigint;
    v_before jsonb;
    v_limit integer;
    v_msg text;
BEGIN
    PERFORM codity.create_queue('claim-bad');
    v_worker := codity.register_worker('w-ok', p_now => t0);
    v_stopped := codity.register_worker('w-stopped', p_now => t0);
    PERFORM codity.deregister_worker(v_stopped, p_now => t0);
    v_dead := codity.register_worker('w-dead', p_now => t0 - interval '1 hour');
    PERFORM codity.sweep_workers(t0);
    ASSERT (SELECT status FROM codity.workers WHERE id = v_dead) = 'dead', 'set-up: the silent worker is dead';
    PERFORM codity.enqueue('claim-bad', 't', p_now => t0);
    v_before := pg_temp.codity_state();

    FOREACH v_limit IN ARRAY ARRAY[0, -1, 1001] LOOP
        BEGIN
            PERFORM codity.claim(v_worker, 'claim-bad', v_limit, p_now => t0);
            RAISE EXCEPTION 'expected CD010 for limit %', v_limit;
        EXCEPTION WHEN SQLSTATE 'CD010' THEN
            GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
            ASSERT v_msg = format('limit must be from 1 to 1000, got %s', v_limit), v_msg;
        END;
    END LOOP;
    BEGIN
        PERFORM codity.claim(v_worker, 'claim-bad', NULL, p_now => t0);
        RAISE EXCEPTION 'expected CD010 for a NULL limit';
    EXCEPTION WHEN SQLSTATE 'CD010' THEN
        NULL;
    END;
    BEGIN
        PERFORM codity.claim(424242, 'claim-bad', p_now => t0);
        RAISE EXCEPTION 'expected CD004';
    EXCEPTION WHEN SQLSTATE 'CD004' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'worker 424242 does not exist', v_msg;
    END;
    BEGIN
        PERFORM codity.claim(v_stopped, 'claim-bad', p_now => t0);
        RAISE EXCEPTION 'expected CD005';
    EXCEPTION WHEN SQLSTATE 'CD005' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = format('worker %s is stopped; it may not claim', v_stopped), v_msg;
    END;
    BEGIN
        PERFORM codity.claim(v_dead, 'claim-bad', p_now => t0);
        RAISE EXCEPTION 'expected CD005';
    EXCEPTION WHEN SQLSTATE 'CD005' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = format('worker %s is dead; it may not claim', v_dead), v_msg;
    END;
    BEGIN
        PERFORM codity.claim(v_worker, 'claim-nope', p_now => t0);
        RAISE EXCEPTION 'expected CD001';
    EXCEPTION WHEN SQLSTATE 'CD001' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'queue "claim-nope" does not exist', v_msg;
    END;
    ASSERT pg_temp.codity_state() = v_before, 'rejected claims wrote nothing';
    ASSERT (SELECT count(*) FROM codity.claim(v_worker, 'claim-bad', 1000, p_now => t0)) = 1, 'limit 1000 is allowed';
END;
$$;

-- p_start: the claim starts what it claims, in the same write; without it the job waits
-- claimed for codity.start. Either way the lease, the attempt and the fence are the same.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    c record;
    p record;
BEGIN
    PERFORM codity.create_queue('claim-start', p_lease_seconds => 30);
    v_worker := codity.register_worker('w-claim-start', p_now => t0);
    PERFORM codity.enqueue('claim-start', 'started', p_now => t0);
    PERFORM codity.enqueue('claim-start', 'plain', p_now => t0);

    SELECT * INTO c FROM codity.claim(v_worker, 'claim-start', p_start => true, p_now => t0);
    ASSERT c.task = 'started' AND c.fence = 1 AND c.attempt = 1
           AND c.lease_expires_at = t0 + interval '30 seconds', format('started claim: %s', c);
    ASSERT (SELECT status = 'running' AND claimed_at = t0 AND started_at = t0 AND worker_id = v_worker
            FROM codity.jobs WHERE id = c.job_id), 'the job comes back running, started at the claim';
    ASSERT (SELECT status = 'running' AND started_at = t0 AND finished_at IS NULL
            FROM codity.execution_overview WHERE job_id = c.job_id AND fence = c.fence),
           'its attempt is listed running';
    ASSERT (SELECT outcome = 'already_applied' FROM codity.start(c.job_id, c.fence, p_now => t0)),
           'starting it again is a repeat, not a change';
    ASSERT (SELECT job_status = 'completed' FROM codity.complete(c.job_id, c.fence, p_now => t0)),
           'it completes like any running job';

    SELECT * INTO p FROM codity.claim(v_worker, 'claim-start', p_now => t0);
    ASSERT p.task = 'plain', format('plain claim: %s', p);
    ASSERT (SELECT status = 'claimed' AND started_at IS NULL FROM codity.jobs WHERE id = p.job_id),
           'without p_start the job waits for codity.start';
END;
$$;

-- A claim whose answer was lost: release_lost_claims_in_queue gives back, attempt not
-- charged, every job of the queue the worker holds but did not list; the listed job, the
-- worker's jobs of another queue and another worker's jobs stay as they are.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_queue bigint;
    v_other_queue bigint;
    v_worker bigint;
    v_peer bigint;
    v_mine bigint[];
    v_peers bigint;
    v_elsewhere bigint;
    v_released bigint[];
    v_before jsonb;
    v_msg text;
BEGIN
    v_queue := (SELECT queue_id FROM codity.create_queue('claim-lost'));
    v_other_queue := (SELECT queue_id FROM codity.create_queue('claim-lost-other'));
    v_worker := codity.register_worker('w-lost', ARRAY['claim-lost', 'claim-lost-other'], p_now => t0);
    v_peer := codity.register_worker('w-lost-peer', ARRAY['claim-lost'], p_now => t0);
    PERFORM codity.enqueue('claim-lost', 'job', p_now => t0) FROM generate_series(1, 4);
    PERFORM codity.enqueue('claim-lost-other', 'job', p_now => t0);
    SELECT array_agg(c.job_id ORDER BY c.job_id) INTO v_mine
    FROM codity.claim_in_queue(v_queue, v_worker, 3, p_start => true, p_now => t0) AS c;
    v_peers := (SELECT c.job_id FROM codity.claim_in_queue(v_queue, v_peer, 1, p_now => t0) AS c);
    v_elsewhere := (SELECT c.job_id FROM codity.claim_in_queue(v_other_queue, v_worker, 1, p_now => t0) AS c);

    -- The worker knows of its first job only: the answer that carried the other two was lost.
    SELECT array_agg(r.job_id ORDER BY r.job_id) INTO v_released
    FROM codity.release_lost_claims_in_queue(v_queue, v_worker, ARRAY[v_mine[1]], t0 + interval '1 second') AS r;
    ASSERT v_released = v_mine[2:3], format('released %s, expected %s', v_released, v_mine[2:3]);
    ASSERT (SELECT bool_and(j.status = 'queued' AND j.attempt = 0)
            FROM codity.jobs j WHERE j.id = ANY (v_released)), 'back in the queue, attempt not charged';
    ASSERT (SELECT bool_and(x.status = 'released' AND x.attempt_refunded)
            FROM codity.job_executions x WHERE x.job_id = ANY (v_released)), 'their executions are released, refunded';
    ASSERT (SELECT j.status FROM codity.jobs j WHERE j.id = v_mine[1]) = 'running', 'the job it knows of runs on';
    ASSERT (SELECT j.worker_id FROM codity.jobs j WHERE j.id = v_peers) = v_peer, 'another worker''s job is not touched';
    ASSERT (SELECT j.status FROM codity.jobs j WHERE j.id = v_elsewhere) = 'claimed', 'nor its job of another queue';
    -- Nothing left to give back: a repeat (its answer lost too) releases nothing.
    ASSERT NOT EXISTS (SELECT 1 FROM codity.release_lost_claims_in_queue(v_queue, v_worker, ARRAY[v_mine[1]], t0 + interval '2 seconds')),
           'a repeat releases nothing';

    -- No list is an error, and changes nothing.
    v_before := pg_temp.codity_state();
    BEGIN
        PERFORM codity.release_lost_claims_in_queue(v_queue, v_worker, NULL);
        RAISE EXCEPTION 'expected CD010';
    EXCEPTION WHEN SQLSTATE 'CD010' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'p_known_job_ids must be an array (empty when the worker holds none)', v_msg;
    END;
    ASSERT pg_temp.codity_state() = v_before, 'nothing changed';
END;
$$;
