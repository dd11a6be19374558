-- An attempt starts when its handler does: codity.complete_many_in_queue and
-- codity.fail_in_queue take how long each job waited in the worker after its claim
-- (p_waited_ms, issue 29 item 7) and move started_at on by that much, never past the finish.
--
-- Plain SQL that raises on failure; tests/test_sql_files.py runs the whole file in one call
-- in a fresh database (one transaction: time moves only through p_now). Every block uses a
-- queue of its own.

-- Three jobs claimed and started at t0, completed at t0 + 10 s: one began at once, one
-- waited 2.5 s for a slot, one reports a wait longer than its whole attempt (clamped).
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_queue bigint;
    v_worker bigint;
    v_ids bigint[];
    v_fences integer[];
BEGIN
    SELECT queue_id INTO v_queue FROM codity.create_queue('started-complete');
    v_worker := codity.register_worker('w-started', p_now => t0);
    PERFORM codity.enqueue_many('started-complete', '[{"task": "t"}, {"task": "t"}, {"task": "t"}]', p_now => t0);
    SELECT array_agg(c.job_id ORDER BY c.job_id), array_agg(c.fence ORDER BY c.job_id) INTO v_ids, v_fences
    FROM codity.claim_in_queue(v_queue, v_worker, 3, p_start => true, p_now => t0) c;
    ASSERT (SELECT count(*) FROM codity.jobs WHERE id = ANY (v_ids) AND started_at = t0) = 3,
        'claimed with p_start: started at the claim';
    ASSERT (SELECT count(*) FROM codity.complete_many_in_queue(v_queue, v_ids, v_fences, NULL,
                p_now => t0 + interval '10 seconds', p_waited_ms => ARRAY[0, 2500, 60000])
            WHERE accepted) = 3, 'all three completed';
    ASSERT (SELECT array_agg(started_at ORDER BY id) FROM codity.jobs WHERE id = ANY (v_ids))
           = ARRAY[t0, t0 + interval '2.5 seconds', t0 + interval '10 seconds'],
        'the job rows start when their handlers did, never after they finished';
    ASSERT (SELECT array_agg(started_at ORDER BY job_id) FROM codity.job_executions WHERE job_id = ANY (v_ids))
           = ARRAY[t0, t0 + interval '2.5 seconds', t0 + interval '10 seconds'],
        'so do their executions';
    ASSERT (SELECT bool_and(claimed_at = t0) FROM codity.job_executions WHERE job_id = ANY (v_ids)),
        'the claim keeps its own time';
END;
$$;

-- Without waits, nothing moves (the worker sends NULL when no job of a batch waited).
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_queue bigint;
    v_worker bigint;
    c record;
BEGIN
    SELECT queue_id INTO v_queue FROM codity.create_queue('started-none');
    v_worker := codity.register_worker('w-none', p_now => t0);
    PERFORM codity.enqueue('started-none', 't', p_now => t0);
    SELECT * INTO c FROM codity.claim_in_queue(v_queue, v_worker, 1, p_start => true, p_now => t0);
    PERFORM codity.complete_many_in_queue(v_queue, ARRAY[c.job_id], ARRAY[c.fence], p_now => t0 + interval '1 second');
    ASSERT (SELECT started_at FROM codity.job_executions WHERE job_id = c.job_id) = t0, 'no wait: the claim''s time';
END;
$$;

-- A failed attempt that waited 1.5 s: its execution starts then; the retry is scheduled.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_queue bigint;
    v_worker bigint;
    c record;
    f record;
BEGIN
    SELECT queue_id INTO v_queue FROM codity.create_queue('started-fail', p_max_attempts => 3);
    v_worker := codity.register_worker('w-fail', p_now => t0);
    PERFORM codity.enqueue('started-fail', 't', p_now => t0);
    SELECT * INTO c FROM codity.claim_in_queue(v_queue, v_worker, 1, p_start => true, p_now => t0);
    SELECT * INTO f FROM codity.fail_in_queue(v_queue, c.job_id, c.fence, 'boom', true,
                                              t0 + interval '5 seconds', p_waited_ms => 1500);
    ASSERT f.accepted AND f.job_status = 'scheduled', 'the failure is recorded, a retry scheduled';
    ASSERT (SELECT started_at FROM codity.job_executions WHERE job_id = c.job_id AND execution_seq = c.fence)
           = t0 + interval '1.5 seconds', 'the failed attempt started when its handler did';
END;
$$;

-- Bad waits are refused with CD010 and write nothing: a count per job, none negative.
DO $$
DECLARE
    t0 timestamptz := '2030-01-01 12:00:00+00';
    v_queue bigint;
    v_worker bigint;
    c record;
    v_before jsonb;
    v_state text;
BEGIN
    SELECT queue_id INTO v_queue FROM codity.create_queue('started-bad');
    v_worker := codity.register_worker('w-bad', p_now => t0);
    PERFORM codity.enqueue('started-bad', 't', p_now => t0);
    SELECT * INTO c FROM codity.claim_in_queue(v_queue, v_worker, 1, p_start => true, p_now => t0);
    v_before := pg_temp.codity_state();
    BEGIN
        PERFORM codity.complete_many_in_queue(v_queue, ARRAY[c.job_id], ARRAY[c.fence], p_now => t0,
                                              p_waited_ms => ARRAY[1, 2]);
        RAISE EXCEPTION 'two waits for one job were accepted';
    EXCEPTION WHEN SQLSTATE 'CD010' THEN
        NULL;
    END;
    BEGIN
        PERFORM codity.complete_many_in_queue(v_queue, ARRAY[c.job_id], ARRAY[c.fence], p_now => t0,
                                              p_waited_ms => ARRAY[-5]);
        RAISE EXCEPTION 'a negative wait was accepted';
    EXCEPTION WHEN SQLSTATE 'CD010' THEN
        GET STACKED DIAGNOSTICS v_state = MESSAGE_TEXT;
        ASSERT v_state LIKE 'waited_ms must be NULL or hold one count of 0 or more per job%', v_state;
    END;
    BEGIN
        PERFORM codity.fail_in_queue(v_queue, c.job_id, c.fence, 'x', true, t0, p_waited_ms => -1);
        RAISE EXCEPTION 'a negative wait was accepted by fail';
    EXCEPTION WHEN SQLSTATE 'CD010' THEN
        NULL;
    END;
    ASSERT pg_temp.codity_state() = v_before, 'nothing written';
END;
$$;
