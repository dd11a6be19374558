-- codity.enqueue / codity.enqueue_many: due and delayed jobs, idempotency, batches, bad input.
--
-- Plain SQL that raises on failure; tests/test_sql_files.py runs the whole file in one call
-- in a fresh database (so in one transaction: time moves only through p_now). Every block
-- uses a queue of its own, so blocks do not see each other's jobs.

-- Digest of every codity table (row count and content), to prove a rejected call wrote nothing.
-- A job due now starts queued, with the queue's max_attempts, and its payload kept as given.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    r record;
    j codity.jobs;
BEGIN
    PERFORM codity.create_queue('enq-due', p_max_attempts => 7);
    SELECT * INTO r FROM codity.enqueue('enq-due', 'emails.send', '{"to": "a@example.com"}', p_now => t0);
    ASSERT r.is_new, 'a first enqueue is new';
    ASSERT r.job_status = 'queued', format('a job due now starts queued, got %s', r.job_status);
    ASSERT r.run_at = t0, format('run_at defaults to now, got %s', r.run_at);
    SELECT * INTO j FROM codity.jobs WHERE id = r.job_id;
    ASSERT j.task = 'emails.send' AND j.payload = '{"to": "a@example.com"}', 'task and payload are stored';
    ASSERT j.priority = 0 AND j.attempt = 0 AND j.execution_seq = 0 AND j.crash_count = 0, 'counters start at zero';
    ASSERT j.max_attempts = 7, format('max_attempts comes from the queue, got %s', j.max_attempts);
    ASSERT j.created_at = t0 AND j.updated_at = t0, 'timestamps come from p_now';
    ASSERT j.worker_id IS NULL AND j.lock_expires_at IS NULL AND j.finished_at IS NULL, 'a new job is not held';
END;
$$;

-- run_at in the future starts scheduled; run_at exactly now or in the past is due.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    r record;
BEGIN
    PERFORM codity.create_queue('enq-delay');
    SELECT * INTO r FROM codity.enqueue('enq-delay', 't', p_run_at => t0 + interval '1 second', p_now => t0);
    ASSERT r.job_status = 'scheduled', format('a delayed job starts scheduled, got %s', r.job_status);
    ASSERT r.run_at = t0 + interval '1 second', 'run_at is kept';
    SELECT * INTO r FROM codity.enqueue('enq-delay', 't', p_run_at => t0, p_now => t0);
    ASSERT r.job_status = 'queued', 'run_at = now is due';
    SELECT * INTO r FROM codity.enqueue('enq-delay', 't', p_run_at => t0 - interval '1 hour', p_now => t0);
    ASSERT r.job_status = 'queued', 'run_at in the past is due';
    ASSERT r.run_at = t0 - interval '1 hour', 'a past run_at is kept, so it sorts first';
END;
$$;

-- Priority and max_attempts per job; the bounds are inclusive.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_hi bigint;
    v_lo bigint;
BEGIN
    PERFORM codity.create_queue('enq-prio');
    SELECT job_id INTO v_hi FROM codity.enqueue('enq-prio', 't', p_priority => 1000, p_max_attempts => 1000, p_now => t0);
    SELECT job_id INTO v_lo FROM codity.enqueue('enq-prio', 't', p_priority => -1000, p_max_attempts => 1, p_now => t0);
    ASSERT (SELECT priority = 1000 AND max_attempts = 1000 FROM codity.jobs WHERE id = v_hi), 'upper bounds accepted';
    ASSERT (SELECT priority = -1000 AND max_attempts = 1 FROM codity.jobs WHERE id = v_lo), 'lower bounds accepted';
END;
$$;

-- An idempotency key names one job per queue: a repeat returns it and inserts nothing.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    r1 record;
    r2 record;
    r3 record;
BEGIN
    PERFORM codity.create_queue('enq-idem-a');
    PERFORM codity.create_queue('enq-idem-b');
    SELECT * INTO r1 FROM codity.enqueue('enq-idem-a', 'welcome', '{"user": 42}', p_idempotency_key => 'welcome-42', p_now => t0);
    SELECT * INTO r2 FROM codity.enqueue('enq-idem-a', 'other', '{"user": 43}', p_idempotency_key => 'welcome-42',
                                         p_now => t0 + interval '1 minute');
    ASSERT r1.is_new AND NOT r2.is_new, 'the repeat is not new';
    ASSERT r1.job_id = r2.job_id, 'the repeat returns the existing job';
    ASSERT r2.run_at = t0 AND r2.job_status = 'queued', 'the repeat reports the existing job''s state';
    ASSERT (SELECT count(*) FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id WHERE q.name = 'enq-idem-a') = 1,
        'the repeat inserted nothing';
    ASSERT (SELECT payload FROM codity.jobs WHERE id = r1.job_id) = '{"user": 42}', 'the first payload wins';
    SELECT * INTO r3 FROM codity.enqueue('enq-idem-b', 'welcome', p_idempotency_key => 'welcome-42', p_now => t0);
    ASSERT r3.is_new AND r3.job_id <> r1.job_id, 'keys are per queue';
