-- codity.create_queue, codity.pause_queue / codity.resume_queue, codity.resume_all (queues).
--
-- Plain SQL that raises on failure; tests/test_sql_files.py runs the whole file in one call
-- in a fresh database (one transaction: time moves only through p_now). Schedules resumed by
-- resume_all are covered in schedules.sql.

-- A second project, so that names per project can be shown.
INSERT INTO codity.orgs (slug, name) VALUES ('acme', 'Acme');
INSERT INTO codity.projects (org_id, slug, name) SELECT id, 'acme-web', 'Acme web' FROM codity.orgs WHERE slug = 'acme';

-- create_queue with defaults: in the default project, with the documented policy.
DO $$
DECLARE
    r record;
    q codity.queues;
BEGIN
    SELECT * INTO r FROM codity.create_queue('q-defaults');
    ASSERT r.created, 'a new queue is created';
    SELECT * INTO q FROM codity.queues WHERE id = r.queue_id;
    ASSERT q.project_id = (SELECT id FROM codity.projects WHERE is_default), 'in the default project';
    ASSERT q.max_attempts = 3 AND q.backoff = 'exponential' AND q.base_delay_ms = 1000 AND q.max_delay_ms = 3600000
           AND q.lease_seconds = 30 AND q.max_crashes = 5 AND q.job_timeout_seconds IS NULL AND NOT q.is_paused,
        format('default policy: %s', q);
END;
$$;

-- Idempotent on name: a second call updates the policy of the same queue.
DO $$
DECLARE
    r1 record;
    r2 record;
    q codity.queues;
BEGIN
    SELECT * INTO r1 FROM codity.create_queue('q-policy', p_max_attempts => 5, p_backoff => 'fixed');
    SELECT * INTO r2 FROM codity.create_queue('q-policy', p_max_attempts => 8, p_backoff => 'linear', p_base_delay_ms => 200,
                                              p_max_delay_ms => 900, p_lease_seconds => 60, p_max_crashes => 2,
                                              p_job_timeout_seconds => 90);
    ASSERT r1.created AND NOT r2.created AND r1.queue_id = r2.queue_id, 'the same queue, not created twice';
    ASSERT (SELECT count(*) FROM codity.queues WHERE name = 'q-policy') = 1, 'one row';
    SELECT * INTO q FROM codity.queues WHERE id = r1.queue_id;
    ASSERT q.max_attempts = 8 AND q.backoff = 'linear' AND q.base_delay_ms = 200 AND q.max_delay_ms = 900
           AND q.lease_seconds = 60 AND q.max_crashes = 2 AND q.job_timeout_seconds = 90, format('policy updated: %s', q);
    -- Only what is passed changes: the rest of the tuning stays.
    PERFORM codity.create_queue('q-policy', p_max_attempts => 4);
    SELECT * INTO q FROM codity.queues WHERE id = r1.queue_id;
    ASSERT q.max_attempts = 4 AND q.backoff = 'linear' AND q.base_delay_ms = 200 AND q.max_delay_ms = 900
           AND q.lease_seconds = 60 AND q.max_crashes = 2 AND q.job_timeout_seconds = 90,
        format('only max_attempts changed: %s', q);
    PERFORM codity.create_queue('q-policy', p_job_timeout_seconds => 0);
    ASSERT (SELECT job_timeout_seconds IS NULL AND max_attempts = 4 FROM codity.queues WHERE id = r1.queue_id),
        '0 removes the timeout and nothing else';
END;
$$;

-- Queue names are per project.
DO $$
DECLARE
    v_acme bigint := (SELECT id FROM codity.projects WHERE slug = 'acme-web');
    r_default record;
    r_acme record;
    v_job bigint;
BEGIN
    SELECT * INTO r_default FROM codity.create_queue('emails');
    SELECT * INTO r_acme FROM codity.create_queue('emails', v_acme);
    ASSERT r_default.created AND r_acme.created AND r_default.queue_id <> r_acme.queue_id, 'two queues named emails';
    ASSERT (SELECT project_id FROM codity.queues WHERE id = r_acme.queue_id) = v_acme, 'in the named project';
    v_job := (SELECT job_id FROM codity.enqueue('emails', 't', p_project_id => v_acme));
    ASSERT (SELECT queue_id FROM codity.jobs WHERE id = v_job) = r_acme.queue_id, 'enqueue finds the queue of the named project';
