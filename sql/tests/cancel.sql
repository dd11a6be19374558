-- codity.cancel: waiting and held jobs are cancelled; finished ones cannot be.
--
-- Plain SQL that raises on failure; tests/test_sql_files.py runs the whole file in one call
-- in a fresh database (one transaction: time moves only through p_now). Every block uses a
-- queue of its own.

-- Scheduled and queued jobs are cancelled outright and are never claimed or promoted.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    v_scheduled bigint;
    v_queued bigint;
    r record;
BEGIN
    PERFORM codity.create_queue('cx-waiting');
    v_worker := codity.register_worker('w-waiting', p_now => t0);
    v_scheduled := (SELECT job_id FROM codity.enqueue('cx-waiting', 't', p_run_at => t0 + interval '1 minute', p_now => t0));
    v_queued := (SELECT job_id FROM codity.enqueue('cx-waiting', 't', p_now => t0));

    SELECT * INTO r FROM codity.cancel(v_scheduled, p_now => t0 + interval '1 second');
    ASSERT r.job_id = v_scheduled AND r.previous_status = 'scheduled' AND r.job_status = 'cancelled', format('%s', r);
    SELECT * INTO r FROM codity.cancel(v_queued, p_now => t0 + interval '1 second');
    ASSERT r.previous_status = 'queued' AND r.job_status = 'cancelled', format('%s', r);
    ASSERT (SELECT bool_and(status = 'cancelled' AND finished_at = t0 + interval '1 second' AND lock_expires_at IS NULL)
            FROM codity.jobs WHERE id IN (v_scheduled, v_queued)), 'both cancelled, with a finish time';

    ASSERT codity.promote(t0 + interval '2 minutes') = 0, 'a cancelled scheduled job is not promoted';
    ASSERT NOT EXISTS (SELECT 1 FROM codity.claim(v_worker, 'cx-waiting', 10, p_now => t0 + interval '2 minutes')),
        'a cancelled job is not claimed';
END;
$$;

-- A held job (claimed or running) is cancelled and its execution closed; the worker learns
-- it at its next heartbeat, and its complete is refused by the fence.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    c_claimed record;
    c_running record;
    r record;
BEGIN
    PERFORM codity.create_queue('cx-held', p_lease_seconds => 30);
    v_worker := codity.register_worker('w-held', p_now => t0);
    PERFORM codity.enqueue_many('cx-held', '[{"task": "a"}, {"task": "b"}]', p_now => t0);
    SELECT * INTO c_claimed FROM codity.claim(v_worker, 'cx-held', p_now => t0);
    SELECT * INTO c_running FROM codity.claim(v_worker, 'cx-held', p_now => t0);
    PERFORM codity.start(c_running.job_id, c_running.fence, p_now => t0);

    ASSERT (SELECT previous_status FROM codity.cancel(c_claimed.job_id, p_now => t0 + interval '1 second')) = 'claimed', 'claimed';
    ASSERT (SELECT previous_status FROM codity.cancel(c_running.job_id, p_now => t0 + interval '1 second')) = 'running', 'running';
    ASSERT (SELECT bool_and(status = 'cancelled' AND lock_expires_at IS NULL) FROM codity.jobs
            WHERE id IN (c_claimed.job_id, c_running.job_id)), 'cancelled, lease dropped';
    ASSERT (SELECT bool_and(status = 'cancelled' AND finished_at = t0 + interval '1 second' AND error = 'cancelled by an operator')
            FROM codity.job_executions WHERE job_id IN (c_claimed.job_id, c_running.job_id)), 'executions closed as cancelled';

    ASSERT (SELECT array_agg(h.state) FROM codity.heartbeat(v_worker, ARRAY[c_claimed.job_id, c_running.job_id],
                                                           ARRAY[c_claimed.fence, c_running.fence], p_now => t0 + interval '5 seconds') h)
           = ARRAY['cancelled', 'cancelled'], 'the heartbeat says cancelled';
    SELECT * INTO r FROM codity.complete(c_running.job_id, c_running.fence, p_now => t0 + interval '6 seconds');
    ASSERT NOT r.accepted AND r.job_status = 'cancelled', 'a complete after cancel is refused';
    ASSERT (SELECT status FROM codity.jobs WHERE id = c_running.job_id) = 'cancelled', 'and the job stays cancelled';
    ASSERT NOT EXISTS (SELECT 1 FROM codity.reap(t0 + interval '1 hour') x WHERE x.job_id IN (c_claimed.job_id, c_running.job_id)),
        'a cancelled job is never reaped';
