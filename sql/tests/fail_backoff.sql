-- codity.backoff_delay and codity.fail: retry delays, full jitter, dead-lettering.
--
-- Plain SQL that raises on failure; tests/test_sql_files.py runs the whole file in one call
-- in a fresh database (one transaction: time moves only through p_now). Every block uses a
-- queue of its own.

-- The three curves, with p_random = 1 (no jitter): fixed, linear, exponential.
DO $$
DECLARE
    v_attempt integer;
BEGIN
    FOR v_attempt IN 1..5 LOOP
        ASSERT codity.backoff_delay('fixed', 1500, 60000, v_attempt, 1.0) = interval '1.5 seconds',
            format('fixed, attempt %s', v_attempt);
        ASSERT codity.backoff_delay('linear', 1500, 60000, v_attempt, 1.0) = make_interval(secs => 1.5 * v_attempt),
            format('linear, attempt %s', v_attempt);
        ASSERT codity.backoff_delay('exponential', 1500, 600000, v_attempt, 1.0) = make_interval(secs => 1.5 * 2 ^ (v_attempt - 1)),
            format('exponential, attempt %s', v_attempt);
    END LOOP;
    -- Attempt 0 or less counts as the first.
    ASSERT codity.backoff_delay('linear', 1000, 60000, 0, 1.0) = interval '1 second', 'linear floor';
    ASSERT codity.backoff_delay('exponential', 1000, 60000, 0, 1.0) = interval '1 second', 'exponential floor';
END;
$$;

-- Every curve is clamped to max_delay_ms, and exponential never overflows.
DO $$
BEGIN
    ASSERT codity.backoff_delay('fixed', 5000, 2000, 1, 1.0) = interval '2 seconds', 'fixed clamps';
    ASSERT codity.backoff_delay('linear', 1000, 3500, 10, 1.0) = interval '3.5 seconds', 'linear clamps';
    ASSERT codity.backoff_delay('exponential', 1000, 60000, 7, 1.0) = interval '60 seconds', 'exponential clamps at 2^6 s';
    ASSERT codity.backoff_delay('exponential', 1000, 60000, 6, 1.0) = interval '32 seconds', 'below the clamp';
    ASSERT codity.backoff_delay('exponential', 2147483647, 2147483647, 1000, 1.0) = make_interval(secs => 2147483.647),
        'attempt 1000 with the largest delays does not overflow';
    ASSERT codity.backoff_delay('exponential', 0, 0, 3, 1.0) = interval '0', 'zero delay is zero';
END;
$$;

-- Full jitter: the delay is the clamped value scaled by p_random in [0, 1], floored to the
-- millisecond; a p_random outside [0, 1] is clamped into it.
DO $$
BEGIN
    ASSERT codity.backoff_delay('fixed', 10000, 10000, 1, 0.0) = interval '0', 'p_random 0 retries at once';
    ASSERT codity.backoff_delay('fixed', 10000, 10000, 1, 0.25) = interval '2.5 seconds', 'p_random scales';
    ASSERT codity.backoff_delay('fixed', 1000, 1000, 1, 0.3333) = interval '0.333 seconds', 'floored to the millisecond';
    ASSERT codity.backoff_delay('exponential', 1000, 8000, 10, 0.5) = interval '4 seconds', 'jitter applies after the clamp';
    ASSERT codity.backoff_delay('fixed', 1000, 1000, 1, -3.0) = interval '0', 'p_random below 0 counts as 0';
    ASSERT codity.backoff_delay('fixed', 1000, 1000, 1, 7.0) = interval '1 second', 'p_random above 1 counts as 1';
END;
$$;

-- The default draw is uniform over [0, clamped]: every value inside, and spread out.
DO $$
DECLARE
    v_min interval;
    v_max interval;
    v_distinct integer;
BEGIN
    SELECT min(d), max(d), count(DISTINCT d) INTO v_min, v_max, v_distinct
    FROM (SELECT codity.backoff_delay('exponential', 1000, 10000, 20) AS d FROM generate_series(1, 500)) s;
    ASSERT v_min >= interval '0' AND v_max <= interval '10 seconds', format('draws in [0, 10 s]: %s .. %s', v_min, v_max);
    ASSERT v_min < interval '2.5 seconds' AND v_max > interval '7.5 seconds',
        format('500 draws cover the range, got %s .. %s', v_min, v_max);
    ASSERT v_distinct > 250, format('500 draws give many different delays, got %s', v_distinct);
END;
$$;

-- fail uses its queue's policy: 200 jobs failing at one instant retry at 200 scattered
-- moments inside [now, now + clamped delay], never all at once.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    c record;
    v_retries timestamptz[] := '{}';
    v_retry timestamptz;
