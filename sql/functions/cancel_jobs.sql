-- codity.cancel_jobs: an operator cancels many jobs at once, by id, within one project.
--
-- The bulk form of codity.cancel, for "cancel selected" and "cancel all matching" (the web
-- API, codity.web.endpoints.jobs_bulk, calls it once per batch of 500 ids, each batch its
-- own transaction, so no batch holds its locks for long). It never raises for a job it cannot cancel: each id
-- answers an outcome instead, so one finished job does not undo a batch:
--   cancelled  the job was unfinished and is now cancelled (a held one's execution closed,
--              its worker told at its next heartbeat, as codity.cancel does);
--   skipped    the job is in the project but cancel does not apply to its state now;
--   missing    no such job in the project. Another project's job is missing too, and is
--              never read further, locked or written: the project filter below is what
--              keeps one tenant's bulk action out of another's jobs.
-- Which states may be cancelled is read from codity.job_transitions, the one table of
-- allowed transitions, on the locked row (a job that finished meanwhile is skipped).
--
-- One queue per locking statement (DESIGN.md, "Room to scale out"): the ids are grouped
-- by the project's queues and each group is locked FOR UPDATE in id order, the order
-- codity.complete_many and deregister_worker lock in, then updated with queue_id in
-- every WHERE. Locks: the given jobs' rows. Callers: the web API, operators.

CREATE OR REPLACE FUNCTION codity.cancel_jobs(
    p_job_ids bigint[],
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (job_id bigint, outcome text, previous_status codity.job_status)
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
    v_queue_id bigint;
    v_locked_ids bigint[];
    v_locked_statuses codity.job_status[];
    v_nodes bigint[];
BEGIN
    PERFORM codity._check_clock(p_now);
    v_ids := codity._bulk_job_ids(p_job_ids);

    FOR v_queue_id IN
        SELECT DISTINCT j.queue_id FROM codity.jobs j
        JOIN codity.queues q ON q.id = j.queue_id
        WHERE j.id = ANY(v_ids) AND q.project_id = v_project_id
        ORDER BY j.queue_id
    LOOP
        SELECT coalesce(array_agg(l.id ORDER BY l.id), '{}'),
               coalesce(array_agg(l.status ORDER BY l.id), '{}')
        INTO v_locked_ids, v_locked_statuses
        FROM (
            SELECT j.id, j.status FROM codity.jobs j
            WHERE j.queue_id = v_queue_id AND j.id = ANY(v_ids)
            ORDER BY j.id
            FOR UPDATE
        ) AS l;
        v_found := v_found || v_locked_ids;

        WITH cancelled AS (
            UPDATE codity.jobs j
            SET status = 'cancelled', finished_at = p_now, lock_expires_at = NULL, updated_at = p_now
            FROM unnest(v_locked_ids, v_locked_statuses) AS l(id, status)
            WHERE j.queue_id = v_queue_id AND j.id = l.id
              AND l.status IN (SELECT t.from_status FROM codity.job_transitions t
                               WHERE t.to_status = 'cancelled')
            RETURNING j.id, j.workflow_id
        )
        SELECT array_agg(c.id) FILTER (WHERE c.workflow_id IS NOT NULL) INTO v_nodes FROM cancelled c;
        IF v_nodes IS NOT NULL THEN  -- workflow nodes: what runs after them is told now
            PERFORM codity._settle_children(v_queue_id, v_nodes, 'cancelled', p_now);
        END IF;

        -- A held job's attempt ends here: its execution row is written now (the job row
        -- still holds the attempt's worker and times).
        INSERT INTO codity.job_executions
            (job_id, queue_id, project_id, execution_seq, attempt, worker_id, status, claimed_at,
             started_at, finished_at, error)
        SELECT j.id, j.queue_id, j.project_id, j.execution_seq, j.attempt, j.worker_id, 'cancelled',
               j.claimed_at, j.started_at, p_now, 'cancelled by an operator'
        FROM codity.jobs j
        JOIN unnest(v_locked_ids, v_locked_statuses) AS l(id, status) ON l.id = j.id
        WHERE j.queue_id = v_queue_id AND l.status IN ('claimed', 'running');

        RETURN QUERY
        SELECT l.id,
               CASE WHEN EXISTS (SELECT 1 FROM codity.job_transitions t
                                 WHERE t.from_status = l.status AND t.to_status = 'cancelled')
                    THEN 'cancelled' ELSE 'skipped' END,
               l.status
        FROM unnest(v_locked_ids, v_locked_statuses) AS l(id, status)
        ORDER BY l.id;
    END LOOP;

    RETURN QUERY
    SELECT i.id, 'missing'::text, NULL::codity.job_status
    FROM unnest(v_ids) AS i(id)
    WHERE i.id <> ALL(v_found)
    ORDER BY i.id;
END;
$$;

COMMENT ON FUNCTION codity.cancel_jobs(bigint[], bigint, timestamptz) IS
'Cancel up to 1000 jobs of a project by id; one row per distinct id with its outcome.

Outcome cancelled (it was scheduled, queued, claimed or running; a running one is told
at its worker''s next heartbeat), skipped (its state does not allow it), or missing (no
such job in the project: another project''s job is never touched). Raises CD002 (unknown
project), CD010 (more than 1000 ids).
Example: SELECT outcome, count(*) FROM codity.cancel_jobs(ARRAY[41, 42, 43], 1) GROUP BY 1;';

REVOKE ALL ON FUNCTION codity.cancel_jobs(bigint[], bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.cancel_jobs(bigint[], bigint, timestamptz) TO codity_app;