END;
$$;

-- A batch: one result row per position, in order; duplicates inside a batch collapse.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_pos integer[];
    v_id bigint[];
    v_status codity.job_status[];
    v_run_at timestamptz[];
    v_new boolean[];
    v_existing bigint;
BEGIN
    PERFORM codity.create_queue('enq-batch');
    SELECT job_id INTO v_existing FROM codity.enqueue('enq-batch', 't', p_idempotency_key => 'old', p_now => t0);
    SELECT array_agg(e.job_position ORDER BY e.job_position), array_agg(e.job_id ORDER BY e.job_position),
           array_agg(e.job_status ORDER BY e.job_position), array_agg(e.run_at ORDER BY e.job_position),
           array_agg(e.is_new ORDER BY e.job_position)
    INTO v_pos, v_id, v_status, v_run_at, v_new
    FROM codity.enqueue_many('enq-batch', jsonb_build_array(
        jsonb_build_object('task', 'a', 'payload', jsonb_build_object('n', 1)),
        jsonb_build_object('task', 'b', 'run_at', t0 + interval '5 minutes', 'priority', 5),
        jsonb_build_object('task', 'c', 'idempotency_key', 'dup'),
        jsonb_build_object('task', 'd', 'idempotency_key', 'dup'),
        jsonb_build_object('task', 'e', 'idempotency_key', 'old', 'max_attempts', 9)
    ), p_now => t0) AS e;
    ASSERT v_pos = ARRAY[1, 2, 3, 4, 5], format('one row per position, counted from 1, got %s', v_pos);
    ASSERT v_status[1] = 'queued' AND v_new[1], 'position 1 is a new due job';
    ASSERT v_status[2] = 'scheduled' AND v_run_at[2] = t0 + interval '5 minutes', 'position 2 is delayed';
    ASSERT v_id[1] < v_id[2] AND v_id[2] < v_id[3], 'ids follow positions';
    ASSERT v_new[3] AND NOT v_new[4] AND v_id[3] = v_id[4], 'a key repeated inside the batch names one job';
    ASSERT NOT v_new[5] AND v_id[5] = v_existing, 'an existing key returns the existing job';
    ASSERT (SELECT count(*) FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id WHERE q.name = 'enq-batch') = 4,
        'three new jobs and the existing one';
    ASSERT (SELECT task = 'c' FROM codity.jobs WHERE id = v_id[3]), 'the first of two duplicates wins';
    ASSERT (SELECT priority FROM codity.jobs WHERE id = v_id[2]) = 5, 'priority is read from the object';
    ASSERT (SELECT payload FROM codity.jobs WHERE id = v_id[2]) = '{}', 'payload defaults to {}';
    ASSERT (SELECT payload FROM codity.jobs WHERE id = v_id[1]) = '{"n": 1}', 'payload is read from the object';
END;
$$;

-- An empty batch inserts nothing and returns nothing.
DO $$
BEGIN
    PERFORM codity.create_queue('enq-empty');
    ASSERT NOT EXISTS (SELECT 1 FROM codity.enqueue_many('enq-empty', '[]')), 'an empty batch returns no rows';
    ASSERT NOT EXISTS (SELECT 1 FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id WHERE q.name = 'enq-empty'),
        'an empty batch inserts nothing';
END;
$$;

-- A paused queue still accepts jobs.
DO $$
DECLARE
    r record;
BEGIN
    PERFORM codity.create_queue('enq-paused');
    PERFORM codity.pause_queue('enq-paused');
    SELECT * INTO r FROM codity.enqueue('enq-paused', 't');
    ASSERT r.is_new AND r.job_status = 'queued', 'a paused queue accepts jobs';
END;
$$;

-- Payload size: exactly 64 KB (65536 bytes as text) is accepted, one byte more is CD011.
DO $$
DECLARE
    v_exact jsonb := to_jsonb(repeat('x', 65534));  -- the two quotes make 65536
    v_over jsonb := to_jsonb(repeat('x', 65535));
    v_before jsonb;
    v_msg text;
BEGIN
    PERFORM codity.create_queue('enq-size');
    ASSERT octet_length(v_exact::text) = 65536, 'the test payload is exactly 64 KB';
    ASSERT (SELECT is_new FROM codity.enqueue('enq-size', 't', v_exact)), 'a 64 KB payload is accepted';
    v_before := pg_temp.codity_state();
    BEGIN
        PERFORM codity.enqueue('enq-size', 't', v_over);
        RAISE EXCEPTION 'expected CD011';
    EXCEPTION WHEN SQLSTATE 'CD011' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg LIKE '%65537 bytes%65536%', format('the message gives the size and the limit: %s', v_msg);
    END;
    BEGIN
        PERFORM codity.enqueue_many('enq-size', jsonb_build_array(
            jsonb_build_object('task', 'ok'), jsonb_build_object('task', 'big', 'payload', v_over)));
        RAISE EXCEPTION 'expected CD011';
    EXCEPTION WHEN SQLSTATE 'CD011' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg LIKE 'payload of job 2 %', format('the message names the position: %s', v_msg);
    END;
    ASSERT pg_temp.codity_state() = v_before, 'an oversized payload writes nothing, not even the valid jobs beside it';
