-- codity.register_worker, codity.deregister_worker, codity.sweep_workers (and the sweep + reap
-- of codity.tick).
--
-- Plain SQL that raises on failure; tests/test_sql_files.py runs the whole file in one call
-- in a fresh database (one transaction: time moves only through p_now). sweep_workers and
-- reap are global, so each block that uses them works on a day of its own and every worker
-- of an earlier day is long silent by then.

-- register_worker writes one active worker with what it was told.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    w codity.workers;
BEGIN
    PERFORM codity.create_queue('wk-emails');
    PERFORM codity.create_queue('wk-reports');
    v_worker := codity.register_worker('worker-1', ARRAY['wk-emails', 'wk-reports'], 8, 'host-a', 4242, p_now => t0);
    SELECT * INTO w FROM codity.workers WHERE id = v_worker;
    ASSERT w.name = 'worker-1' AND w.host = 'host-a' AND w.pid = 4242 AND w.capacity = 8, format('worker row: %s', w);
    ASSERT w.queues = ARRAY['wk-emails', 'wk-reports'], 'its queues are kept';
    ASSERT w.status = 'active' AND w.stopped_at IS NULL, 'it starts active';
    ASSERT w.started_at = t0 AND w.last_heartbeat_at = t0, 'registration counts as a heartbeat';
    ASSERT codity.register_worker('worker-1', p_now => t0) <> v_worker, 'a second registration is a new worker';
END;
$$;

-- Bad registrations: an unknown queue (CD001), capacity outside 1..10000 or no name (CD010).
DO $$
DECLARE
    v_before jsonb := pg_temp.codity_state();
    v_msg text;
    v_capacity integer;
BEGIN
    BEGIN
        PERFORM codity.register_worker('w', ARRAY['wk-emails', 'wk-typo']);
        RAISE EXCEPTION 'expected CD001';
    EXCEPTION WHEN SQLSTATE 'CD001' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'queue "wk-typo" does not exist', v_msg;
    END;
    FOREACH v_capacity IN ARRAY ARRAY[0, 10001] LOOP
        BEGIN
            PERFORM codity.register_worker('w', p_capacity => v_capacity);
            RAISE EXCEPTION 'expected CD010';
        EXCEPTION WHEN SQLSTATE 'CD010' THEN
            GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
            ASSERT v_msg = format('capacity must be from 1 to 10000, got %s', v_capacity), v_msg;
        END;
    END LOOP;
    BEGIN
        PERFORM codity.register_worker('');
        RAISE EXCEPTION 'expected CD010';
    EXCEPTION WHEN SQLSTATE 'CD010' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'worker name must be 1 to 200 characters', v_msg;
    END;
    BEGIN
        PERFORM codity.register_worker('w', ARRAY['wk-emails'], p_project_id => 987654);
        RAISE EXCEPTION 'expected CD002';
    EXCEPTION WHEN SQLSTATE 'CD002' THEN
        NULL;
    END;
    ASSERT pg_temp.codity_state() = v_before, 'rejected registrations wrote nothing';
END;
$$;

-- deregister_worker releases what the worker holds, attempt not charged, and stops it.
DO $$
DECLARE
    t0 timestamptz := '2030-01-02 12:00:00+00';
    v_worker bigint;
    v_bystander bigint;
    c1 record;
    c2 record;
    c3 record;
BEGIN
    PERFORM codity.create_queue('wk-drain');
    v_worker := codity.register_worker('w-drain', p_now => t0);
    v_bystander := codity.register_worker('w-bystander', p_now => t0);
    PERFORM codity.enqueue_many('wk-drain', '[{"task": "a"}, {"task": "b"}, {"task": "c"}]', p_now => t0);
    SELECT * INTO c1 FROM codity.claim(v_worker, 'wk-drain', p_now => t0);
    SELECT * INTO c2 FROM codity.claim(v_worker, 'wk-drain', p_now => t0);
    SELECT * INTO c3 FROM codity.claim(v_bystander, 'wk-drain', p_now => t0);
    PERFORM codity.start(c2.job_id, c2.fence, p_now => t0);

    ASSERT codity.deregister_worker(v_worker, p_now => t0 + interval '3 seconds') = 2, 'both held jobs released';
    ASSERT (SELECT bool_and(status = 'queued' AND attempt = 0 AND lock_expires_at IS NULL)
            FROM codity.jobs WHERE id IN (c1.job_id, c2.job_id)), 'queued again, attempt refunded';
    ASSERT (SELECT bool_and(status = 'released' AND attempt_refunded)
            FROM codity.job_executions WHERE job_id IN (c1.job_id, c2.job_id)), 'executions released';
    ASSERT (SELECT status FROM codity.jobs WHERE id = c3.job_id) = 'claimed', 'another worker''s job is untouched';
    ASSERT (SELECT status = 'stopped' AND stopped_at = t0 + interval '3 seconds' FROM codity.workers WHERE id = v_worker),
        'the worker is stopped';
    ASSERT codity.deregister_worker(v_worker, p_now => t0 + interval '4 seconds') = 0, 'deregistering twice is harmless';
    ASSERT (SELECT stopped_at FROM codity.workers WHERE id = v_worker) = t0 + interval '3 seconds', 'the first stop time stays';
END;
$$;

-- deregister of an unknown worker: CD004, nothing written.
DO $$
DECLARE
    v_before jsonb := pg_temp.codity_state();
    v_msg text;
