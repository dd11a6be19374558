-- codity.create_schedule, codity.pause_schedule / codity.resume_schedule, codity.materialize_cron
-- (and the schedules half of codity.resume_all and codity.tick).
--
-- Plain SQL that raises on failure; tests/test_sql_files.py runs the whole file in one call
-- in a fresh database (one transaction: time moves only through p_now). materialize_cron is
-- global, so every block deletes its schedules when it is done; the cron arithmetic itself
-- is tested in cron_next.sql and tests/test_cron_oracle.py.

SELECT codity.create_queue('reports', p_max_attempts => 4);

-- create_schedule stores the schedule and its first run, computed in its time zone.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    r record;
    s codity.scheduled_jobs;
BEGIN
    SELECT * INTO r FROM codity.create_schedule('nightly', 'reports', '0 2 * * *', 'reports.nightly', '{"format": "pdf"}',
                                               'America/New_York', 5, p_now => t0);
    ASSERT r.created, 'a new schedule is created';
    ASSERT r.next_run_at = '2030-01-02 07:00:00+00', format('02:00 New York (EST) is 07:00 UTC, got %s', r.next_run_at);
    ASSERT r.next_run_at = codity.cron_next('0 2 * * *', t0, 'America/New_York'), 'the first run is cron_next from now';
    SELECT * INTO s FROM codity.scheduled_jobs WHERE id = r.schedule_id;
    ASSERT s.name = 'nightly' AND s.cron = '0 2 * * *' AND s.time_zone = 'America/New_York' AND s.task = 'reports.nightly',
        format('stored: %s', s);
    ASSERT s.payload = '{"format": "pdf"}' AND s.priority = 5 AND NOT s.is_paused, 'payload, priority, not paused';
    ASSERT s.queue_id = (SELECT id FROM codity.queues WHERE name = 'reports')
           AND s.project_id = (SELECT id FROM codity.projects WHERE is_default), 'in the queue''s project';
    ASSERT s.last_run_at IS NULL AND s.last_job_id IS NULL AND s.created_at = t0, 'never run';
    PERFORM codity.create_schedule('utc-default', 'reports', '0 3 * * *', 't', p_now => t0);
    ASSERT (SELECT time_zone FROM codity.scheduled_jobs WHERE name = 'utc-default') = 'UTC', 'the time zone defaults to UTC';
    DELETE FROM codity.scheduled_jobs;
END;
$$;

-- Idempotent on name: the same call changes nothing; a new expression recomputes the next
-- run from now; other changes keep it.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    r1 record;
    r2 record;
    r3 record;
    r4 record;
BEGIN
    SELECT * INTO r1 FROM codity.create_schedule('hourly', 'reports', '0 * * * *', 'reports.hourly', p_now => t0);
    SELECT * INTO r2 FROM codity.create_schedule('hourly', 'reports', '0 * * * *', 'reports.hourly', p_now => t0 + interval '3 hours');
    ASSERT NOT r2.created AND r2.schedule_id = r1.schedule_id, 'the same schedule';
    ASSERT r2.next_run_at = r1.next_run_at AND r1.next_run_at = t0 + interval '1 hour', 'an unchanged expression keeps its next run';
    SELECT * INTO r3 FROM codity.create_schedule('hourly', 'reports', '0 * * * *', 'reports.hourly', '{"v": 2}', p_priority => 9,
                                                p_now => t0 + interval '3 hours');
    ASSERT r3.next_run_at = r1.next_run_at, 'a new payload keeps the next run';
    ASSERT (SELECT payload = '{"v": 2}' AND priority = 9 FROM codity.scheduled_jobs WHERE id = r1.schedule_id), 'payload updated';
    SELECT * INTO r4 FROM codity.create_schedule('hourly', 'reports', '30 * * * *', 'reports.hourly', p_now => t0 + interval '3 hours');
    ASSERT r4.next_run_at = t0 + interval '3 hours 30 minutes', format('a new expression runs from now: %s', r4.next_run_at);
    ASSERT (SELECT count(*) FROM codity.scheduled_jobs WHERE name = 'hourly') = 1, 'one row';
    DELETE FROM codity.scheduled_jobs;
