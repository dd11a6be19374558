-- codity.heartbeat: liveness, lease extension, and what it tells the worker (extended,
-- cancelled, lost).
--
-- Plain SQL that raises on failure; tests/test_sql_files.py runs the whole file in one call
-- in a fresh database (one transaction: time moves only through p_now). reap and
-- sweep_workers are global, so each block that uses them works on a day of its own.

-- An empty heartbeat records liveness only; an out-of-order older one never moves it back.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
BEGIN
    v_worker := codity.register_worker('w-alive', p_now => t0);
    ASSERT NOT EXISTS (SELECT 1 FROM codity.heartbeat(v_worker, p_now => t0 + interval '5 seconds')), 'no jobs, no rows';
    ASSERT (SELECT last_heartbeat_at FROM codity.workers WHERE id = v_worker) = t0 + interval '5 seconds', 'liveness recorded';
    PERFORM codity.heartbeat(v_worker, p_now => t0 + interval '2 seconds');
    ASSERT (SELECT last_heartbeat_at FROM codity.workers WHERE id = v_worker) = t0 + interval '5 seconds',
        'a delayed older heartbeat does not move liveness back';
END;
$$;

-- Each listed job the worker still holds with that fence is extended to now + lease; a
-- lease is never shortened.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    c1 record;
    c2 record;
    v_states text[];
BEGIN
    PERFORM codity.create_queue('hb-extend', p_lease_seconds => 30);
    v_worker := codity.register_worker('w-extend', p_now => t0);
    PERFORM codity.enqueue_many('hb-extend', '[{"task": "a"}, {"task": "b"}]', p_now => t0);
    SELECT * INTO c1 FROM codity.claim(v_worker, 'hb-extend', p_now => t0);
    SELECT * INTO c2 FROM codity.claim(v_worker, 'hb-extend', p_now => t0);
    PERFORM codity.start(c2.job_id, c2.fence, p_now => t0);

    SELECT array_agg(h.state ORDER BY h.job_id) INTO v_states
    FROM codity.heartbeat(v_worker, ARRAY[c1.job_id, c2.job_id], ARRAY[c1.fence, c2.fence], p_now => t0 + interval '5 seconds') h;
    ASSERT v_states = ARRAY['extended', 'extended'], format('both extended: %s', v_states);
    ASSERT (SELECT bool_and(lock_expires_at = t0 + interval '35 seconds' AND updated_at = t0 + interval '5 seconds')
            FROM codity.jobs WHERE id IN (c1.job_id, c2.job_id)), 'leases run to now + lease_seconds';
    ASSERT (SELECT status FROM codity.jobs WHERE id = c2.job_id) = 'running', 'a running job keeps running';

    PERFORM codity.heartbeat(v_worker, ARRAY[c1.job_id], ARRAY[c1.fence], p_now => t0 + interval '1 second');
    ASSERT (SELECT lock_expires_at FROM codity.jobs WHERE id = c1.job_id) = t0 + interval '35 seconds',
        'an older heartbeat does not shorten the lease';
END;
$$;

-- Rows come back in the order asked, and say extended, cancelled, done or lost.
DO $$
DECLARE
    t0 timestamptz := '2030-01-02 12:00:00+00';
    v_me bigint;
    v_other bigint;
    c_ok record;
    c_cancelled record;
    c_reaped record;
    c_done record;
    c_theirs record;
    v_got text;
    v_expected text;
BEGIN
    PERFORM codity.create_queue('hb-states', p_lease_seconds => 30);
    PERFORM codity.create_queue('hb-states-short', p_lease_seconds => 5);
    v_me := codity.register_worker('w-me', p_now => t0);
    v_other := codity.register_worker('w-other', p_now => t0);
    PERFORM codity.enqueue_many('hb-states', '[{"task": "ok"}, {"task": "cancelled"}, {"task": "done"}, {"task": "theirs"}]', p_now => t0);
    PERFORM codity.enqueue('hb-states-short', 'reaped', p_now => t0);
    SELECT * INTO c_ok FROM codity.claim(v_me, 'hb-states', p_now => t0);
    SELECT * INTO c_cancelled FROM codity.claim(v_me, 'hb-states', p_now => t0);
    SELECT * INTO c_done FROM codity.claim(v_me, 'hb-states', p_now => t0);
    SELECT * INTO c_theirs FROM codity.claim(v_other, 'hb-states', p_now => t0);
    SELECT * INTO c_reaped FROM codity.claim(v_me, 'hb-states-short', p_now => t0);

    PERFORM codity.cancel(c_cancelled.job_id, p_now => t0 + interval '1 second');
    PERFORM codity.start(c_done.job_id, c_done.fence, p_now => t0);
    PERFORM codity.complete(c_done.job_id, c_done.fence, p_now => t0 + interval '2 seconds');
    PERFORM codity.reap(t0 + interval '6 seconds');

    SELECT string_agg(h.job_id || '=' || h.state || '@' || h.fence, ' ' ORDER BY ord) INTO v_got
    FROM (SELECT h.*, row_number() OVER () AS ord
          FROM codity.heartbeat(v_me,
              ARRAY[c_reaped.job_id, c_ok.job_id, c_theirs.job_id, c_cancelled.job_id, c_done.job_id, 987654],
              ARRAY[c_reaped.fence, c_ok.fence, c_theirs.fence, c_cancelled.fence, c_done.fence, 1],
              p_now => t0 + interval '7 seconds') h) h;
    v_expected := format('%s=lost@1 %s=extended@1 %s=lost@1 %s=cancelled@1 %s=done@1 987654=lost@1',
                         c_reaped.job_id, c_ok.job_id, c_theirs.job_id, c_cancelled.job_id, c_done.job_id);
    ASSERT v_got = v_expected, format('got %s, expected %s', v_got, v_expected);

    ASSERT (SELECT lock_expires_at FROM codity.jobs WHERE id = c_theirs.job_id) = t0 + interval '30 seconds',
        'another worker''s job is not extended by my heartbeat';
    ASSERT (SELECT array_agg(f.job_id ORDER BY f.job_id) FROM codity.fence_rejections f WHERE f.call = 'heartbeat')
           = (SELECT array_agg(x ORDER BY x) FROM unnest(ARRAY[c_reaped.job_id, c_theirs.job_id]) x),
        'lost jobs that exist are recorded as stale heartbeats; cancelled, done and unknown ones are not';
