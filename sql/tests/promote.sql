-- codity.promote: scheduled -> queued when run_at has come, per queue, with a limit.
--
-- Plain SQL that raises on failure; tests/test_sql_files.py runs the whole file in one call
-- in a fresh database (one transaction: time moves only through p_now). promote is global,
-- so each block works on a day of its own and leaves nothing due on a later day.

-- A delayed job is promoted at its run_at, not a moment before, and then claimable.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    v_job bigint;
BEGIN
    PERFORM codity.create_queue('promote-basic');
    v_worker := codity.register_worker('w-basic', p_now => t0);
    v_job := (SELECT job_id FROM codity.enqueue('promote-basic', 't', p_run_at => t0 + interval '1 minute', p_now => t0));
    ASSERT codity.promote(t0 + interval '59.999 seconds') = 0, 'not due yet';
    ASSERT (SELECT status FROM codity.jobs WHERE id = v_job) = 'scheduled', 'still scheduled';
    ASSERT codity.promote(t0 + interval '1 minute') = 1, 'due at run_at exactly';
    ASSERT (SELECT status = 'queued' AND run_at = t0 + interval '1 minute' AND updated_at = t0 + interval '1 minute'
            FROM codity.jobs WHERE id = v_job), 'queued, run_at kept';
    ASSERT codity.promote(t0 + interval '2 minutes') = 0, 'a promoted job is not promoted again';
    ASSERT (SELECT job_id FROM codity.claim(v_worker, 'promote-basic', p_now => t0 + interval '2 minutes')) = v_job,
        'the promoted job is claimable';
END;
$$;

-- One call promotes the due jobs of every queue and leaves the rest scheduled.
DO $$
DECLARE
    t0 timestamptz := '2030-01-02 12:00:00+00';
BEGIN
    PERFORM codity.create_queue('promote-a');
    PERFORM codity.create_queue('promote-b');
    PERFORM codity.enqueue_many('promote-a', jsonb_build_array(
        jsonb_build_object('task', 'soon', 'run_at', t0 + interval '1 second'),
        jsonb_build_object('task', 'soon', 'run_at', t0 + interval '2 seconds'),
        jsonb_build_object('task', 'late', 'run_at', t0 + interval '100 years')), p_now => t0);
    PERFORM codity.enqueue('promote-b', 'soon', p_run_at => t0 + interval '3 seconds', p_now => t0);
    ASSERT codity.promote(t0 + interval '10 seconds') = 3, 'three due jobs in two queues';
    ASSERT (SELECT array_agg(DISTINCT j.status::text) FROM codity.jobs j WHERE j.task = 'soon') = ARRAY['queued'], 'due jobs queued';
    ASSERT (SELECT status FROM codity.jobs WHERE task = 'late') = 'scheduled', 'the later job waits';
END;
$$;

-- p_limit caps the rows per queue and call; bad limit is CD010.
DO $$
DECLARE
    t0 timestamptz := '2030-01-03 12:00:00+00';
    v_msg text;
BEGIN
    PERFORM codity.create_queue('promote-limit');
    PERFORM codity.enqueue_many('promote-limit',
        (SELECT jsonb_agg(jsonb_build_object('task', 't', 'run_at', t0 + make_interval(secs => i))) FROM generate_series(1, 5) i),
        p_now => t0);
    ASSERT codity.promote(t0 + interval '1 minute', 2) = 2, 'limit 2 promotes 2';
    ASSERT (SELECT array_agg(extract(epoch FROM j.run_at - t0)::integer ORDER BY j.run_at) FROM codity.jobs j
            JOIN codity.queues q ON q.id = j.queue_id WHERE q.name = 'promote-limit' AND j.status = 'queued') = ARRAY[1, 2],
        'the earliest are promoted first';
    ASSERT codity.promote(t0 + interval '1 minute') = 3, 'the rest follow';
    BEGIN
        PERFORM codity.promote(t0, 0);
        RAISE EXCEPTION 'expected CD010';
    EXCEPTION WHEN SQLSTATE 'CD010' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'limit must be positive, got 0', v_msg;
    END;
END;
$$;

-- A retry waiting out its backoff is promoted like any delayed job.
DO $$
DECLARE
    t0 timestamptz := '2030-01-04 12:00:00+00';
    v_worker bigint;
    c record;
    f record;
BEGIN
    PERFORM codity.create_queue('promote-retry', p_backoff => 'fixed', p_base_delay_ms => 30000, p_max_delay_ms => 30000);
    v_worker := codity.register_worker('w-retry', p_now => t0);
    PERFORM codity.enqueue('promote-retry', 't', p_now => t0);
    SELECT * INTO c FROM codity.claim(v_worker, 'promote-retry', p_now => t0);
    PERFORM codity.start(c.job_id, c.fence, p_now => t0);
    SELECT * INTO f FROM codity.fail(c.job_id, c.fence, 'try later', p_now => t0);
    ASSERT codity.promote(f.retry_at) = 1, 'the retry is promoted at retry_at';
    SELECT * INTO c FROM codity.claim(v_worker, 'promote-retry', p_now => f.retry_at);
    ASSERT c.attempt = 2 AND c.fence = 2, 'and claimed as attempt 2';
END;
$$;

-- Cancelled scheduled jobs are not promoted.
DO $$
DECLARE
    t0 timestamptz := '2030-01-05 12:00:00+00';
    v_job bigint;
BEGIN
    PERFORM codity.create_queue('promote-cancelled');
    v_job := (SELECT job_id FROM codity.enqueue('promote-cancelled', 't', p_run_at => t0 + interval '1 second', p_now => t0));
    PERFORM codity.cancel(v_job, p_now => t0);
    ASSERT codity.promote(t0 + interval '1 minute') = 0, 'nothing to promote';
    ASSERT (SELECT status FROM codity.jobs WHERE id = v_job) = 'cancelled', 'still cancelled';
END;
$$;