END;
$$;

-- Finished jobs cannot be cancelled: CD020 naming both states, nothing written.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_worker bigint;
    c record;
    v_completed bigint;
    v_dead bigint;
    v_cancelled bigint;
    v_case record;
    v_before jsonb;
    v_msg text;
BEGIN
    PERFORM codity.create_queue('cx-final');
    v_worker := codity.register_worker('w-final', p_now => t0);
    PERFORM codity.enqueue_many('cx-final', '[{"task": "a"}, {"task": "b"}, {"task": "c"}]', p_now => t0);
    SELECT * INTO c FROM codity.claim(v_worker, 'cx-final', p_now => t0);
    PERFORM codity.start(c.job_id, c.fence, p_now => t0);
    PERFORM codity.complete(c.job_id, c.fence, p_now => t0);
    v_completed := c.job_id;
    SELECT * INTO c FROM codity.claim(v_worker, 'cx-final', p_now => t0);
    PERFORM codity.start(c.job_id, c.fence, p_now => t0);
    PERFORM codity.fail(c.job_id, c.fence, 'fatal', p_retryable => false, p_now => t0);
    v_dead := c.job_id;
    SELECT * INTO c FROM codity.claim(v_worker, 'cx-final', p_now => t0);
    PERFORM codity.cancel(c.job_id, p_now => t0);
    v_cancelled := c.job_id;

    v_before := pg_temp.codity_state();
    FOR v_case IN SELECT * FROM (VALUES (v_completed, 'completed'), (v_dead, 'dead_letter'), (v_cancelled, 'cancelled')) AS x(id, status) LOOP
        BEGIN
            PERFORM codity.cancel(v_case.id, p_now => t0 + interval '1 minute');
            RAISE EXCEPTION 'expected CD020 for a % job', v_case.status;
        EXCEPTION WHEN SQLSTATE 'CD020' THEN
            GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
            ASSERT v_msg = format('illegal transition from %s to cancelled', v_case.status), v_msg;
        END;
    END LOOP;
    ASSERT pg_temp.codity_state() = v_before, 'refused cancels wrote nothing';
END;
$$;

-- Unknown job, or a job of another project: CD003, nothing written.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_job bigint;
    v_other_project bigint;
    v_before jsonb;
    v_msg text;
BEGIN
    INSERT INTO codity.orgs (slug, name) VALUES ('cx-org', 'CX org');
    INSERT INTO codity.projects (org_id, slug, name) SELECT id, 'cx-project', 'CX' FROM codity.orgs WHERE slug = 'cx-org'
    RETURNING id INTO v_other_project;
    PERFORM codity.create_queue('cx-scoped');
    v_job := (SELECT job_id FROM codity.enqueue('cx-scoped', 't', p_now => t0));
    v_before := pg_temp.codity_state();
    BEGIN
        PERFORM codity.cancel(987654);
        RAISE EXCEPTION 'expected CD003';
    EXCEPTION WHEN SQLSTATE 'CD003' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'job 987654 does not exist', v_msg;
    END;
    BEGIN
        PERFORM codity.cancel(v_job, v_other_project);
        RAISE EXCEPTION 'expected CD003';
    EXCEPTION WHEN SQLSTATE 'CD003' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = format('job %s does not exist', v_job), v_msg;
    END;
    ASSERT pg_temp.codity_state() = v_before, 'nothing written';
END;
$$;
