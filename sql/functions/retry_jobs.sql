-- codity.retry_jobs: an operator retries many dead-lettered jobs at once, by id, within
-- one project.
--
-- The bulk form of codity.retry_job, for "retry selected" and "retry all matching" (the
-- web API, codity.web.endpoints.jobs_bulk, calls it once per batch of 500 ids, each batch
-- its own transaction). Each job's latest unreplayed dead letter is replayed by
-- codity.replay_dead_letter, so a bulk retry does exactly what a single one does (fresh
-- attempts, back to queued, NOTIFY). It never raises for a job it cannot retry: each id
-- answers an outcome instead:
--   retried    the job was dead-lettered and is queued again;
--   skipped    the job is in the project but is not dead-lettered now, or its dead letter
--              was replayed meanwhile (or is being replayed by another call right now);
--   missing    no such job in the project. Another project's job is missing too, and is
--              never read further, locked or written.
--
-- Locks, in the order every replay takes them: the dead letters first, FOR UPDATE SKIP
-- LOCKED (a letter another replay holds is that replay's: skipped here, never replayed
-- twice, never waited on), then each letter's job, FOR UPDATE, re-checked to be
-- dead_letter. One queue per locking statement, queues in id order.
-- Callers: the web API, operators.

CREATE OR REPLACE FUNCTION codity.retry_jobs(
    p_job_ids bigint[],
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (job_id bigint, outcome text, dead_letter_id bigint)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_project_id bigint := codity._project_id(p_project_id);
    v_ids bigint[];  -- the distinct ids, sorted (codity._bulk_job_ids)
    v_found bigint[] := '{}';
    v_in_queue bigint[];
    v_retried bigint[];
    v_letters bigint[];
    v_queue_id bigint;
    v_pick record;
    v_status codity.job_status;
BEGIN
    PERFORM codity._check_clock(p_now);
    v_ids := codity._bulk_job_ids(p_job_ids);

    FOR v_queue_id IN
        SELECT DISTINCT j.queue_id FROM codity.jobs j
        JOIN codity.queues q ON q.id = j.queue_id
        WHERE j.id = ANY(v_ids) AND q.project_id = v_project_id
        ORDER BY j.queue_id
    LOOP
        v_in_queue := ARRAY(
            SELECT j.id FROM codity.jobs j WHERE j.queue_id = v_queue_id AND j.id = ANY(v_ids));
        v_found := v_found || v_in_queue;
        v_retried := '{}';
        v_letters := '{}';

        FOR v_pick IN
            SELECT DISTINCT ON (l.job_id) l.id, l.job_id
            FROM (
                SELECT d.id, d.job_id, d.dead_at FROM codity.dead_letters d
                WHERE d.queue_id = v_queue_id AND d.job_id = ANY(v_ids) AND d.replayed_at IS NULL
                ORDER BY d.id
                FOR UPDATE SKIP LOCKED
            ) AS l
            ORDER BY l.job_id, l.dead_at DESC, l.id DESC
        LOOP
            SELECT j.status INTO v_status FROM codity.jobs j
            WHERE j.queue_id = v_queue_id AND j.id = v_pick.job_id
            FOR UPDATE;
            CONTINUE WHEN v_status IS DISTINCT FROM 'dead_letter';
            PERFORM codity.replay_dead_letter(v_pick.id, v_project_id, p_now);
            v_retried := v_retried || v_pick.job_id;
            v_letters := v_letters || v_pick.id;
        END LOOP;

        RETURN QUERY
        SELECT f.id,
               CASE WHEN r.job_id IS NULL THEN 'skipped' ELSE 'retried' END,
               r.letter_id
        FROM unnest(v_in_queue) AS f(id)
        LEFT JOIN unnest(v_retried, v_letters) AS r(job_id, letter_id) ON r.job_id = f.id
        ORDER BY f.id;
    END LOOP;

    RETURN QUERY
    SELECT i.id, 'missing'::text, NULL::bigint
    FROM unnest(v_ids) AS i(id)
    WHERE i.id <> ALL(v_found)
    ORDER BY i.id;
END;
$$;

COMMENT ON FUNCTION codity.retry_jobs(bigint[], bigint, timestamptz) IS
'Retry up to 1000 dead-lettered jobs of a project by id; one row per distinct id with its outcome.

Each job''s latest unreplayed dead letter is replayed as codity.replay_dead_letter does it.
Outcome retried (with the dead letter replayed), skipped (not dead-lettered now, or its
letter already replayed or being replayed), or missing (no such job in the project:
another project''s job is never touched). Raises CD002 (unknown project), CD010 (more
than 1000 ids).
Example: SELECT outcome, count(*) FROM codity.retry_jobs(ARRAY[41, 42, 43], 1) GROUP BY 1;';

REVOKE ALL ON FUNCTION codity.retry_jobs(bigint[], bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.retry_jobs(bigint[], bigint, timestamptz) TO codity_app;
