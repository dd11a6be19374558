-- codity._queue: resolve a queue name within a project to its row.
--
-- Read-only; locks nothing. A missing queue raises CD001 naming the queue and the
-- project, so a typo in a worker's --queue flag reads as what it is.
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._queue(p_queue text, p_project_id bigint)
RETURNS codity.queues
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
AS $$
DECLARE
    v_project_id bigint := codity._project_id(p_project_id);
    v_queue codity.queues;
BEGIN
    IF p_queue IS NULL THEN
        RAISE EXCEPTION 'queue name must not be NULL' USING ERRCODE = 'CD010';
    END IF;
    SELECT q.* INTO v_queue FROM codity.queues q WHERE q.project_id = v_project_id AND q.name = p_queue;
    IF v_queue.id IS NULL THEN
        RAISE EXCEPTION 'queue "%" does not exist', p_queue
            USING ERRCODE = 'CD001',
                  DETAIL = format('No queue named %L in project %s.', p_queue, v_project_id),
                  HINT = 'Create it with codity.create_queue(name).';
    END IF;
    RETURN v_queue;
END;
$$;

COMMENT ON FUNCTION codity._queue(text, bigint) IS
'Private: the queue row for a name within a project; raises CD001 when there is none.';

REVOKE ALL ON FUNCTION codity._queue(text, bigint) FROM PUBLIC;