BEGIN
    BEGIN
        PERFORM codity.deregister_worker(987654);
        RAISE EXCEPTION 'expected CD004';
    EXCEPTION WHEN SQLSTATE 'CD004' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'worker 987654 does not exist', v_msg;
    END;
    ASSERT pg_temp.codity_state() = v_before, 'nothing written';
END;
$$;

-- sweep_workers: silent for more than stale_after means dead, and the dead worker's leases
-- are cut to now, so the next reap requeues its jobs at once, long before they would expire.
DO $$
DECLARE
    t0 timestamptz := '2030-01-03 12:00:00+00';
    v_silent bigint;
    v_alive bigint;
    c_silent record;
    c_alive record;
    v_swept record;
BEGIN
    PERFORM codity.create_queue('wk-sweep', p_lease_seconds => 300);
    v_silent := codity.register_worker('w-silent', p_now => t0);
    v_alive := codity.register_worker('w-alive', p_now => t0);
    PERFORM codity.enqueue_many('wk-sweep', '[{"task": "a"}, {"task": "b"}]', p_now => t0);
    SELECT * INTO c_silent FROM codity.claim(v_silent, 'wk-sweep', p_now => t0);
    SELECT * INTO c_alive FROM codity.claim(v_alive, 'wk-sweep', p_now => t0);
    PERFORM codity.heartbeat(v_alive, ARRAY[c_alive.job_id], ARRAY[c_alive.fence], p_now => t0 + interval '10 seconds');

    ASSERT NOT EXISTS (SELECT 1 FROM codity.sweep_workers(t0 + interval '15 seconds') s WHERE s.worker_id IN (v_silent, v_alive)),
        'exactly 15 s of silence is not yet stale';
    ASSERT NOT EXISTS (SELECT 1 FROM codity.reap(t0 + interval '16 seconds') r WHERE r.job_id IN (c_silent.job_id, c_alive.job_id)),
        'without a sweep nothing is reaped: leases run 300 s';
    SELECT * INTO v_swept FROM codity.sweep_workers(t0 + interval '16 seconds') s WHERE s.worker_id IN (v_silent, v_alive);
    ASSERT v_swept.worker_id = v_silent AND v_swept.name = 'w-silent' AND v_swept.last_heartbeat_at = t0
           AND v_swept.jobs_expired = 1, format('the silent worker is swept: %s', v_swept);
    ASSERT (SELECT status = 'dead' AND stopped_at = t0 + interval '16 seconds' FROM codity.workers WHERE id = v_silent), 'dead';
    ASSERT (SELECT status FROM codity.workers WHERE id = v_alive) = 'active', 'the heartbeating worker is alive';
    ASSERT (SELECT lock_expires_at FROM codity.jobs WHERE id = c_silent.job_id) = t0 + interval '16 seconds', 'lease cut to now';
    ASSERT (SELECT lock_expires_at FROM codity.jobs WHERE id = c_alive.job_id) = t0 + interval '310 seconds', 'other lease kept';

    ASSERT (SELECT array_agg(r.job_id) FROM codity.reap(t0 + interval '16 seconds') r
            WHERE r.job_id IN (c_silent.job_id, c_alive.job_id)) = ARRAY[c_silent.job_id],
        'the reap right after the sweep requeues the dead worker''s job, 284 s before its lease would end';
    ASSERT (SELECT status = 'queued' AND attempt = 0 FROM codity.jobs WHERE id = c_silent.job_id), 'attempt refunded';
    ASSERT NOT EXISTS (SELECT 1 FROM codity.sweep_workers(t0 + interval '17 seconds') s WHERE s.worker_id = v_silent),
        'a dead worker is swept once';
END;
$$;

-- tick does the same in one call: sweep, then reap.
DO $$
DECLARE
    t0 timestamptz := '2030-01-04 12:00:00+00';
    v_worker bigint;
    c record;
    v_tick record;
BEGIN
    PERFORM codity.create_queue('wk-tick', p_lease_seconds => 300);
    v_worker := codity.register_worker('w-tick', p_now => t0);
    PERFORM codity.enqueue('wk-tick', 't', p_now => t0);
    SELECT * INTO c FROM codity.claim(v_worker, 'wk-tick', p_now => t0);
    SELECT * INTO v_tick FROM codity.tick(t0 + interval '20 seconds');
    ASSERT v_tick.workers_dead >= 1 AND v_tick.reaped >= 1 AND v_tick.dead_lettered = 0, format('tick: %s', v_tick);
    ASSERT (SELECT status FROM codity.jobs WHERE id = c.job_id) = 'queued', 'requeued within the same tick';
END;
$$;

-- A custom stale_after; a non-positive one is CD010.
DO $$
DECLARE
    t0 timestamptz := '2030-01-05 12:00:00+00';
    v_worker bigint;
    v_msg text;
BEGIN
    v_worker := codity.register_worker('w-patient', p_now => t0);
    ASSERT NOT EXISTS (SELECT 1 FROM codity.sweep_workers(t0 + interval '59 seconds', interval '1 minute') s
                       WHERE s.worker_id = v_worker), 'within a minute';
    ASSERT EXISTS (SELECT 1 FROM codity.sweep_workers(t0 + interval '61 seconds', interval '1 minute') s
                   WHERE s.worker_id = v_worker), 'past a minute';
    BEGIN
        PERFORM codity.sweep_workers(t0, interval '0');
        RAISE EXCEPTION 'expected CD010';
    EXCEPTION WHEN SQLSTATE 'CD010' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'stale_after must be a positive interval', v_msg;
    END;
END;
$$;
