-- codity._add_batch_members: jobs join a batch that is still open (codity.create_batch,
-- add_to_batch).
--
-- Each job is checked as enqueue_many checks one, its queue looked up in the batch's
-- project (CD001), its payload at most 64 KB (CD011); at most 10,000 a call and 100,000 a
-- batch (CD010). The members are inserted queued (scheduled with a later run_at), each with
-- an edge to every callback of the batch, whose count of unsettled parents grows by as many
-- (a callback that ran or was cancelled already only gains the edges). Their queues are
-- woken. Writes nothing when a check fails.
--
-- Locks: the caller holds the batch's workflow row (FOR UPDATE); this locks the callbacks'
-- rows, the order settlements reach them in (a member, then its callbacks) being the same.
-- SECURITY INVOKER without SET: called only from definer functions; granted to nobody.

CREATE OR REPLACE FUNCTION codity._add_batch_members(
    p_batch_id bigint,
    p_project_id bigint,
    p_jobs jsonb,
    p_now timestamptz
)
RETURNS TABLE (job_id bigint, queue_id bigint, job_status codity.job_status)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $$
#variable_conflict use_column
DECLARE
    v_lock record;
    c_job_keys CONSTANT text[] := ARRAY['queue', 'task', 'payload', 'run_at', 'priority', 'max_attempts'];
    v_n integer;
    v_job jsonb;
    v_problem text;
    v_queue record;
    v_queue_by_name jsonb := '{}';
    v_default_attempts jsonb := '{}';
    v_queue_ids bigint[] := '{}';
    v_attempts integer[] := '{}';
    v_ids bigint[];
    v_callbacks integer;
    v_members integer;
    i integer;
