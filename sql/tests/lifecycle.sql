-- The lifecycle: the transition table, start / complete / fail / release, fencing.
--
-- Plain SQL that raises on failure; tests/test_sql_files.py runs the whole file in one call
-- in a fresh database (one transaction: time moves only through p_now). Every block uses a
-- queue of its own. Backoff and dead-lettering by fail: fail_backoff.sql; reap: reap.sql.

-- The table of allowed transitions is the seed's state diagram plus cancel, the three ways
-- out of a workflow node's waiting (migration 0037), and the operator's workflow actions
-- (migration 0038: retry_workflow runs a finished node again, skip_node marks one done),
-- nothing more.
DO $$
DECLARE
    v_missing text;
    v_extra text;
BEGIN
    WITH expected(from_status, to_status) AS (VALUES
        ('scheduled', 'queued'), ('queued', 'claimed'), ('claimed', 'running'),
        ('running', 'completed'), ('running', 'failed'), ('failed', 'scheduled'),
        ('failed', 'dead_letter'), ('claimed', 'queued'), ('running', 'queued'),
        ('claimed', 'dead_letter'), ('running', 'dead_letter'), ('dead_letter', 'queued'),
        ('scheduled', 'cancelled'), ('queued', 'cancelled'), ('claimed', 'cancelled'),
        ('running', 'cancelled'), ('waiting', 'queued'), ('waiting', 'scheduled'),
        ('waiting', 'cancelled'),
        ('completed', 'waiting'), ('completed', 'queued'), ('dead_letter', 'waiting'),
        ('cancelled', 'waiting'), ('cancelled', 'queued'), ('waiting', 'completed'),
        ('scheduled', 'completed'), ('queued', 'completed'), ('dead_letter', 'completed'),
        ('cancelled', 'completed'))
    SELECT (SELECT string_agg(e.from_status || '->' || e.to_status, ', ') FROM expected e
            WHERE NOT EXISTS (SELECT 1 FROM codity.job_transitions t
                              WHERE t.from_status::text = e.from_status AND t.to_status::text = e.to_status)),
           (SELECT string_agg(t.from_status || '->' || t.to_status, ', ') FROM codity.job_transitions t
            WHERE NOT EXISTS (SELECT 1 FROM expected e
                              WHERE t.from_status::text = e.from_status AND t.to_status::text = e.to_status))
    INTO v_missing, v_extra;
    ASSERT v_missing IS NULL, format('transitions missing: %s', v_missing);
    ASSERT v_extra IS NULL, format('transitions nobody reviewed: %s', v_extra);
    -- For a plain job completed and cancelled are final: only the workflow actions, which
    -- touch nothing but the nodes of the workflow they are given, lead out of them.
    ASSERT NOT EXISTS (SELECT 1 FROM codity.job_transitions
                       WHERE from_status IN ('completed', 'cancelled')
                         AND by_what NOT LIKE 'retry_workflow:%' AND by_what NOT LIKE 'skip_node:%'),
        'completed and cancelled are final but for the workflow actions';
END;
$$;

-- codity._check_transition allows exactly the table's pairs; every other pair is CD020
-- naming both states.
DO $$
DECLARE
    v_from codity.job_status;
    v_to codity.job_status;
    v_allowed boolean;
    v_msg text;
    v_detail text;
    v_checked integer := 0;
BEGIN
    FOREACH v_from IN ARRAY enum_range(NULL::codity.job_status) LOOP
        FOREACH v_to IN ARRAY enum_range(NULL::codity.job_status) LOOP
            v_allowed := EXISTS (SELECT 1 FROM codity.job_transitions t WHERE t.from_status = v_from AND t.to_status = v_to);
            BEGIN
                PERFORM codity._check_transition(v_from, v_to, 77);
                ASSERT v_allowed, format('%s -> %s is not in the table but was allowed', v_from, v_to);
            EXCEPTION WHEN SQLSTATE 'CD020' THEN
                GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL;
                ASSERT NOT v_allowed, format('%s -> %s is in the table but was refused', v_from, v_to);
                ASSERT v_msg = format('illegal transition from %s to %s', v_from, v_to), v_msg;
                ASSERT v_detail = format('Job 77 is %s.', v_from), v_detail;
            END;
            v_checked := v_checked + 1;
        END LOOP;
    END LOOP;
    ASSERT v_checked = 81, format('checked %s pairs', v_checked);  -- 9 states, waiting among them