END;
$$;

-- A worker declared dead that heartbeats again is active again, but what was reaped stays lost.
DO $$
DECLARE
    t0 timestamptz := '2030-01-03 12:00:00+00';
    v_worker bigint;
    c record;
    h record;
BEGIN
    PERFORM codity.create_queue('hb-revive', p_lease_seconds => 30);
    v_worker := codity.register_worker('w-frozen', p_now => t0);
    PERFORM codity.enqueue('hb-revive', 't', p_now => t0);
    SELECT * INTO c FROM codity.claim(v_worker, 'hb-revive', p_now => t0);
    ASSERT (SELECT count(*) FROM codity.sweep_workers(t0 + interval '16 seconds') s WHERE s.worker_id = v_worker) = 1, 'declared dead';
    PERFORM codity.reap(t0 + interval '16 seconds');
    ASSERT (SELECT status FROM codity.jobs WHERE id = c.job_id) = 'queued', 'its job was requeued';

    SELECT * INTO h FROM codity.heartbeat(v_worker, ARRAY[c.job_id], ARRAY[c.fence], p_now => t0 + interval '20 seconds');
    ASSERT h.state = 'lost', 'the reaped job is lost';
    ASSERT (SELECT status = 'active' AND stopped_at IS NULL AND last_heartbeat_at = t0 + interval '20 seconds'
            FROM codity.workers WHERE id = v_worker), 'the worker is active again';
    ASSERT (SELECT count(*) FROM codity.claim(v_worker, 'hb-revive', p_now => t0 + interval '21 seconds')) = 1,
        'and may claim again';
END;
$$;

-- Bad input: arrays of different length or with a NULL (CD010), unknown worker (CD004), a
-- deregistered worker (CD005). Nothing is written.
DO $$
DECLARE
    t0 timestamptz := '2030-01-04 12:00:00+00';
    v_worker bigint;
    v_stopped bigint;
    c record;
    v_before jsonb;
    v_msg text;
BEGIN
    PERFORM codity.create_queue('hb-bad');
    v_worker := codity.register_worker('w-bad', p_now => t0);
    v_stopped := codity.register_worker('w-gone', p_now => t0);
    PERFORM codity.deregister_worker(v_stopped, p_now => t0);
    PERFORM codity.enqueue('hb-bad', 't', p_now => t0);
    SELECT * INTO c FROM codity.claim(v_worker, 'hb-bad', p_now => t0);
    v_before := pg_temp.codity_state();
    BEGIN
        PERFORM codity.heartbeat(v_worker, ARRAY[c.job_id, c.job_id], ARRAY[c.fence], p_now => t0 + interval '1 second');
        RAISE EXCEPTION 'expected CD010';
    EXCEPTION WHEN SQLSTATE 'CD010' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'job ids and fences differ in length (2 and 1)', v_msg;
    END;
    BEGIN
        PERFORM codity.heartbeat(v_worker, ARRAY[c.job_id], NULL, p_now => t0 + interval '1 second');
        RAISE EXCEPTION 'expected CD010';
    EXCEPTION WHEN SQLSTATE 'CD010' THEN
        NULL;
    END;
    BEGIN
        PERFORM codity.heartbeat(v_worker, ARRAY[c.job_id], ARRAY[NULL]::integer[], p_now => t0 + interval '1 second');
        RAISE EXCEPTION 'expected CD010';
    EXCEPTION WHEN SQLSTATE 'CD010' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'job ids and fences must not contain NULL', v_msg;
    END;
    BEGIN
        PERFORM codity.heartbeat(987654, p_now => t0 + interval '1 second');
        RAISE EXCEPTION 'expected CD004';
    EXCEPTION WHEN SQLSTATE 'CD004' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'worker 987654 does not exist', v_msg;
    END;
    BEGIN
        PERFORM codity.heartbeat(v_stopped, p_now => t0 + interval '1 second');
        RAISE EXCEPTION 'expected CD005';
    EXCEPTION WHEN SQLSTATE 'CD005' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = format('worker %s has deregistered', v_stopped), v_msg;
    END;
    ASSERT pg_temp.codity_state() = v_before, 'rejected heartbeats wrote nothing';
END;
$$;