END;
$$;

-- Bad schedules: CD012 (cron), CD013 (time zone), CD001 (queue), CD010, CD011; nothing
-- written, and an existing schedule is left as it was.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_case record;
    v_before jsonb;
    v_msg text;
BEGIN
    PERFORM codity.create_schedule('keep-me', 'reports', '0 2 * * *', 't', p_now => t0);
    v_before := pg_temp.codity_state();
    FOR v_case IN
        SELECT * FROM (VALUES
            ('SELECT * FROM codity.create_schedule(''s'', ''reports'', ''every minute'', ''t'')', 'CD012', '%cron%'),
            ('SELECT * FROM codity.create_schedule(''s'', ''reports'', ''60 * * * *'', ''t'')', 'CD012', '%minute%60%'),
            ('SELECT * FROM codity.create_schedule(''s'', ''reports'', ''* 24 * * *'', ''t'')', 'CD012', '%hour%24%'),
            ('SELECT * FROM codity.create_schedule(''s'', ''reports'', ''* * * * * *'', ''t'')', 'CD012', '%6%'),
            ('SELECT * FROM codity.create_schedule(''s'', ''reports'', ''0 0 31 2 *'', ''t'')', 'CD012', '%never fires%'),
            ('SELECT * FROM codity.create_schedule(''s'', ''reports'', NULL, ''t'')', 'CD010', '%'),
            ('SELECT * FROM codity.create_schedule(''keep-me'', ''reports'', ''bad'', ''t'')', 'CD012', '%cron%'),
            ('SELECT * FROM codity.create_schedule(''s'', ''reports'', ''0 2 * * *'', ''t'', ''{}'', ''Mars/Olympus'')', 'CD013', '%"Mars/Olympus"%'),
            ('SELECT * FROM codity.create_schedule(''s'', ''reports'', ''0 2 * * *'', ''t'', ''{}'', ''EST5EDT,M3.2.0,M11.1.0'')', 'CD013', '%EST5EDT%'),
            ('SELECT * FROM codity.create_schedule(''keep-me'', ''reports'', ''0 2 * * *'', ''t'', ''{}'', ''Nowhere/Town'')', 'CD013', '%Nowhere/Town%'),
            ('SELECT * FROM codity.create_schedule(''s'', ''no-such-queue'', ''0 2 * * *'', ''t'')', 'CD001', '%"no-such-queue"%'),
            ('SELECT * FROM codity.create_schedule('''', ''reports'', ''0 2 * * *'', ''t'')', 'CD010', 'schedule name%'),
            ('SELECT * FROM codity.create_schedule(''s'', ''reports'', ''0 2 * * *'', '''')', 'CD010', 'task%'),
            ('SELECT * FROM codity.create_schedule(''s'', ''reports'', ''0 2 * * *'', ''t'', p_priority => 1001)', 'CD010', 'priority%1001'),
            ('SELECT * FROM codity.create_schedule(''s'', ''reports'', ''0 2 * * *'', ''t'', to_jsonb(repeat(''x'', 65535)))', 'CD011', '%65537 bytes%')
        ) AS c(call, sqlstate, message)
    LOOP
        BEGIN
            EXECUTE v_case.call;
            RAISE EXCEPTION 'expected an error from %', v_case.call USING ERRCODE = 'XX000';
        EXCEPTION WHEN SQLSTATE 'CD001' OR SQLSTATE 'CD010' OR SQLSTATE 'CD011' OR SQLSTATE 'CD012' OR SQLSTATE 'CD013' THEN
            GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
            ASSERT SQLSTATE = v_case.sqlstate,
                format('%s: expected %s, got %s (%s)', v_case.call, v_case.sqlstate, SQLSTATE, v_msg);
            ASSERT v_msg LIKE v_case.message, format('%s: expected "%s", got "%s"', v_case.call, v_case.message, v_msg);
        END;
    END LOOP;
    ASSERT pg_temp.codity_state() = v_before, 'rejected schedules wrote nothing, and keep-me is unchanged';
    DELETE FROM codity.scheduled_jobs;
