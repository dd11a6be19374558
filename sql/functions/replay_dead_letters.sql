-- codity.replay_dead_letters: replay every unreplayed dead letter matching a filter.
--
-- Why SKIP LOCKED: two operators pressing "replay all" at once must not replay one letter
-- twice, and neither should wait on the other. Each call locks the rows it picks FOR
-- UPDATE SKIP LOCKED; a row another replay holds is skipped, and a row it already
-- replayed no longer matches replayed_at IS NULL (re-checked on the locked row). Each
-- picked letter is then replayed by codity.replay_dead_letter, so one rule decides what
-- a replay does; it re-locks the letter this transaction already holds, then its job.
--
-- Why p_up_to_id: an operator confirms "replay these 12" after a dry run that also names
-- the highest matching id; passing it back bounds the run to letters that existed then, so
-- a letter dead-lettered after the confirmation is left alone however long the run takes.
-- (A letter whose transaction was still open at the dry run may hold a lower id and fall
-- inside: it matched the filter and is as old as the others.) The web API calls this in
-- batches of p_limit, one transaction each, until a batch comes back short: locks stay
-- few and short, and what is done stays done if the caller goes away.
--
-- One queue per locking statement (DESIGN.md, "Room to scale out"): without a queue
-- filter it walks the project's queues in id order and picks from each in turn, until
-- p_limit letters are replayed. Within a queue the oldest letters go first.
-- Locks: the picked dead-letter rows and their jobs. Callers: the web API, operators.

-- The signature before p_up_to_id and p_dead_after: dropped, or a call with the old
-- arguments would match both (codity migrate re-applies this file; dropping is idempotent).
DROP FUNCTION IF EXISTS codity.replay_dead_letters(bigint, text, text, timestamptz, integer, timestamptz);

CREATE OR REPLACE FUNCTION codity.replay_dead_letters(
    p_project_id bigint DEFAULT NULL,
    p_queue text DEFAULT NULL,
    p_task text DEFAULT NULL,
    p_dead_before timestamptz DEFAULT NULL,
    p_limit integer DEFAULT 100,
    p_now timestamptz DEFAULT now(),
    p_up_to_id bigint DEFAULT NULL,
    p_dead_after timestamptz DEFAULT NULL
)
RETURNS TABLE (dead_letter_id bigint, job_id bigint)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_project_id bigint := codity._project_id(p_project_id);
    v_queue_ids bigint[];
    v_queue_id bigint;
    v_picked bigint[];
    v_id bigint;
    v_job_id bigint;
    v_left integer := p_limit;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'limit must be from 1 to 1000, got %', p_limit USING ERRCODE = 'CD010';
    END IF;
    IF p_queue IS NOT NULL THEN
        v_queue_ids := ARRAY[(codity._queue(p_queue, v_project_id)).id];
    ELSE
        SELECT coalesce(array_agg(q.id ORDER BY q.id), '{}') INTO v_queue_ids
        FROM codity.queues q WHERE q.project_id = v_project_id;
    END IF;

    FOREACH v_queue_id IN ARRAY v_queue_ids LOOP
        EXIT WHEN v_left <= 0;
        SELECT coalesce(array_agg(picked.id ORDER BY picked.dead_at, picked.id), '{}') INTO v_picked
        FROM (
            SELECT d.id, d.dead_at
            FROM codity.dead_letters d
            WHERE d.queue_id = v_queue_id
              AND d.replayed_at IS NULL
              AND (p_task IS NULL OR d.task = p_task)
              AND (p_dead_after IS NULL OR d.dead_at > p_dead_after)
              AND (p_dead_before IS NULL OR d.dead_at < p_dead_before)
              AND (p_up_to_id IS NULL OR d.id <= p_up_to_id)
            ORDER BY d.dead_at, d.id
            LIMIT v_left
            FOR UPDATE SKIP LOCKED
        ) AS picked;

        FOREACH v_id IN ARRAY v_picked LOOP
            SELECT r.job_id INTO v_job_id
            FROM codity.replay_dead_letter(v_id, v_project_id, p_now) AS r;
            v_left := v_left - 1;
            RETURN QUERY SELECT v_id, v_job_id;
        END LOOP;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION codity.replay_dead_letters(bigint, text, text, timestamptz, integer, timestamptz, bigint, timestamptz) IS
'Replay up to p_limit unreplayed dead letters of a project, filtered by queue, task, age and highest id.

Each letter is replayed as codity.replay_dead_letter does it; concurrent calls skip the
letters another holds (FOR UPDATE SKIP LOCKED), so none is replayed twice. p_dead_after and
p_dead_before bound dead_at (exclusive); p_up_to_id leaves out letters with a higher id
(those that arrived after a confirmed dry run). Call it again until it returns fewer than
p_limit rows to replay everything that matches. Returns one row per replayed letter with
the job it went back into. Raises CD001 (unknown queue), CD002 (unknown project), CD010
(limit outside 1..1000).
Example: SELECT * FROM codity.replay_dead_letters(1, ''emails'', NULL, now() - interval ''1 hour'', 500, p_up_to_id => 4711);';

REVOKE ALL ON FUNCTION codity.replay_dead_letters(bigint, text, text, timestamptz, integer, timestamptz, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.replay_dead_letters(bigint, text, text, timestamptz, integer, timestamptz, bigint, timestamptz) TO codity_app;