END;
$$;

-- Bad job objects are CD010 naming what is wrong, and nothing of the batch is written.
DO $$
DECLARE
    v_case record;
    v_before jsonb;
    v_msg text;
BEGIN
    PERFORM codity.create_queue('enq-bad');
    v_before := pg_temp.codity_state();
    FOR v_case IN
        SELECT * FROM (VALUES
            ('{"task": "t"}'::jsonb, 'jobs must be a JSON array of job objects'),
            ('[{"task": "t"}, 5]', 'job 2 of the batch is invalid: must be a JSON object'),
            ('[{"task": "t"}, {"task": "t", "colour": "red"}]', 'job 2 of the batch is invalid: unknown key ''colour''%'),
            ('[{"payload": {}}]', 'invalid job: task must be a string%'),
            ('[{"task": ""}]', 'invalid job: task must be a string%'),
            ('[{"task": 7}]', 'invalid job: task must be a string%'),
            ('[{"task": "t", "priority": 1001}]', 'invalid job: priority must be an integer from -1000 to 1000'),
            ('[{"task": "t", "priority": -1001}]', 'invalid job: priority must be an integer from -1000 to 1000'),
            ('[{"task": "t", "priority": 1.5}]', 'invalid job: priority must be an integer from -1000 to 1000'),
            ('[{"task": "t", "priority": "5"}]', 'invalid job: priority must be an integer from -1000 to 1000'),
            ('[{"task": "t", "max_attempts": 0}]', 'invalid job: max_attempts must be an integer from 1 to 1000'),
            ('[{"task": "t", "max_attempts": 1001}]', 'invalid job: max_attempts must be an integer from 1 to 1000'),
            ('[{"task": "t", "idempotency_key": ""}]', 'invalid job: idempotency_key must be a string%'),
            ('[{"task": "t", "idempotency_key": 12}]', 'invalid job: idempotency_key must be a string%'),
            ('[{"task": "t", "run_at": 12}]', 'invalid job: run_at must be an ISO 8601 timestamp string'),
            ('[{"task": "t", "run_at": "next tuesday"}]', 'invalid job: run_at ''next tuesday'' is not a timestamp')
        ) AS c(jobs, message)
    LOOP
        BEGIN
            PERFORM codity.enqueue_many('enq-bad', v_case.jobs);
            RAISE EXCEPTION 'expected CD010 for %', v_case.jobs;
        EXCEPTION WHEN SQLSTATE 'CD010' THEN
            GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
            ASSERT v_msg LIKE v_case.message, format('for %s expected "%s", got "%s"', v_case.jobs, v_case.message, v_msg);
        END;
    END LOOP;
    BEGIN
        PERFORM codity.enqueue('enq-bad', 't', p_priority => 1001);
        RAISE EXCEPTION 'expected CD010';
    EXCEPTION WHEN SQLSTATE 'CD010' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg LIKE '%priority%', format('enqueue names the priority: %s', v_msg);
    END;
    BEGIN
        PERFORM codity.enqueue_many('enq-bad', (SELECT jsonb_agg(jsonb_build_object('task', 't')) FROM generate_series(1, 10001)));
        RAISE EXCEPTION 'expected CD010';
    EXCEPTION WHEN SQLSTATE 'CD010' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'a batch holds at most 10000 jobs, got 10001', v_msg;
    END;
    ASSERT pg_temp.codity_state() = v_before, 'rejected batches wrote nothing';
END;
$$;

-- Unknown queue (CD001) and unknown project (CD002) name what is missing.
DO $$
DECLARE
    v_before jsonb := pg_temp.codity_state();
    v_msg text;
    v_detail text;
BEGIN
    BEGIN
        PERFORM codity.enqueue('no-such-queue', 't');
        RAISE EXCEPTION 'expected CD001';
    EXCEPTION WHEN SQLSTATE 'CD001' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL;
        ASSERT v_msg = 'queue "no-such-queue" does not exist', v_msg;
        ASSERT v_detail LIKE 'No queue named ''no-such-queue'' in project %', v_detail;
    END;
    BEGIN
        PERFORM codity.enqueue('enq-due', 't', p_project_id => 987654);
        RAISE EXCEPTION 'expected CD002';
    EXCEPTION WHEN SQLSTATE 'CD002' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'project 987654 does not exist', v_msg;
    END;
    ASSERT pg_temp.codity_state() = v_before, 'nothing was written';
END;
$$;