END;
$$;

-- materialize_cron creates the due job once, copying the schedule, and moves next_run_at on.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_schedule bigint;
    v_due timestamptz;
    m record;
    j codity.jobs;
    s codity.scheduled_jobs;
BEGIN
    SELECT schedule_id, next_run_at INTO v_schedule, v_due
    FROM codity.create_schedule('every-15', 'reports', '*/15 * * * *', 'reports.tick', '{"n": 1}', p_priority => 3, p_now => t0);
    ASSERT v_due = t0 + interval '15 minutes', format('first run %s', v_due);
    ASSERT NOT EXISTS (SELECT 1 FROM codity.materialize_cron(v_due - interval '1 second')), 'not due yet';

    SELECT * INTO m FROM codity.materialize_cron(v_due + interval '7 seconds');
    ASSERT m.schedule_id = v_schedule AND m.due_at = v_due, format('materialised: %s', m);
    ASSERT m.next_run_at = t0 + interval '30 minutes', format('next run from now: %s', m.next_run_at);
    SELECT * INTO j FROM codity.jobs WHERE id = m.job_id;
    ASSERT j.status = 'queued' AND j.run_at = v_due AND j.task = 'reports.tick' AND j.payload = '{"n": 1}' AND j.priority = 3,
        format('the job copies the schedule: %s', j);
    ASSERT j.schedule_id = v_schedule AND j.max_attempts = 4, 'linked to its schedule, with the queue''s max_attempts';
    ASSERT j.idempotency_key = format('codity:cron:%s:%s', v_schedule, extract(epoch FROM v_due)::bigint), j.idempotency_key;
    SELECT * INTO s FROM codity.scheduled_jobs WHERE id = v_schedule;
    ASSERT s.last_run_at = v_due AND s.last_job_id = m.job_id AND s.next_run_at = m.next_run_at, format('schedule moved on: %s', s);

    ASSERT NOT EXISTS (SELECT 1 FROM codity.materialize_cron(v_due + interval '8 seconds')), 'one occurrence, one job';
    ASSERT (SELECT count(*) FROM codity.jobs WHERE schedule_id = v_schedule) = 1, 'exactly one job';
    DELETE FROM codity.scheduled_jobs;
END;
$$;

-- Missed runs fire once, not as a backlog: after an hour of downtime one job, and the next
-- run is the first occurrence after now.
DO $$
DECLARE
    t0 timestamptz := '2030-01-02 12:00:00+00';
    v_schedule bigint;
BEGIN
    v_schedule := (SELECT schedule_id FROM codity.create_schedule('every-minute', 'reports', '* * * * *', 't', p_now => t0));
    ASSERT (SELECT count(*) FROM codity.materialize_cron(t0 + interval '1 hour 30 seconds')) = 1, 'sixty missed runs fire once';
    ASSERT (SELECT next_run_at FROM codity.scheduled_jobs WHERE id = v_schedule) = t0 + interval '1 hour 1 minute',
        'the next run is computed from now, not from the stored next_run_at';
    ASSERT (SELECT count(*) FROM codity.materialize_cron(t0 + interval '1 hour 45 seconds')) = 0, 'and nothing more until then';
    ASSERT (SELECT count(*) FROM codity.jobs WHERE schedule_id = v_schedule) = 1, 'one job in all';
    DELETE FROM codity.scheduled_jobs;
END;
$$;

-- The idempotency key is a second wall: materialising an occurrence again inserts nothing.
DO $$
DECLARE
    t0 timestamptz := '2030-01-03 12:00:00+00';
    v_schedule bigint;
    v_due timestamptz;
    v_first bigint;
