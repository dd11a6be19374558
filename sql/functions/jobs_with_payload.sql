-- codity.jobs_with_payload: the ids of a project's jobs whose payload contains a JSON value.
--
-- Why a definer function: as codity_app every read of codity.jobs runs under row-level
-- security, and jsonb containment (@>) is not LEAKPROOF, so PostgreSQL may not check it
-- before the policy and never uses an index for it: a payload filter read every job of the
-- project (4.4 s per jobs page at a million). Run as the owner, the policy does not apply
-- and the GIN index jobs_payload_idx answers (for the jobs no worker holds; the held ones,
-- which the index leaves out, are read through their own partial indexes); the project
-- filter is written out here instead, and while a transaction acts for a project
-- (codity.project_id, what the policy keys on) no other project's job is returned either.
-- The caller narrows further with j.id = ANY(...), which is leakproof and an index
-- condition.
--
-- Empty payloads ('{}', a job without arguments) are not in the index either (migration
-- 0027): '{}' contains only '{}', so a non-empty filter never wants them, and the empty
-- filter, which every job matches, is answered without the payload at all.
--
-- Bounded: at most p_limit ids (100,000 by default), newest first. A filter matching more
-- considers only the newest p_limit of them. Reads; locks nothing.

CREATE OR REPLACE FUNCTION codity.jobs_with_payload(
    p_payload jsonb,
    p_project_id bigint DEFAULT NULL,
    p_limit integer DEFAULT 100000
)
RETURNS SETOF bigint
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
DECLARE
    v_project_id bigint := codity._project_id(p_project_id);
BEGIN
    IF p_payload IS NULL OR pg_catalog.jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'the payload filter must be a JSON object'
            USING ERRCODE = 'CD010', HINT = 'For example {"customer": {"id": 42}}.';
    END IF;
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 1000000 THEN
        RAISE EXCEPTION 'the limit must be between 1 and 1000000, got %', p_limit
            USING ERRCODE = 'CD010';
    END IF;
    IF p_payload = '{}'::jsonb THEN  -- every job matches
        RETURN QUERY
        SELECT j.id
        FROM codity.jobs j
        JOIN codity.queues q ON q.id = j.queue_id
        WHERE q.project_id = v_project_id
          AND (codity.current_project_id() IS NULL OR q.project_id = codity.current_project_id())
        ORDER BY j.id DESC
        LIMIT p_limit;
        RETURN;
    END IF;
    -- The index leaves out held jobs (migration 0017), so they are read beside it: their
    -- predicate is that of jobs_lease_idx and jobs_worker_idx, a worker's capacity at most.
    -- It leaves out empty payloads too (migration 0027), which this filter cannot match.
    RETURN QUERY
    SELECT f.id
    FROM (
        SELECT j.id
        FROM codity.jobs j
        JOIN codity.queues q ON q.id = j.queue_id
        WHERE q.project_id = v_project_id
          AND (codity.current_project_id() IS NULL OR q.project_id = codity.current_project_id())
          AND j.status NOT IN ('claimed', 'running')
          AND j.payload <> '{}'::jsonb
          AND j.payload @> p_payload
        UNION ALL
        SELECT j.id
        FROM codity.jobs j
        JOIN codity.queues q ON q.id = j.queue_id
        WHERE q.project_id = v_project_id
          AND (codity.current_project_id() IS NULL OR q.project_id = codity.current_project_id())
          AND j.status IN ('claimed', 'running')
          AND j.payload @> p_payload
    ) AS f
    ORDER BY f.id DESC
    LIMIT p_limit;
END;
$$;

COMMENT ON FUNCTION codity.jobs_with_payload(jsonb, bigint, integer) IS
'The ids of a project''s jobs whose payload contains p_payload (jsonb @>, the GIN index), newest first, at most p_limit.

Raises CD002 (unknown project), CD010 (not a JSON object, limit outside 1..1000000).
Example: SELECT count(*) FROM codity.jobs_with_payload(''{"to": "a@example.com"}'');';

REVOKE ALL ON FUNCTION codity.jobs_with_payload(jsonb, bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.jobs_with_payload(jsonb, bigint, integer) TO codity_app, codity_readonly;