BEGIN
    PERFORM codity.create_queue('fb-herd', p_backoff => 'exponential', p_base_delay_ms => 2000, p_max_delay_ms => 60000);
    v_worker := codity.register_worker('w-herd', p_now => t0);
    PERFORM codity.enqueue_many('fb-herd', (SELECT jsonb_agg(jsonb_build_object('task', 't')) FROM generate_series(1, 200)), p_now => t0);
    FOR c IN SELECT * FROM codity.claim(v_worker, 'fb-herd', 200, p_now => t0) LOOP
        PERFORM codity.start(c.job_id, c.fence, p_now => t0);
        SELECT f.retry_at INTO v_retry FROM codity.fail(c.job_id, c.fence, 'outage', p_now => t0) f;
        v_retries := v_retries || v_retry;
    END LOOP;
    ASSERT cardinality(v_retries) = 200, 'every job failed';
    ASSERT (SELECT min(r) >= t0 AND max(r) <= t0 + interval '2 seconds' FROM unnest(v_retries) r),
        'first retry within [now, now + base_delay]';
    ASSERT (SELECT count(DISTINCT r) FROM unnest(v_retries) r) > 100, 'retries are scattered, not a thundering herd';
    ASSERT NOT EXISTS (SELECT 1 FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id
                       WHERE q.name = 'fb-herd' AND (j.status <> 'scheduled' OR j.run_at NOT BETWEEN t0 AND t0 + interval '2 seconds')),
        'every job waits, scheduled within the window';
END;
$$;

-- The delay grows with the attempt: the third failure of a fixed/linear/exponential queue
-- waits at most base, 3 * base, 4 * base.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    v_kind text;
    v_job bigint;
    c record;
    f record;
    v_now timestamptz;
BEGIN
    v_worker := codity.register_worker('w-curve', p_now => t0);
    FOREACH v_kind IN ARRAY ARRAY['fixed', 'linear', 'exponential'] LOOP
        PERFORM codity.create_queue('fb-' || v_kind, p_max_attempts => 5, p_backoff => v_kind,
                                    p_base_delay_ms => 1000, p_max_delay_ms => 100000);
        v_job := (SELECT job_id FROM codity.enqueue('fb-' || v_kind, 't', p_now => t0));
        v_now := t0;
        FOR v_attempt IN 1..3 LOOP
            PERFORM codity.promote(v_now);
            SELECT * INTO c FROM codity.claim(v_worker, 'fb-' || v_kind, p_now => v_now);
            ASSERT c.job_id = v_job AND c.attempt = v_attempt, format('%s: attempt %s claimed', v_kind, v_attempt);
            PERFORM codity.start(c.job_id, c.fence, p_now => v_now);
            SELECT * INTO f FROM codity.fail(c.job_id, c.fence, 'nope', p_now => v_now);
            ASSERT f.job_status = 'scheduled', format('%s: attempt %s retries', v_kind, v_attempt);
            ASSERT f.retry_at - v_now <= CASE v_kind WHEN 'fixed' THEN interval '1 second'
                                                    WHEN 'linear' THEN make_interval(secs => v_attempt)
                                                    ELSE make_interval(secs => 2 ^ (v_attempt - 1)) END,
                format('%s: attempt %s waited %s', v_kind, v_attempt, f.retry_at - v_now);
            v_now := f.retry_at;
        END LOOP;
    END LOOP;
END;
$$;

-- The last attempt's failure dead-letters the job, copying task, payload, priority and reason.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    v_job bigint;
    c record;
    f record;
    d codity.dead_letters;