BEGIN
    SELECT schedule_id, next_run_at INTO v_schedule, v_due
    FROM codity.create_schedule('twice', 'reports', '0 * * * *', 't', p_now => t0);
    v_first := (SELECT job_id FROM codity.materialize_cron(v_due));
    -- Pretend a second scheduler saw the old next_run_at (as if the first had not moved it).
    UPDATE codity.scheduled_jobs SET next_run_at = v_due WHERE id = v_schedule;
    ASSERT NOT EXISTS (SELECT 1 FROM codity.materialize_cron(v_due)), 'the repeat inserts no job';
    ASSERT (SELECT array_agg(id) FROM codity.jobs WHERE schedule_id = v_schedule) = ARRAY[v_first], 'one job for the occurrence';
    ASSERT (SELECT last_job_id = v_first AND next_run_at = v_due + interval '1 hour' FROM codity.scheduled_jobs WHERE id = v_schedule),
        'the schedule still moves on and keeps its last job';
    DELETE FROM codity.scheduled_jobs;
END;
$$;

-- pause_schedule / resume_schedule: a paused schedule does not fire; resuming starts from
-- the next occurrence after now, not from the ones slept through.
DO $$
DECLARE
    t0 timestamptz := '2030-01-04 12:00:00+00';
    v_schedule bigint;
    v_msg text;
    v_before jsonb;
BEGIN
    v_schedule := (SELECT schedule_id FROM codity.create_schedule('napper', 'reports', '*/10 * * * *', 't', p_now => t0));
    ASSERT codity.pause_schedule('napper', p_now => t0), 'pause returns true';
    ASSERT NOT codity.pause_schedule('napper', p_now => t0), 'pausing again returns false';
    ASSERT NOT EXISTS (SELECT 1 FROM codity.materialize_cron(t0 + interval '1 hour')), 'a paused schedule does not fire';
    ASSERT codity.resume_schedule('napper', p_now => t0 + interval '1 hour 3 minutes'), 'resume returns true';
    ASSERT NOT codity.resume_schedule('napper', p_now => t0 + interval '1 hour 3 minutes'), 'resuming again returns false';
    ASSERT (SELECT NOT is_paused AND next_run_at = t0 + interval '1 hour 10 minutes' FROM codity.scheduled_jobs WHERE id = v_schedule),
        'resumed from the next occurrence after now';
    ASSERT NOT EXISTS (SELECT 1 FROM codity.materialize_cron(t0 + interval '1 hour 5 minutes')), 'no backlog after a resume';

    v_before := pg_temp.codity_state();
    BEGIN
        PERFORM codity.pause_schedule('nope');
        RAISE EXCEPTION 'expected CD006';
    EXCEPTION WHEN SQLSTATE 'CD006' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'schedule "nope" does not exist', v_msg;
    END;
    BEGIN
        PERFORM codity.resume_schedule('nope');
        RAISE EXCEPTION 'expected CD006';
    EXCEPTION WHEN SQLSTATE 'CD006' THEN
        NULL;
    END;
    BEGIN
        PERFORM codity.pause_schedule('napper', 987654);
        RAISE EXCEPTION 'expected CD002';
    EXCEPTION WHEN SQLSTATE 'CD002' THEN
        NULL;
    END;
    ASSERT pg_temp.codity_state() = v_before, 'nothing written';
    DELETE FROM codity.scheduled_jobs;
END;
$$;

-- resume_all resumes paused schedules too, from their next occurrence after now.
DO $$
DECLARE
    t0 timestamptz := '2030-01-05 12:00:00+00';
    r record;
