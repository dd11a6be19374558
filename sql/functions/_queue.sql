-- codity._queue: resolve a queue, by name within a project or by id, to the columns of its
-- row that the functions read.
--
-- Not the row type codity.queues: no signature uses the row type of a table meant to become
-- a reference table (DESIGN.md, "Room to scale out", rule 7; migration 0015).
--
-- Read-only; locks nothing. A missing queue raises CD001 naming the queue and the
-- project, so a typo in a worker's --queue flag reads as what it is.
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._queue(
    p_queue text,
    p_project_id bigint,
    OUT id bigint,
    OUT name text,
    OUT project_id bigint,
    OUT is_paused boolean,
    OUT max_attempts integer,
    OUT max_crashes integer,
    OUT backoff codity.backoff_kind,
    OUT base_delay_ms integer,
    OUT max_delay_ms integer,
    OUT lease_seconds integer,
    OUT job_timeout_seconds integer,
    OUT max_running integer,
    OUT rate_limit integer,
    OUT rate_period_seconds integer
)
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
AS $$
#variable_conflict use_column
DECLARE
    v_project_id bigint;
BEGIN
    -- One query for the common case, the default project included; only a miss asks why,
    -- in the order the checks always ran: the project (CD002), the name, the queue.
    SELECT q.id, q.name, q.project_id, q.is_paused, q.max_attempts, q.max_crashes, q.backoff,
           q.base_delay_ms, q.max_delay_ms, q.lease_seconds, q.job_timeout_seconds,
           q.max_running, q.rate_limit, q.rate_period_seconds
    INTO id, name, project_id, is_paused, max_attempts, max_crashes, backoff,
         base_delay_ms, max_delay_ms, lease_seconds, job_timeout_seconds,
         max_running, rate_limit, rate_period_seconds
    FROM codity.queues q
    WHERE q.name = p_queue
      AND q.project_id = coalesce(p_project_id,
                                  (SELECT p.id FROM codity.projects p WHERE p.is_default));
    IF FOUND THEN
        RETURN;
    END IF;
    v_project_id := codity._project_id(p_project_id);
    IF p_queue IS NULL THEN
        RAISE EXCEPTION 'queue name must not be NULL' USING ERRCODE = 'CD010';
    END IF;
    RAISE EXCEPTION 'queue "%" does not exist', p_queue
        USING ERRCODE = 'CD001',
              DETAIL = format('No queue named %L in project %s.', p_queue, v_project_id),
              HINT = 'Create it with codity.create_queue(name).';
END;
$$;

COMMENT ON FUNCTION codity._queue(text, bigint) IS
'Private: the columns of the queue row for a name within a project; raises CD001 when there is none.';

REVOKE ALL ON FUNCTION codity._queue(text, bigint) FROM PUBLIC;

-- By id: the hot functions take the queue's id (DESIGN.md, "Room to scale out", rule 1).
-- With a project, the queue must be one of that project's (a worker claims only in its
-- own); without one, any queue.
CREATE OR REPLACE FUNCTION codity._queue(
    p_queue_id bigint,
    p_project_id bigint,
    OUT id bigint,
    OUT name text,
    OUT project_id bigint,
    OUT is_paused boolean,
    OUT max_attempts integer,
    OUT max_crashes integer,
    OUT backoff codity.backoff_kind,
    OUT base_delay_ms integer,
    OUT max_delay_ms integer,
    OUT lease_seconds integer,
    OUT job_timeout_seconds integer,
    OUT max_running integer,
    OUT rate_limit integer,
    OUT rate_period_seconds integer
)
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
AS $$
#variable_conflict use_column
BEGIN
    IF p_queue_id IS NULL THEN
        RAISE EXCEPTION 'queue id must not be NULL' USING ERRCODE = 'CD010';
    END IF;
    SELECT q.id, q.name, q.project_id, q.is_paused, q.max_attempts, q.max_crashes, q.backoff,
           q.base_delay_ms, q.max_delay_ms, q.lease_seconds, q.job_timeout_seconds,
           q.max_running, q.rate_limit, q.rate_period_seconds
    INTO id, name, project_id, is_paused, max_attempts, max_crashes, backoff,
         base_delay_ms, max_delay_ms, lease_seconds, job_timeout_seconds,
         max_running, rate_limit, rate_period_seconds
    FROM codity.queues q
    WHERE q.id = p_queue_id AND (p_project_id IS NULL OR q.project_id = p_project_id);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue % does not exist', p_queue_id
            USING ERRCODE = 'CD001',
                  DETAIL = CASE WHEN p_project_id IS NULL THEN format('No queue has id %s.', p_queue_id)
                                ELSE format('No queue with id %s in project %s.', p_queue_id, p_project_id) END,
                  HINT = 'codity.worker_queues(worker) and GET /queues give the ids.';
    END IF;
END;
$$;

COMMENT ON FUNCTION codity._queue(bigint, bigint) IS
'Private: the columns of the queue row with this id (in this project when one is given); raises CD001 when there is none.';

REVOKE ALL ON FUNCTION codity._queue(bigint, bigint) FROM PUBLIC;
