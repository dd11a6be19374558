-- codity.delete_queue: remove a queue with its jobs, executions, dead letters and schedules.
--
-- Deleting history is an operator's decision, so it is refused while the queue still has
-- unfinished jobs (scheduled, queued, claimed, running) unless p_force; even forced, it is
-- refused while a worker holds one of its jobs (claimed, running), because that worker
-- would report on a job that no longer exists. Locks the queue row, so a pause or a resume
-- of it waits; claims do not take that lock, so a claim that runs between the count and
-- the delete still has its jobs deleted with the queue, and its worker's reports on them
-- get CD003 (no such job). The queue's deletion cascades to its jobs, dead letters,
-- minutes and schedules; its executions, which carry no foreign key (migration 0019), are
-- deleted explicitly.
-- Callers: operators, the web API.

CREATE OR REPLACE FUNCTION codity.delete_queue(
    p_queue text,
    p_project_id bigint DEFAULT NULL,
    p_force boolean DEFAULT false
)
RETURNS bigint
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
DECLARE
    v_queue record := codity._queue(p_queue, p_project_id);
    v_unfinished bigint;
    v_held bigint;
BEGIN
    PERFORM 1 FROM codity.queues q WHERE q.id = v_queue.id FOR UPDATE;
    SELECT count(*) FILTER (WHERE j.status IN ('claimed', 'running')),
           count(*) FILTER (WHERE j.status IN ('scheduled', 'queued', 'claimed', 'running'))
      INTO v_held, v_unfinished
    FROM codity.jobs j
    WHERE j.queue_id = v_queue.id;
    IF v_held > 0 THEN
        RAISE EXCEPTION 'queue "%" has % job(s) held by workers', p_queue, v_held
            USING ERRCODE = 'CD021',
                  HINT = 'Pause the queue and let its workers finish, then delete it.';
    END IF;
    IF v_unfinished > 0 AND NOT coalesce(p_force, false) THEN
        RAISE EXCEPTION 'queue "%" has % unfinished job(s)', p_queue, v_unfinished
            USING ERRCODE = 'CD021',
                  HINT = 'Cancel them first, or pass p_force => true to delete them with the queue.';
    END IF;
    DELETE FROM codity.queues q WHERE q.id = v_queue.id;
    -- Executions reference nothing (migration 0019), so they go here, after the jobs: an
    -- attempt's end that waited on one of them now finds its job gone and writes no row.
    DELETE FROM codity.job_executions x WHERE x.queue_id = v_queue.id;
    RETURN v_queue.id;
END;
$$;

COMMENT ON FUNCTION codity.delete_queue(text, bigint, boolean) IS
'Delete a queue and everything in it (jobs, executions, dead letters, schedules); returns its id.

Refused (CD021) while it has unfinished jobs, unless p_force; refused even with p_force
while a worker holds one of its jobs. Raises CD001 for an unknown queue.
Example: SELECT codity.delete_queue(''old-emails'', p_force => true);';

REVOKE ALL ON FUNCTION codity.delete_queue(text, bigint, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.delete_queue(text, bigint, boolean) TO codity_app;