END;
$$;

-- Every argument is checked, with a message naming it (CD010); an unknown project is CD002.
DO $$
DECLARE
    v_case record;
    v_before jsonb := pg_temp.codity_state();
    v_msg text;
BEGIN
    FOR v_case IN
        SELECT * FROM (VALUES
            ('SELECT * FROM codity.create_queue('''')', 'invalid queue name ''''', 'CD010'),
            ('SELECT * FROM codity.create_queue(''-dash'')', 'invalid queue name ''-dash''', 'CD010'),
            ('SELECT * FROM codity.create_queue(''has space'')', 'invalid queue name ''has space''', 'CD010'),
            ('SELECT * FROM codity.create_queue(repeat(''x'', 129))', 'invalid queue name %', 'CD010'),
            ('SELECT * FROM codity.create_queue(NULL)', 'invalid queue name NULL', 'CD010'),
            ('SELECT * FROM codity.create_queue(''q'', p_backoff => ''quadratic'')', 'backoff must be fixed, linear or exponential, got ''quadratic''', 'CD010'),
            ('SELECT * FROM codity.create_queue(''q'', p_max_attempts => 0)', 'max_attempts must be from 1 to 1000, got 0', 'CD010'),
            ('SELECT * FROM codity.create_queue(''q'', p_max_attempts => 1001)', 'max_attempts must be from 1 to 1000, got 1001', 'CD010'),
            ('SELECT * FROM codity.create_queue(''q'', p_base_delay_ms => -1)', 'base_delay_ms must not be negative, got -1', 'CD010'),
            ('SELECT * FROM codity.create_queue(''q'', p_base_delay_ms => 5000, p_max_delay_ms => 4999)', 'max_delay_ms must be at least base_delay_ms (5000), got 4999', 'CD010'),
            ('SELECT * FROM codity.create_queue(''q'', p_lease_seconds => 0)', 'lease_seconds must be from 1 to 86400, got 0', 'CD010'),
            ('SELECT * FROM codity.create_queue(''q'', p_lease_seconds => 86401)', 'lease_seconds must be from 1 to 86400, got 86401', 'CD010'),
            ('SELECT * FROM codity.create_queue(''q'', p_max_crashes => 0)', 'max_crashes must be from 1 to 1000, got 0', 'CD010'),
            ('SELECT * FROM codity.create_queue(''q'', p_job_timeout_seconds => -1)', 'job_timeout_seconds must be positive (or 0 for none), got -1', 'CD010'),
            ('SELECT * FROM codity.create_queue(''q-policy'', p_base_delay_ms => 5000)', 'max_delay_ms must be at least base_delay_ms (5000), got 900', 'CD010'),
            ('SELECT * FROM codity.create_queue(''q'', p_project_id => 987654)', 'project 987654 does not exist', 'CD002'),
            ('SELECT * FROM codity.create_queue(''q-policy'', p_max_attempts => 0)', 'max_attempts must be from 1 to 1000, got 0', 'CD010')
        ) AS c(call, message, sqlstate)
    LOOP
        BEGIN
            EXECUTE v_case.call;
            RAISE EXCEPTION 'expected % from %', v_case.sqlstate, v_case.call;
        EXCEPTION WHEN SQLSTATE 'CD010' OR SQLSTATE 'CD002' THEN
            GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
            ASSERT SQLSTATE = v_case.sqlstate, format('%s: expected %s, got %s', v_case.call, v_case.sqlstate, SQLSTATE);
            ASSERT v_msg LIKE v_case.message, format('%s: expected "%s", got "%s"', v_case.call, v_case.message, v_msg);
        END;
    END LOOP;
    ASSERT pg_temp.codity_state() = v_before, 'rejected calls wrote nothing, not even to an existing queue';
    -- The edges of every range are accepted.
    PERFORM codity.create_queue(repeat('x', 128), p_max_attempts => 1000, p_base_delay_ms => 0, p_max_delay_ms => 0,
                                p_lease_seconds => 86400, p_max_crashes => 1000, p_job_timeout_seconds => 1);
    PERFORM codity.create_queue('a.b:c_d-e', p_max_attempts => 1, p_lease_seconds => 1, p_max_crashes => 1);
END;
$$;