BEGIN
    PERFORM codity.create_schedule('ra-a', 'reports', '0 * * * *', 't', p_now => t0);
    PERFORM codity.create_schedule('ra-b', 'reports', '0 * * * *', 't', p_now => t0);
    PERFORM codity.create_schedule('ra-live', 'reports', '0 * * * *', 't', p_now => t0);
    PERFORM codity.pause_schedule('ra-a', p_now => t0);
    PERFORM codity.pause_schedule('ra-b', p_now => t0);
    SELECT * INTO r FROM codity.resume_all(p_now => t0 + interval '5 hours 20 minutes');
    ASSERT r.schedules_resumed = 2, format('two schedules resumed: %s', r);
    ASSERT (SELECT bool_and(NOT is_paused AND next_run_at = t0 + interval '6 hours') FROM codity.scheduled_jobs
            WHERE name IN ('ra-a', 'ra-b')), 'from the next occurrence after now';
    ASSERT (SELECT next_run_at FROM codity.scheduled_jobs WHERE name = 'ra-live') = t0 + interval '1 hour',
        'a schedule that was not paused is untouched';
    DELETE FROM codity.scheduled_jobs;
END;
$$;

-- A paused queue still gets its cron jobs (they wait); tick materialises; bad limit is CD010.
DO $$
DECLARE
    t0 timestamptz := '2030-01-06 12:00:00+00';
    v_schedule bigint;
    v_worker bigint;
    v_tick record;
    v_msg text;
BEGIN
    PERFORM codity.create_queue('paused-reports');
    PERFORM codity.pause_queue('paused-reports', p_now => t0);
    v_schedule := (SELECT schedule_id FROM codity.create_schedule('into-paused', 'paused-reports', '0 * * * *', 't', p_now => t0));
    SELECT * INTO v_tick FROM codity.tick(t0 + interval '1 hour');
    ASSERT v_tick.materialized = 1, format('tick materialised the due schedule: %s', v_tick);
    ASSERT (SELECT status FROM codity.jobs WHERE schedule_id = v_schedule) = 'queued', 'the job waits in the paused queue';
    v_worker := codity.register_worker('w-cron', p_now => t0 + interval '1 hour');
    ASSERT NOT EXISTS (SELECT 1 FROM codity.claim(v_worker, 'paused-reports', p_now => t0 + interval '1 hour')), 'not handed out';
    BEGIN
        PERFORM codity.materialize_cron(t0, 0);
        RAISE EXCEPTION 'expected CD010';
    EXCEPTION WHEN SQLSTATE 'CD010' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'limit must be positive, got 0', v_msg;
    END;
    DELETE FROM codity.scheduled_jobs;
END;
$$;

-- Schedule names are per project.
DO $$
DECLARE
    t0 timestamptz := '2030-01-07 12:00:00+00';
    v_other bigint;
    r1 record;
    r2 record;
BEGIN
    INSERT INTO codity.orgs (slug, name) VALUES ('sched-org', 'Sched org');
    INSERT INTO codity.projects (org_id, slug, name) SELECT id, 'sched-project', 'Sched' FROM codity.orgs WHERE slug = 'sched-org'
    RETURNING id INTO v_other;
    PERFORM codity.create_queue('reports', v_other);
    SELECT * INTO r1 FROM codity.create_schedule('nightly', 'reports', '0 2 * * *', 't', p_now => t0);
    SELECT * INTO r2 FROM codity.create_schedule('nightly', 'reports', '0 2 * * *', 't', p_project_id => v_other, p_now => t0);
    ASSERT r1.created AND r2.created AND r1.schedule_id <> r2.schedule_id, 'two schedules named nightly';
    ASSERT (SELECT project_id FROM codity.scheduled_jobs WHERE id = r2.schedule_id) = v_other, 'in the named project';
    ASSERT codity.pause_schedule('nightly', v_other, p_now => t0), 'paused in its project';
    ASSERT (SELECT NOT is_paused FROM codity.scheduled_jobs WHERE id = r1.schedule_id), 'the other project''s schedule runs on';
    DELETE FROM codity.scheduled_jobs;
END;
$$;
