-- codity.pause_queue / codity.resume_queue: stop and restart handing out a queue's jobs.
--
-- A paused queue still accepts jobs; codity.claim simply returns nothing from it. Jobs
-- already claimed run to the end. Resuming raises a NOTIFY so idle workers claim at once.
-- Locks the queue row. Callers: operators, the web API.

CREATE OR REPLACE FUNCTION codity.pause_queue(
    p_queue text,
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
DECLARE
    v_queue record := codity._queue(p_queue, p_project_id);
BEGIN
    PERFORM codity._check_clock(p_now);
    UPDATE codity.queues q SET is_paused = true, paused_at = p_now, updated_at = p_now
    WHERE q.id = v_queue.id AND NOT q.is_paused;
    RETURN FOUND;
END;
$$;

COMMENT ON FUNCTION codity.pause_queue(text, bigint, timestamptz) IS
'Pause a queue: claims return nothing from it until it is resumed; returns false if it was already paused.

Example: SELECT codity.pause_queue(''emails'');';

CREATE OR REPLACE FUNCTION codity.resume_queue(
    p_queue text,
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS boolean
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
DECLARE
    v_queue record := codity._queue(p_queue, p_project_id);
BEGIN
    PERFORM codity._check_clock(p_now);
    UPDATE codity.queues q SET is_paused = false, paused_at = NULL, updated_at = p_now
    WHERE q.id = v_queue.id AND q.is_paused;
    IF FOUND THEN
        PERFORM codity._notify(v_queue.id);
        RETURN true;
    END IF;
    RETURN false;
END;
$$;

COMMENT ON FUNCTION codity.resume_queue(text, bigint, timestamptz) IS
'Resume a paused queue and wake its workers; returns false if it was not paused.

Example: SELECT codity.resume_queue(''emails'');';

REVOKE ALL ON FUNCTION codity.pause_queue(text, bigint, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION codity.resume_queue(text, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.pause_queue(text, bigint, timestamptz) TO codity_app;
GRANT EXECUTE ON FUNCTION codity.resume_queue(text, bigint, timestamptz) TO codity_app;
