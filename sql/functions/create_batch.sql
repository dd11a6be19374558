-- codity.create_batch: a set of jobs with callbacks that run when they are all done (issue 27).
--
-- A batch is a workflow of kind 'batch' (codity.workflows): its members are plain nodes
-- with no edge between them, its callbacks (at most one of each) nodes after every member:
--   all_done       runs once every member completed, was dead-lettered or was cancelled;
--   all_succeeded  runs once every member completed; cancelled as soon as one is
--                  dead-lettered or cancelled;
--   any_dead       runs as soon as a member is dead-lettered; cancelled once every member
--                  settled otherwise.
-- A callback reads the members' outcomes and results with codity.dep_results. A sealed
-- batch (the default) is whole from the start; an open one ("open": true) takes more
-- members (codity.add_to_batch) until codity.seal_batch, and no callback but any_dead runs
-- before. The members and callbacks are released in the transactions that settle the
-- members, as a workflow's nodes are (codity._settle_children): no poller, no lag.
-- A batch idempotency key seen before returns that batch as it is now, is_new = false.
-- Locks nothing but what it inserts. Callers: any client (SQL), the web API.

CREATE OR REPLACE FUNCTION codity.create_batch(
    p_spec jsonb,
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (
    batch_id bigint,
    job_id bigint,
    callback text,
    queue_id bigint,
    job_status codity.job_status,
    is_new boolean
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    c_spec_keys CONSTANT text[] := ARRAY['name', 'idempotency_key', 'jobs', 'callbacks', 'open'];
    c_callbacks CONSTANT text[] := ARRAY['all_done', 'all_succeeded', 'any_dead'];
    c_job_keys CONSTANT text[] := ARRAY['queue', 'task', 'payload', 'run_at', 'priority', 'max_attempts'];
    v_callback_count integer;
    v_project_id bigint := codity._project_id(p_project_id);
    v_batch_id bigint;
    v_kind text;
    v_callbacks jsonb := coalesce(p_spec -> 'callbacks', '{}'::jsonb);
    v_name text;
    v_callback jsonb;
    v_problem text;
    v_queue record;
    v_callback_id bigint;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF pg_catalog.jsonb_typeof(p_spec) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'a batch must be a JSON object with "jobs" and "callbacks"'
            USING ERRCODE = 'CD010',
                  HINT = 'Example: {"jobs": [{"queue": "q", "task": "t"}], "callbacks": {"all_done": {"queue": "q", "task": "report"}}}';
    END IF;
    IF p_spec - c_spec_keys <> '{}'::jsonb THEN
        RAISE EXCEPTION 'unknown key "%" in the batch (allowed: %)',
            (SELECT k.key FROM jsonb_object_keys(p_spec - c_spec_keys) AS k(key) LIMIT 1),
            pg_catalog.array_to_string(c_spec_keys, ', ')
            USING ERRCODE = 'CD010';
    END IF;
    IF coalesce(pg_catalog.jsonb_typeof(p_spec -> 'name'), 'string') <> 'string'
       OR pg_catalog.length(p_spec ->> 'name') NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'a batch''s name must be a string of 1 to 200 characters' USING ERRCODE = 'CD010';
    END IF;
    IF coalesce(pg_catalog.jsonb_typeof(p_spec -> 'idempotency_key'), 'string') <> 'string'
       OR pg_catalog.length(p_spec ->> 'idempotency_key') NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'a batch''s idempotency_key must be a string of 1 to 200 characters' USING ERRCODE = 'CD010';
    END IF;
    IF coalesce(pg_catalog.jsonb_typeof(p_spec -> 'open'), 'boolean') <> 'boolean' THEN
        RAISE EXCEPTION 'a batch''s "open" must be true or false' USING ERRCODE = 'CD010';
    END IF;
    IF pg_catalog.jsonb_typeof(v_callbacks) <> 'object' OR v_callbacks - c_callbacks <> '{}'::jsonb THEN
        RAISE EXCEPTION 'a batch''s "callbacks" is an object with any of all_done, all_succeeded, any_dead, got %',
            pg_catalog.left(v_callbacks::text, 100)
            USING ERRCODE = 'CD010';
    END IF;
    -- Nothing to run and no row to answer with: the caller could not even learn its id.
    IF v_callbacks = '{}'::jsonb
       AND coalesce(p_spec -> 'jobs', '[]'::jsonb) IN ('[]'::jsonb, 'null'::jsonb) THEN
        RAISE EXCEPTION 'a batch needs a job or a callback (an open batch may start with its callbacks alone)'
            USING ERRCODE = 'CD010';
    END IF;
    FOR v_name, v_callback IN SELECT e.key, e.value FROM jsonb_each(v_callbacks) AS e LOOP
        IF pg_catalog.jsonb_typeof(v_callback) IS DISTINCT FROM 'object' OR v_callback - c_job_keys <> '{}'::jsonb
           OR pg_catalog.jsonb_typeof(v_callback -> 'queue') IS DISTINCT FROM 'string' THEN
            RAISE EXCEPTION 'callback % is a job object with "queue" and "task" (allowed: %)', v_name,
                pg_catalog.array_to_string(c_job_keys, ', ')
                USING ERRCODE = 'CD010';
        END IF;
        v_problem := codity._job_spec_problem(v_callback - 'queue');
        IF v_problem IS NOT NULL THEN
            RAISE EXCEPTION 'callback % is invalid: %', v_name, v_problem USING ERRCODE = 'CD010';
        END IF;
        IF octet_length(coalesce(v_callback -> 'payload', '{}'::jsonb)::text) > 65536 THEN
            RAISE EXCEPTION 'payload of callback % is % bytes; the limit is 65536', v_name,
                octet_length((v_callback -> 'payload')::text)
                USING ERRCODE = 'CD011';
        END IF;
        PERFORM codity._queue(v_callback ->> 'queue', v_project_id);  -- CD001 when unknown
    END LOOP;

    IF p_spec ? 'idempotency_key' THEN
        SELECT w.id, w.kind INTO v_batch_id, v_kind FROM codity.workflows w
        WHERE w.project_id = v_project_id AND w.idempotency_key = p_spec ->> 'idempotency_key';
        IF v_kind = 'workflow' THEN
            RAISE EXCEPTION 'idempotency key % names workflow %, not a batch', p_spec -> 'idempotency_key', v_batch_id
                USING ERRCODE = 'CD010';
        ELSIF v_batch_id IS NOT NULL THEN
            RETURN QUERY
            SELECT v_batch_id, j.id, j.node_key, j.queue_id, j.status, false
            FROM codity.jobs j WHERE j.workflow_id = v_batch_id ORDER BY j.node_key NULLS FIRST, j.id;
            RETURN;
        END IF;
    END IF;

    -- Counted first: Citus refuses a subquery inside an INSERT's VALUES.
    v_callback_count := (SELECT pg_catalog.count(*)::integer FROM jsonb_object_keys(v_callbacks));
    BEGIN
        INSERT INTO codity.workflows (project_id, kind, name, idempotency_key, nodes, edges, created_at, sealed_at)
        VALUES (v_project_id, 'batch', p_spec ->> 'name', p_spec ->> 'idempotency_key',
                v_callback_count, 0, p_now, NULL)
        RETURNING id INTO v_batch_id;
    EXCEPTION WHEN unique_violation THEN
        -- The same key, created by another session that committed while this one checked:
        -- its batch; a workflow's key is refused as above.
        SELECT w.id, w.kind INTO v_batch_id, v_kind FROM codity.workflows w
        WHERE w.project_id = v_project_id AND w.idempotency_key = p_spec ->> 'idempotency_key';
        IF v_kind = 'workflow' THEN
            RAISE EXCEPTION 'idempotency key % names workflow %, not a batch', p_spec -> 'idempotency_key', v_batch_id
                USING ERRCODE = 'CD010';
        END IF;
        RETURN QUERY
        SELECT w.id, j.id, j.node_key, j.queue_id, j.status, false
        FROM codity.workflows w JOIN codity.jobs j ON j.workflow_id = w.id
        WHERE w.id = v_batch_id
        ORDER BY j.node_key NULLS FIRST, j.id;
        RETURN;
    END;

    -- The callbacks wait for the seal until members join.
    FOR v_name, v_callback IN SELECT e.key, e.value FROM jsonb_each(v_callbacks) AS e ORDER BY e.key LOOP
        v_queue := codity._queue(v_callback ->> 'queue', v_project_id);
        INSERT INTO codity.jobs
            (queue_id, project_id, task, payload, priority, status, run_at, max_attempts,
             workflow_id, node_key, deps_remaining, created_at, updated_at)
        VALUES (v_queue.id, v_project_id, v_callback ->> 'task', coalesce(v_callback -> 'payload', '{}'::jsonb),
                coalesce((v_callback ->> 'priority')::smallint, 0::smallint), 'waiting',
                coalesce((v_callback ->> 'run_at')::timestamptz, p_now),
                coalesce((v_callback ->> 'max_attempts')::integer, v_queue.max_attempts),
                v_batch_id, v_name, 1, p_now, p_now)
        RETURNING id INTO v_callback_id;
    END LOOP;

    RETURN QUERY
    SELECT v_batch_id, m.job_id, NULL::text, m.queue_id, m.job_status, true
    FROM codity._add_batch_members(v_batch_id, v_project_id, coalesce(p_spec -> 'jobs', '[]'::jsonb), p_now) AS m;
    IF NOT coalesce((p_spec ->> 'open')::boolean, false) THEN
        UPDATE codity.workflows w SET sealed_at = p_now WHERE w.id = v_batch_id;
        PERFORM codity._seal_batch(v_batch_id, p_now);
    END IF;
    RETURN QUERY
    SELECT v_batch_id, j.id, j.node_key, j.queue_id, j.status, true
    FROM codity.jobs j WHERE j.workflow_id = v_batch_id AND j.node_key IS NOT NULL
    ORDER BY j.node_key;
END;
$$;

COMMENT ON FUNCTION codity.create_batch(jsonb, bigint, timestamptz) IS
'Create a batch: jobs, and callbacks that run when all are done (all_done), all completed (all_succeeded) or one is dead-lettered (any_dead).

p_spec: {"name", "idempotency_key", "open": false, "jobs": [{"queue", "task", "payload",
"run_at", "priority", "max_attempts"}], "callbacks": {"all_done": {"queue", "task", ...},
"all_succeeded": {...}, "any_dead": {...}}}. Returns one row per member (callback NULL), in
the order given, then one per callback, with the batch id. An open batch takes more jobs
(add_to_batch) until seal_batch; its callbacks (but any_dead) wait for the seal. Limits:
10,000 jobs a call, 100,000 a batch. With an idempotency_key seen before, that batch as it
is, is_new = false. Raises CD001 (unknown queue), CD002 (unknown project), CD010 (bad
shape), CD011 (a payload over 64 KB); writes nothing then. On a Citus cluster the callbacks
are released by the scheduler''s next tick after the last member settled.
Example: SELECT * FROM codity.create_batch(''{"jobs": [{"queue": "img", "task": "thumb", "payload": {"n": 1}}], "callbacks": {"all_done": {"queue": "img", "task": "zip"}}}'');';

REVOKE ALL ON FUNCTION codity.create_batch(jsonb, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.create_batch(jsonb, bigint, timestamptz) TO codity_app, codity_worker;