-- pause_queue / resume_queue: say whether anything changed, stop and restart claims.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
BEGIN
    PERFORM codity.create_queue('q-pause');
    v_worker := codity.register_worker('w-pause', p_now => t0);
    PERFORM codity.enqueue_many('q-pause', '[{"task": "a"}, {"task": "b"}]', p_now => t0);
    PERFORM codity.claim(v_worker, 'q-pause', p_now => t0);

    ASSERT codity.pause_queue('q-pause', p_now => t0 + interval '1 second'), 'pause returns true';
    ASSERT (SELECT is_paused AND paused_at = t0 + interval '1 second' FROM codity.queues WHERE name = 'q-pause'), 'paused';
    ASSERT NOT codity.pause_queue('q-pause', p_now => t0 + interval '2 seconds'), 'pausing again returns false';
    ASSERT (SELECT paused_at FROM codity.queues WHERE name = 'q-pause') = t0 + interval '1 second', 'the first pause time stays';
    ASSERT NOT EXISTS (SELECT 1 FROM codity.claim(v_worker, 'q-pause', 10, p_now => t0 + interval '3 seconds')), 'nothing claimed';
    ASSERT (SELECT count(*) FROM codity.jobs j JOIN codity.queues q ON q.id = j.queue_id
            WHERE q.name = 'q-pause' AND j.status = 'claimed') = 1, 'a job claimed before the pause is still held';

    ASSERT codity.resume_queue('q-pause', p_now => t0 + interval '4 seconds'), 'resume returns true';
    ASSERT (SELECT NOT is_paused AND paused_at IS NULL FROM codity.queues WHERE name = 'q-pause'), 'resumed';
    ASSERT NOT codity.resume_queue('q-pause', p_now => t0 + interval '5 seconds'), 'resuming again returns false';
    ASSERT (SELECT count(*) FROM codity.claim(v_worker, 'q-pause', 10, p_now => t0 + interval '6 seconds')) = 1, 'claims again';
END;
$$;

-- pause / resume of an unknown queue: CD001, nothing written.
DO $$
DECLARE
    v_before jsonb := pg_temp.codity_state();
    v_msg text;
BEGIN
    BEGIN
        PERFORM codity.pause_queue('q-nope');
        RAISE EXCEPTION 'expected CD001';
    EXCEPTION WHEN SQLSTATE 'CD001' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'queue "q-nope" does not exist', v_msg;
    END;
    BEGIN
        PERFORM codity.resume_queue('q-nope');
        RAISE EXCEPTION 'expected CD001';
    EXCEPTION WHEN SQLSTATE 'CD001' THEN
        NULL;
    END;
    ASSERT pg_temp.codity_state() = v_before, 'nothing written';
END;
$$;

-- resume_all: every paused queue of one project, or of all; returns the counts.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_acme bigint := (SELECT id FROM codity.projects WHERE slug = 'acme-web');
    r record;
    v_msg text;
BEGIN
    PERFORM codity.create_queue('ra-1');
    PERFORM codity.create_queue('ra-2');
    PERFORM codity.create_queue('ra-acme', v_acme);
    PERFORM codity.pause_queue('ra-1', p_now => t0);
    PERFORM codity.pause_queue('ra-2', p_now => t0);
    PERFORM codity.pause_queue('ra-acme', v_acme, p_now => t0);

    SELECT * INTO r FROM codity.resume_all(v_acme, p_now => t0 + interval '1 second');
    ASSERT r.queues_resumed = 1 AND r.schedules_resumed = 0, format('one project: %s', r);
    ASSERT (SELECT NOT is_paused FROM codity.queues WHERE name = 'ra-acme'), 'the project''s queue resumed';
    ASSERT (SELECT bool_and(is_paused) FROM codity.queues WHERE name IN ('ra-1', 'ra-2')), 'the other project''s queues did not';

    SELECT * INTO r FROM codity.resume_all(p_now => t0 + interval '2 seconds');
    ASSERT r.queues_resumed = 2, format('all projects: %s', r);
    ASSERT NOT EXISTS (SELECT 1 FROM codity.queues WHERE is_paused), 'nothing is paused';
    ASSERT (SELECT queues_resumed FROM codity.resume_all()) = 0, 'nothing left to resume';
    BEGIN
        PERFORM codity.resume_all(987654);
        RAISE EXCEPTION 'expected CD002';
    EXCEPTION WHEN SQLSTATE 'CD002' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'project 987654 does not exist', v_msg;
    END;
END;
$$;