BEGIN
    IF pg_catalog.jsonb_typeof(p_jobs) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'a batch''s "jobs" must be a JSON array of job objects' USING ERRCODE = 'CD010';
    END IF;
    v_n := jsonb_array_length(p_jobs);
    IF v_n > 10000 THEN
        RAISE EXCEPTION 'at most 10000 jobs join a batch in one call, got %', v_n
            USING ERRCODE = 'CD010', HINT = 'Open the batch, add the jobs in several calls, then seal it.';
    END IF;
    FOR i IN 1 .. v_n LOOP
        v_job := p_jobs -> (i - 1);
        IF pg_catalog.jsonb_typeof(v_job) IS DISTINCT FROM 'object' THEN
            RAISE EXCEPTION 'job % of the batch must be a JSON object', i USING ERRCODE = 'CD010';
        END IF;
        IF v_job - c_job_keys <> '{}'::jsonb THEN
            RAISE EXCEPTION 'job % of the batch: unknown key "%" (allowed: %)', i,
                (SELECT k.key FROM jsonb_object_keys(v_job - c_job_keys) AS k(key) LIMIT 1),
                pg_catalog.array_to_string(c_job_keys, ', ')
                USING ERRCODE = 'CD010';
        END IF;
        IF pg_catalog.jsonb_typeof(v_job -> 'queue') IS DISTINCT FROM 'string' THEN
            RAISE EXCEPTION 'job % of the batch needs a "queue": the name of a queue of the project', i
                USING ERRCODE = 'CD010';
        END IF;
        v_problem := codity._job_spec_problem(v_job - 'queue');
        IF v_problem IS NOT NULL THEN
            RAISE EXCEPTION 'job % of the batch is invalid: %', i, v_problem USING ERRCODE = 'CD010';
        END IF;
        IF octet_length(coalesce(v_job -> 'payload', '{}'::jsonb)::text) > 65536 THEN
            RAISE EXCEPTION 'payload of job % of the batch is % bytes; the limit is 65536', i,
                octet_length((v_job -> 'payload')::text)
                USING ERRCODE = 'CD011', HINT = 'Store large data elsewhere and put a reference in the payload.';
        END IF;
        IF NOT v_queue_by_name ? (v_job ->> 'queue') THEN
            v_queue := codity._queue(v_job ->> 'queue', p_project_id);  -- CD001 when unknown
            v_queue_by_name := v_queue_by_name || jsonb_build_object(v_queue.name, v_queue.id);
            v_default_attempts := v_default_attempts || jsonb_build_object(v_queue.name, v_queue.max_attempts);
        END IF;
        v_queue_ids := v_queue_ids || (v_queue_by_name ->> (v_job ->> 'queue'))::bigint;
        v_attempts := v_attempts || coalesce((v_job ->> 'max_attempts')::integer,
                                             (v_default_attempts ->> (v_job ->> 'queue'))::integer);
    END LOOP;

    SELECT w.nodes - (SELECT pg_catalog.count(*)::integer FROM codity.jobs c
                      WHERE c.workflow_id = p_batch_id AND c.node_key IS NOT NULL)
    INTO v_members FROM codity.workflows w WHERE w.id = p_batch_id;
    IF v_members + v_n > 100000 THEN
        RAISE EXCEPTION 'a batch holds at most 100000 jobs; it has %, and % more were given', v_members, v_n
            USING ERRCODE = 'CD010', HINT = 'Start another batch.';
    END IF;
    IF v_n = 0 THEN
        RETURN;
    END IF;

    v_ids := ARRAY(SELECT pg_catalog.nextval('codity.jobs_id_seq') FROM generate_series(1, v_n));
    INSERT INTO codity.jobs AS j
        (id, queue_id, project_id, task, payload, priority, status, run_at, max_attempts,
         workflow_id, deps_remaining, created_at, updated_at)
    OVERRIDING SYSTEM VALUE
    SELECT v_ids[s.ord], v_queue_ids[s.ord], p_project_id, s.job ->> 'task',
           coalesce(s.job -> 'payload', '{}'::jsonb),
           coalesce((s.job ->> 'priority')::smallint, 0::smallint),
           CASE WHEN coalesce((s.job ->> 'run_at')::timestamptz, p_now) <= p_now THEN 'queued'::codity.job_status
                ELSE 'scheduled'::codity.job_status END,
           coalesce((s.job ->> 'run_at')::timestamptz, p_now),
           v_attempts[s.ord], p_batch_id, 0, p_now, p_now
    FROM jsonb_array_elements(p_jobs) WITH ORDINALITY AS s(job, ord)
    ORDER BY s.ord;

    -- The callbacks, in (queue, id) order: the order a settlement takes them in.
    INSERT INTO codity.job_deps
        (queue_id, parent_id, child_queue_id, child_id, child_depth, project_id, workflow_id, on_failure)
    SELECT v_queue_ids[g], v_ids[g], c.queue_id, c.id, 1, p_project_id, p_batch_id,
           CASE c.node_key WHEN 'all_done' THEN 'ignore' WHEN 'any_dead' THEN 'run' ELSE 'cancel' END
    FROM codity.jobs c, generate_series(1, v_n) AS g
    WHERE c.workflow_id = p_batch_id AND c.node_key IS NOT NULL;
    GET DIAGNOSTICS v_callbacks = ROW_COUNT;
    v_callbacks := v_callbacks / v_n;
    -- Locked one by one, in (queue, id) order: Citus locks no rows of several shards in one
    -- statement, and a batch has at most three callbacks.
    FOR v_lock IN
        SELECT c.queue_id, c.id FROM codity.jobs c
        WHERE c.workflow_id = p_batch_id AND c.node_key IS NOT NULL
        ORDER BY c.queue_id, c.id
    LOOP
        PERFORM 1 FROM codity.jobs c WHERE c.queue_id = v_lock.queue_id AND c.id = v_lock.id FOR UPDATE;
    END LOOP;
    UPDATE codity.jobs c SET deps_remaining = c.deps_remaining + v_n, updated_at = p_now
    WHERE c.workflow_id = p_batch_id AND c.node_key IS NOT NULL AND c.status = 'waiting';
    UPDATE codity.workflows w SET nodes = w.nodes + v_n, edges = w.edges + v_n * v_callbacks
    WHERE w.id = p_batch_id;

    PERFORM codity._notify(q.id)
    FROM codity.queues q
    WHERE q.id IN (SELECT v_queue_ids[g] FROM generate_series(1, v_n) AS g
                   WHERE coalesce((p_jobs -> (g - 1) ->> 'run_at')::timestamptz, p_now) <= p_now)
      AND NOT q.is_paused;

    RETURN QUERY
    SELECT v_ids[g], v_queue_ids[g],
           CASE WHEN coalesce((p_jobs -> (g - 1) ->> 'run_at')::timestamptz, p_now) <= p_now THEN 'queued'::codity.job_status
                ELSE 'scheduled'::codity.job_status END
    FROM generate_series(1, v_n) AS g
    ORDER BY g;
END;
$$;

COMMENT ON FUNCTION codity._add_batch_members(bigint, bigint, jsonb, timestamptz) IS
'Private: insert jobs as members of an open batch, each with an edge to every callback, whose counts grow by as many.';

REVOKE ALL ON FUNCTION codity._add_batch_members(bigint, bigint, jsonb, timestamptz) FROM PUBLIC;
