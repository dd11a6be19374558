-- codity.replay_dead_letter, and dead letters outliving their job.
--
-- Plain SQL that raises on failure; tests/test_sql_files.py runs the whole file in one call
-- in a fresh database (one transaction: time moves only through p_now). Every block uses a
-- queue of its own.

-- Dead-letter one job of a queue (not retryable), returning the dead letter's id.
CREATE FUNCTION pg_temp.dead_job(p_queue text, p_payload jsonb, p_now timestamptz) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_worker bigint := codity.register_worker('w-' || p_queue, p_now => p_now);
    c record;
BEGIN
    PERFORM codity.enqueue(p_queue, 'import', p_payload, p_priority => 4, p_now => p_now);
    SELECT * INTO c FROM codity.claim(v_worker, p_queue, p_now => p_now);
    PERFORM codity.start(c.job_id, c.fence, p_now => p_now);
    PERFORM codity.fail(c.job_id, c.fence, 'schema mismatch', p_retryable => false, p_now => p_now);
    RETURN (SELECT d.id FROM codity.dead_letters d WHERE d.job_id = c.job_id);
END;
$$;

-- Replay of a job that still exists: the same job goes back to queued with fresh attempts,
-- its fence history continues, and the dead letter records the replay.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_dead bigint;
    v_job bigint;
    v_worker bigint;
    r record;
    c record;
BEGIN
    PERFORM codity.create_queue('dl-replay');
    v_dead := pg_temp.dead_job('dl-replay', '{"file": "a.csv"}', t0);
    v_job := (SELECT job_id FROM codity.dead_letters WHERE id = v_dead);
    SELECT * INTO r FROM codity.replay_dead_letter(v_dead, p_now => t0 + interval '1 hour');
    ASSERT r.job_id = v_job AND r.job_status = 'queued', format('the same job is queued again: %s', r);
    ASSERT (SELECT status = 'queued' AND attempt = 0 AND crash_count = 0 AND run_at = t0 + interval '1 hour'
                   AND finished_at IS NULL AND lock_expires_at IS NULL AND execution_seq = 1
            FROM codity.jobs WHERE id = v_job), 'fresh attempts, due now, fence history kept';
    ASSERT (SELECT replayed_at = t0 + interval '1 hour' AND replayed_job_id = v_job FROM codity.dead_letters WHERE id = v_dead),
        'the dead letter records the replay';
    v_worker := codity.register_worker('w-replayed', p_now => t0 + interval '1 hour');
    SELECT * INTO c FROM codity.claim(v_worker, 'dl-replay', p_now => t0 + interval '1 hour');
    ASSERT c.job_id = v_job AND c.fence = 2 AND c.attempt = 1, format('claimed again with a new fence: %s', c);
END;
$$;

-- Replaying twice is CD021 naming the dead letter; nothing is written.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_dead bigint;
    v_before jsonb;
    v_msg text;
    v_detail text;
BEGIN
    PERFORM codity.create_queue('dl-twice');
    v_dead := pg_temp.dead_job('dl-twice', '{}', t0);
    PERFORM codity.replay_dead_letter(v_dead, p_now => t0);
    v_before := pg_temp.codity_state();
    BEGIN
        PERFORM codity.replay_dead_letter(v_dead, p_now => t0 + interval '1 minute');
        RAISE EXCEPTION 'expected CD021';
    EXCEPTION WHEN SQLSTATE 'CD021' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL;
        ASSERT v_msg = format('dead letter %s was already replayed', v_dead), v_msg;
        ASSERT v_detail LIKE 'Replayed at % into job %', v_detail;
    END;
    ASSERT pg_temp.codity_state() = v_before, 'a second replay wrote nothing';
END;
$$;

-- A dead letter outlives its job: delete the job, the copy stays, and replay re-creates the
-- job from the copied task, payload and priority.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_dead bigint;
    v_old_job bigint;
    r record;
    j codity.jobs;
BEGIN
    PERFORM codity.create_queue('dl-orphan', p_max_attempts => 6);
    v_dead := pg_temp.dead_job('dl-orphan', '{"file": "b.csv"}', t0);
    v_old_job := (SELECT job_id FROM codity.dead_letters WHERE id = v_dead);
    DELETE FROM codity.jobs WHERE id = v_old_job;
    ASSERT (SELECT job_id = v_old_job AND payload = '{"file": "b.csv"}' AND reason = 'failed: not retryable'
            FROM codity.dead_letters WHERE id = v_dead), 'the dead letter survives, its job id kept as history';
    ASSERT NOT EXISTS (SELECT 1 FROM codity.jobs WHERE id = v_old_job), 'the job itself is gone';

    SELECT * INTO r FROM codity.replay_dead_letter(v_dead, p_now => t0 + interval '1 hour');
    ASSERT r.job_id <> v_old_job AND r.job_status = 'queued', format('a new job: %s', r);
    SELECT * INTO j FROM codity.jobs WHERE id = r.job_id;
    ASSERT j.task = 'import' AND j.payload = '{"file": "b.csv"}' AND j.priority = 4, 'task, payload and priority copied';
    ASSERT j.queue_id = (SELECT id FROM codity.queues WHERE name = 'dl-orphan') AND j.max_attempts = 6,
        'in the same queue, with its policy';
    ASSERT j.status = 'queued' AND j.attempt = 0 AND j.run_at = t0 + interval '1 hour', 'due now';
    ASSERT (SELECT replayed_job_id FROM codity.dead_letters WHERE id = v_dead) = r.job_id, 'the replay is recorded';
END;
$$;

-- Unknown dead letter, or one of another project: CD007, nothing written.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_dead bigint;
    v_other_project bigint;
    v_before jsonb;
    v_msg text;
BEGIN
    INSERT INTO codity.orgs (slug, name) VALUES ('dl-org', 'DL org');
    INSERT INTO codity.projects (org_id, slug, name) SELECT id, 'dl-project', 'DL' FROM codity.orgs WHERE slug = 'dl-org'
    RETURNING id INTO v_other_project;
    PERFORM codity.create_queue('dl-scoped');
    v_dead := pg_temp.dead_job('dl-scoped', '{}', t0);
    v_before := pg_temp.codity_state();
    BEGIN
        PERFORM codity.replay_dead_letter(987654);
        RAISE EXCEPTION 'expected CD007';
    EXCEPTION WHEN SQLSTATE 'CD007' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = 'dead letter 987654 does not exist', v_msg;
    END;
    BEGIN
        PERFORM codity.replay_dead_letter(v_dead, v_other_project);
        RAISE EXCEPTION 'expected CD007';
    EXCEPTION WHEN SQLSTATE 'CD007' THEN
        GET STACKED DIAGNOSTICS v_msg = MESSAGE_TEXT;
        ASSERT v_msg = format('dead letter %s does not exist', v_dead), v_msg;
    END;
    ASSERT pg_temp.codity_state() = v_before, 'nothing written';
    ASSERT (SELECT job_status FROM codity.replay_dead_letter(v_dead, (SELECT id FROM codity.projects WHERE is_default))) = 'queued',
        'its own project may replay it';
END;
$$;