END;
$$;

-- start: claimed -> running, on the job (the attempt's execution row is written when it ends).
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    c record;
    r record;
BEGIN
    PERFORM codity.create_queue('lc-start');
    v_worker := codity.register_worker('w-start', p_now => t0);
    PERFORM codity.enqueue('lc-start', 't', p_now => t0);
    SELECT * INTO c FROM codity.claim(v_worker, 'lc-start', p_now => t0);
    SELECT * INTO r FROM codity.start(c.job_id, c.fence, p_now => t0 + interval '1 second');
    ASSERT r.accepted AND r.job_status = 'running' AND r.detail = 'started', format('start: %s', r);
    ASSERT (SELECT status = 'running' AND started_at = t0 + interval '1 second' AND lock_expires_at = c.lease_expires_at
            FROM codity.jobs WHERE id = c.job_id), 'the job runs, its lease unchanged';
    ASSERT (SELECT status = 'running' AND started_at = t0 + interval '1 second' AND finished_at IS NULL
            FROM codity.execution_overview WHERE job_id = c.job_id AND fence = c.fence), 'the attempt runs';
END;
$$;

-- complete: running -> completed; the lease is dropped and the result kept on the execution.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    c record;
    r record;
BEGIN
    PERFORM codity.create_queue('lc-complete');
    v_worker := codity.register_worker('w-complete', p_now => t0);
    PERFORM codity.enqueue('lc-complete', 't', p_now => t0);
    SELECT * INTO c FROM codity.claim(v_worker, 'lc-complete', p_now => t0);
    PERFORM codity.start(c.job_id, c.fence, p_now => t0);
    SELECT * INTO r FROM codity.complete(c.job_id, c.fence, '{"sent": true}', p_now => t0 + interval '2 seconds');
    ASSERT r.accepted AND r.job_status = 'completed', format('complete: %s', r);
    ASSERT (SELECT status = 'completed' AND finished_at = t0 + interval '2 seconds' AND lock_expires_at IS NULL
                   AND attempt = 1
            FROM codity.jobs WHERE id = c.job_id), 'the job is completed and holds no lease';
    ASSERT (SELECT status = 'completed' AND finished_at = t0 + interval '2 seconds' AND result = '{"sent": true}'
                   AND NOT attempt_refunded
            FROM codity.job_executions WHERE job_id = c.job_id AND execution_seq = c.fence), 'the execution is closed with the result';
END;
$$;

-- fail (retryable, attempts left): running -> failed -> scheduled, the error kept.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    c record;
    r record;
BEGIN
    PERFORM codity.create_queue('lc-fail', p_max_attempts => 3, p_backoff => 'fixed', p_base_delay_ms => 10000, p_max_delay_ms => 10000);
    v_worker := codity.register_worker('w-fail', p_now => t0);
    PERFORM codity.enqueue('lc-fail', 't', p_now => t0);
    SELECT * INTO c FROM codity.claim(v_worker, 'lc-fail', p_now => t0);
    PERFORM codity.start(c.job_id, c.fence, p_now => t0);
    SELECT * INTO r FROM codity.fail(c.job_id, c.fence, 'SMTPError: 451', p_now => t0);
    ASSERT r.accepted AND r.job_status = 'scheduled', format('fail: %s', r);
    ASSERT r.retry_at BETWEEN t0 AND t0 + interval '10 seconds', format('retry within the backoff, got %s', r.retry_at);
    ASSERT r.detail = 'retry 2 of 3 scheduled', r.detail;
    ASSERT (SELECT status = 'scheduled' AND run_at = r.retry_at AND lock_expires_at IS NULL AND last_error = 'SMTPError: 451'
                   AND attempt = 1 AND finished_at IS NULL
            FROM codity.jobs WHERE id = c.job_id), 'the job waits for its retry, the attempt stays charged';
    ASSERT (SELECT status = 'failed' AND error = 'SMTPError: 451' AND finished_at = t0
            FROM codity.job_executions WHERE job_id = c.job_id AND execution_seq = c.fence), 'the execution failed';
END;
$$;

-- release, from claimed and from running: back to queued, the attempt refunded.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    c record;
    r record;
BEGIN
    PERFORM codity.create_queue('lc-release');
    v_worker := codity.register_worker('w-release', p_now => t0);
    PERFORM codity.enqueue('lc-release', 't', p_now => t0);

    SELECT * INTO c FROM codity.claim(v_worker, 'lc-release', p_now => t0);
    SELECT * INTO r FROM codity.release(c.job_id, c.fence, p_now => t0 + interval '1 second');
    ASSERT r.accepted AND r.job_status = 'queued' AND r.detail = 'released; attempt not charged', format('release: %s', r);
    ASSERT (SELECT status = 'queued' AND attempt = 0 AND lock_expires_at IS NULL AND crash_count = 0
            FROM codity.jobs WHERE id = c.job_id), 'released from claimed: queued, attempt 0';
    ASSERT (SELECT status = 'released' AND attempt_refunded AND finished_at = t0 + interval '1 second'
            FROM codity.job_executions WHERE job_id = c.job_id AND execution_seq = c.fence), 'the execution says released, refunded';

    SELECT * INTO c FROM codity.claim(v_worker, 'lc-release', p_now => t0 + interval '2 seconds');
    ASSERT c.attempt = 1 AND c.fence = 2, 'the next claim is attempt 1 again, with a new fence';
    PERFORM codity.start(c.job_id, c.fence, p_now => t0 + interval '2 seconds');
    SELECT * INTO r FROM codity.release(c.job_id, c.fence, p_now => t0 + interval '3 seconds');
    ASSERT r.accepted, 'a running job can be released';
    ASSERT (SELECT status = 'queued' AND attempt = 0 FROM codity.jobs WHERE id = c.job_id), 'released from running: attempt 0';
END;
$$;

-- Illegal moves through the API raise CD020 naming both states, and write nothing.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    c record;
    v_before jsonb;
    v_msg text;
    r record;
    v_detail text;
BEGIN
    PERFORM codity.create_queue('lc-illegal');
    v_worker := codity.register_worker('w-illegal', p_now => t0);
    PERFORM codity.enqueue('lc-illegal', 't', p_now => t0);
    SELECT * INTO c FROM codity.claim(v_worker, 'lc-illegal', p_now => t0);
    v_before := pg_temp.codity_state();
    BEGIN
        PERFORM codity.complete(c.job_id, c.fence, p_now => t0);
        RAISE EXCEPTION 'expected CD020';
    EXCEPTION WHEN SQLSTATE 'CD020' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL;
        ASSERT v_msg = 'illegal transition from claimed to completed', v_msg;
        ASSERT v_detail = format('Job %s is claimed.', c.job_id), v_detail;
    END;
    BEGIN
        PERFORM codity.fail(c.job_id, c.fence, 'boom', p_now => t0);
        RAISE EXCEPTION 'expected CD020';
    EXCEPTION WHEN SQLSTATE 'CD020' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'illegal transition from claimed to failed', v_msg;
    END;
    ASSERT pg_temp.codity_state() = v_before, 'refused transitions wrote nothing';

    PERFORM codity.start(c.job_id, c.fence, p_now => t0);
    v_before := pg_temp.codity_state();
    -- A second start with the same fence is a repeat (a lost COMMIT), not a transition.
    SELECT * INTO r FROM codity.start(c.job_id, c.fence, p_now => t0);
    ASSERT r.accepted AND r.outcome = 'already_applied' AND r.job_status = 'running', format('%s', r);
    ASSERT pg_temp.codity_state() = v_before, 'a second start wrote nothing';
END;
$$;

-- Fencing: a worker whose job was reaped and reclaimed holds a stale token. Its start,
-- complete, fail and release change nothing, say so, and are recorded.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_old bigint;
    v_new bigint;
    c1 record;
    c2 record;
    r record;
    v_job_before codity.jobs;
    v_exec_before text;
BEGIN
    PERFORM codity.create_queue('lc-fence', p_lease_seconds => 30);
    v_old := codity.register_worker('w-zombie', p_now => t0);
    v_new := codity.register_worker('w-fresh', p_now => t0);
    PERFORM codity.enqueue('lc-fence', 't', p_now => t0);
    SELECT * INTO c1 FROM codity.claim(v_old, 'lc-fence', p_now => t0);
    PERFORM codity.start(c1.job_id, c1.fence, p_now => t0);
    PERFORM codity.reap(t0 + interval '31 seconds');
    SELECT * INTO c2 FROM codity.claim(v_new, 'lc-fence', p_now => t0 + interval '32 seconds');
    ASSERT c2.job_id = c1.job_id AND c2.fence = c1.fence + 1, 'the job was reclaimed with a new fence';

    SELECT * INTO v_job_before FROM codity.jobs WHERE id = c1.job_id;
    SELECT string_agg(x::text, ';' ORDER BY x.execution_seq) INTO v_exec_before FROM codity.job_executions x WHERE x.job_id = c1.job_id;

    SELECT * INTO r FROM codity.start(c1.job_id, c1.fence, p_now => t0 + interval '40 seconds');
    ASSERT NOT r.accepted AND r.job_status = 'claimed', format('stale start: %s', r);
    ASSERT r.detail = format('stale fence %s: job %s is claimed at fence %s; nothing was changed', c1.fence, c1.job_id, c2.fence), r.detail;
    SELECT * INTO r FROM codity.complete(c1.job_id, c1.fence, '{"late": true}', p_now => t0 + interval '41 seconds');
    ASSERT NOT r.accepted, 'stale complete refused';
    SELECT * INTO r FROM codity.fail(c1.job_id, c1.fence, 'late failure', p_now => t0 + interval '42 seconds');
    ASSERT NOT r.accepted AND r.retry_at IS NULL, 'stale fail refused';
    SELECT * INTO r FROM codity.release(c1.job_id, c1.fence, p_now => t0 + interval '43 seconds');
    ASSERT NOT r.accepted, 'stale release refused';

    ASSERT (SELECT j = v_job_before FROM codity.jobs j WHERE j.id = c1.job_id), 'the job row is untouched';
    ASSERT (SELECT string_agg(x::text, ';' ORDER BY x.execution_seq) FROM codity.job_executions x WHERE x.job_id = c1.job_id) = v_exec_before,
        'the executions are untouched';
    ASSERT (SELECT array_agg(f.call ORDER BY f.id) FROM codity.fence_rejections f WHERE f.job_id = c1.job_id)
           = ARRAY['start', 'complete', 'fail', 'release'], 'every stale call is recorded';
    ASSERT NOT EXISTS (SELECT 1 FROM codity.fence_rejections f WHERE f.job_id = c1.job_id
                       AND (f.presented_fence <> c1.fence OR f.current_fence <> c2.fence OR f.worker_id <> v_old
                            OR f.job_status <> 'claimed')),
        'each record names the stale fence, the current one, the zombie worker and the job status';

    -- The rightful owner is unaffected.
    PERFORM codity.start(c2.job_id, c2.fence, p_now => t0 + interval '44 seconds');
    SELECT * INTO r FROM codity.complete(c2.job_id, c2.fence, p_now => t0 + interval '45 seconds');
    ASSERT r.accepted, 'the current fence completes the job';
    -- Its own fence again (a repeat after a lost COMMIT) is answered, not applied twice.
    SELECT * INTO r FROM codity.complete(c2.job_id, c2.fence, p_now => t0 + interval '46 seconds');
    ASSERT r.accepted AND r.outcome = 'already_applied' AND r.job_status = 'completed',
        format('a second complete by the owner is already applied: %s', r);
    ASSERT (SELECT finished_at = t0 + interval '45 seconds' FROM codity.jobs WHERE id = c2.job_id),
        'the repeat changed nothing';
    ASSERT NOT EXISTS (SELECT 1 FROM codity.fence_rejections f
                       WHERE f.job_id = c2.job_id AND f.presented_fence = c2.fence),
        'the repeat is not recorded as a stale call';
END;
$$;

-- A NULL fence is not a wildcard: CD010, nothing written.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    c record;
    v_before jsonb;
    v_call text;
BEGIN
    PERFORM codity.create_queue('lc-null-fence');
    v_worker := codity.register_worker('w-null-fence', p_now => t0);
    PERFORM codity.enqueue('lc-null-fence', 't', p_now => t0);
    SELECT * INTO c FROM codity.claim(v_worker, 'lc-null-fence', p_now => t0);
    v_before := pg_temp.codity_state();
    FOREACH v_call IN ARRAY ARRAY[
        'SELECT * FROM codity.start($1, NULL)',
        'SELECT * FROM codity.complete($1, NULL)',
        'SELECT * FROM codity.fail($1, NULL, ''boom'')',
        'SELECT * FROM codity.release($1, NULL)'
    ] LOOP
        BEGIN
            EXECUTE v_call USING c.job_id;
            RAISE EXCEPTION 'expected CD010 from %', v_call;
        EXCEPTION WHEN SQLSTATE 'CD010' THEN
            NULL;
        END;
    END LOOP;
    ASSERT pg_temp.codity_state() = v_before, 'a NULL fence changed nothing';
END;
$$;

-- Unknown job (CD003) and a result over 64 KB (CD011); exactly 64 KB is accepted.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    c record;
    v_before jsonb := pg_temp.codity_state();
    v_call text;
    v_msg text;
BEGIN
    FOREACH v_call IN ARRAY ARRAY[
        'SELECT * FROM codity.start(987654, 1)',
        'SELECT * FROM codity.complete(987654, 1)',
        'SELECT * FROM codity.fail(987654, 1, ''boom'')',
        'SELECT * FROM codity.release(987654, 1)'
    ] LOOP
        BEGIN
            EXECUTE v_call;
            RAISE EXCEPTION 'expected CD003 from %', v_call;
        EXCEPTION WHEN SQLSTATE 'CD003' THEN
            GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
            ASSERT v_msg = 'job 987654 does not exist', v_msg;
        END;
    END LOOP;
    ASSERT pg_temp.codity_state() = v_before, 'unknown jobs: nothing written';

    PERFORM codity.create_queue('lc-result');
    v_worker := codity.register_worker('w-result', p_now => t0);
    PERFORM codity.enqueue('lc-result', 't', p_now => t0);
    SELECT * INTO c FROM codity.claim(v_worker, 'lc-result', p_now => t0);
    PERFORM codity.start(c.job_id, c.fence, p_now => t0);
    v_before := pg_temp.codity_state();
    BEGIN
        PERFORM codity.complete(c.job_id, c.fence, to_jsonb(repeat('r', 65535)), p_now => t0);
        RAISE EXCEPTION 'expected CD011';
    EXCEPTION WHEN SQLSTATE 'CD011' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'result is 65537 bytes; the limit is 65536', v_msg;
    END;
    ASSERT pg_temp.codity_state() = v_before, 'an oversized result wrote nothing';
    ASSERT (SELECT accepted FROM codity.complete(c.job_id, c.fence, to_jsonb(repeat('r', 65534)), p_now => t0)),
        'a 64 KB result is accepted';
END;
$$;