BEGIN
    PERFORM codity.create_queue('fb-dead', p_max_attempts => 2, p_backoff => 'fixed', p_base_delay_ms => 0, p_max_delay_ms => 0);
    v_worker := codity.register_worker('w-dead', p_now => t0);
    v_job := (SELECT job_id FROM codity.enqueue('fb-dead', 'charge', '{"amount": 5}', p_priority => 7, p_now => t0));

    SELECT * INTO c FROM codity.claim(v_worker, 'fb-dead', p_now => t0);
    PERFORM codity.start(c.job_id, c.fence, p_now => t0);
    SELECT * INTO f FROM codity.fail(c.job_id, c.fence, 'card declined (1)', p_now => t0);
    ASSERT f.job_status = 'scheduled' AND f.retry_at = t0, 'attempt 1 of 2 retries (zero delay)';
    ASSERT NOT EXISTS (SELECT 1 FROM codity.dead_letters WHERE job_id = v_job), 'no dead letter yet';

    PERFORM codity.promote(t0 + interval '1 second');
    SELECT * INTO c FROM codity.claim(v_worker, 'fb-dead', p_now => t0 + interval '1 second');
    ASSERT c.attempt = 2, 'the retry is attempt 2';
    PERFORM codity.start(c.job_id, c.fence, p_now => t0 + interval '1 second');
    SELECT * INTO f FROM codity.fail(c.job_id, c.fence, 'card declined (2)', p_now => t0 + interval '2 seconds');
    ASSERT f.accepted AND f.job_status = 'dead_letter' AND f.retry_at IS NULL, format('attempt 2 of 2 dead-letters: %s', f);
    ASSERT f.detail = 'failed: max attempts reached (2/2)', f.detail;

    ASSERT (SELECT status = 'dead_letter' AND finished_at = t0 + interval '2 seconds' AND lock_expires_at IS NULL
                   AND last_error = 'card declined (2)' AND attempt = 2
            FROM codity.jobs WHERE id = v_job), 'the job is dead-lettered';
    SELECT * INTO d FROM codity.dead_letters WHERE job_id = v_job;
    ASSERT d.id IS NOT NULL, 'a dead letter was written';
    ASSERT d.task = 'charge' AND d.payload = '{"amount": 5}' AND d.priority = 7, 'task, payload and priority copied';
    ASSERT d.reason = 'failed: max attempts reached (2/2)' AND d.error = 'card declined (2)', format('reason %s, error %s', d.reason, d.error);
    ASSERT d.attempts = 2 AND d.dead_at = t0 + interval '2 seconds' AND d.replayed_at IS NULL, 'attempts and time recorded';
    ASSERT d.queue_id = (SELECT id FROM codity.queues WHERE name = 'fb-dead'), 'the dead letter keeps its queue';
    ASSERT (SELECT count(*) FROM codity.job_executions WHERE job_id = v_job AND status = 'failed') = 2, 'two failed executions';
END;
$$;

-- A failure that is not retryable dead-letters at once, whatever attempts are left.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    c record;
    f record;
BEGIN
    PERFORM codity.create_queue('fb-fatal', p_max_attempts => 10);
    v_worker := codity.register_worker('w-fatal', p_now => t0);
    PERFORM codity.enqueue('fb-fatal', 'parse', '{"doc": 1}', p_now => t0);
    SELECT * INTO c FROM codity.claim(v_worker, 'fb-fatal', p_now => t0);
    PERFORM codity.start(c.job_id, c.fence, p_now => t0);
    SELECT * INTO f FROM codity.fail(c.job_id, c.fence, 'ValueError: bad document', p_retryable => false, p_now => t0);
    ASSERT f.job_status = 'dead_letter' AND f.detail = 'failed: not retryable', format('not retryable: %s', f);
    ASSERT (SELECT reason = 'failed: not retryable' AND attempts = 1 AND payload = '{"doc": 1}' AND error = 'ValueError: bad document'
            FROM codity.dead_letters WHERE job_id = c.job_id), 'dead letter after one attempt';
END;
$$;

-- Error text is kept, truncated to 8 KB; a NULL error still says something.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    c record;
BEGIN
    PERFORM codity.create_queue('fb-error', p_max_attempts => 5);
    v_worker := codity.register_worker('w-error', p_now => t0);
    PERFORM codity.enqueue('fb-error', 't', p_now => t0);
    SELECT * INTO c FROM codity.claim(v_worker, 'fb-error', p_now => t0);
    PERFORM codity.start(c.job_id, c.fence, p_now => t0);
    PERFORM codity.fail(c.job_id, c.fence, repeat('e', 20000), p_now => t0);
    ASSERT (SELECT length(error) FROM codity.job_executions WHERE job_id = c.job_id AND execution_seq = c.fence) = 8192,
        'the execution keeps 8 KB of error';
    ASSERT (SELECT length(last_error) FROM codity.jobs WHERE id = c.job_id) = 8192, 'so does the job';

    PERFORM codity.promote(t0 + interval '1 day');
    SELECT * INTO c FROM codity.claim(v_worker, 'fb-error', p_now => t0 + interval '1 day');
    PERFORM codity.start(c.job_id, c.fence, p_now => t0 + interval '1 day');
    PERFORM codity.fail(c.job_id, c.fence, NULL, p_now => t0 + interval '1 day');
    ASSERT (SELECT error FROM codity.job_executions WHERE job_id = c.job_id AND execution_seq = c.fence) = 'unknown error',
        'a NULL error is recorded as unknown';
END;
$$;
