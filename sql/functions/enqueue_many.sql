-- codity.enqueue_many: insert a batch of jobs into one queue in one statement.
--
-- Why this shape: a JSON array of job objects is something every client library can
-- send, and one INSERT ... SELECT is one round trip for a thousand jobs. Ids are drawn
-- from the identity sequence up front (OVERRIDING SYSTEM VALUE) so each result row can
-- be matched to its position in the input even when idempotency conflicts skip rows.
--
-- Idempotency: a unique index on (queue_id, idempotency_key) over the jobs with a key
-- (migration 0013), with ON CONFLICT DO NOTHING. A concurrent enqueue with the same key
-- waits on the unique index until the other transaction ends, then finds its job; duplicates inside one batch collapse to one job.
--
-- Locks: none beyond the inserted rows (and the unique-index wait above).
-- NOTIFY: not from the body, which Citus may run on another node, where the queue's workers
-- would never hear it (DESIGN.md, "Room to scale out", rule 10). enqueue_many by name, on
-- the caller's side, raises one codity_v1 hint for the queue when the batch holds a job due
-- now (one that matched an idempotency key included: a wakeup is a hint, never a promise);
-- a client that calls the body wakes the queue itself: pg_notify('codity_v1', queue_id).
-- By queue id (DESIGN.md, "Room to scale out", rule 1): the body takes the queue's id;
-- enqueue_many('name', ...), which callers have always used, resolves the name in the
-- project and calls it.
-- Callers: codity.enqueue, the web API, Python's registry.enqueue, any client.

CREATE OR REPLACE FUNCTION codity.enqueue_many_in_queue(
    p_queue_id bigint,
    p_jobs jsonb,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (
    job_position integer,
    job_id bigint,
    job_status codity.job_status,
    run_at timestamptz,
    is_new boolean
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue record := codity._queue(p_queue_id, NULL);
    v_batch record;
    v_problem text;
    v_size integer;
    v_inserted integer;
BEGIN
    PERFORM codity._check_clock(p_now);
    IF jsonb_typeof(p_jobs) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'jobs must be a JSON array of job objects'
            USING ERRCODE = 'CD010',
                  HINT = 'Example: [{"task": "emails.send", "payload": {"to": "a@example.com"}}]';
    END IF;
    IF jsonb_array_length(p_jobs) > 10000 THEN
        RAISE EXCEPTION 'a batch holds at most 10000 jobs, got %', jsonb_array_length(p_jobs)
            USING ERRCODE = 'CD010', HINT = 'Split the batch.';
    END IF;

    -- One pass over the batch: the first invalid job, the first oversized payload, and ids
    -- from the sequence, so the rows can be found again without an INSERT inside a CTE, which Citus
    -- never plans on one node (DESIGN.md, "Room to scale out", rule 3).
    SELECT pg_catalog.min(c.ord) FILTER (WHERE c.problem IS NOT NULL) AS bad_ord,
           pg_catalog.min(c.ord) FILTER (WHERE c.size > 65536) AS big_ord,
           pg_catalog.array_agg(pg_catalog.nextval('codity.jobs_id_seq') ORDER BY c.ord) AS ids,
           coalesce(pg_catalog.bool_or(c.spec ->> 'idempotency_key' IS NOT NULL), false) AS keyed
    INTO v_batch
    FROM (
        SELECT e.ord::integer AS ord, e.spec, codity._job_spec_problem(e.spec) AS problem,
               octet_length(coalesce(e.spec -> 'payload', '{}'::jsonb)::text) AS size
        FROM jsonb_array_elements(p_jobs) WITH ORDINALITY AS e(spec, ord)
    ) AS c;
    IF v_batch.bad_ord IS NOT NULL THEN
        v_problem := codity._job_spec_problem(p_jobs -> (v_batch.bad_ord - 1));
        RAISE EXCEPTION '%', CASE WHEN jsonb_array_length(p_jobs) = 1 THEN 'invalid job: ' || v_problem
                                  ELSE format('job %s of the batch is invalid: %s', v_batch.bad_ord, v_problem) END
            USING ERRCODE = 'CD010';
    END IF;
    IF v_batch.big_ord IS NOT NULL THEN
        v_size := octet_length((p_jobs -> (v_batch.big_ord - 1) -> 'payload')::text);
        RAISE EXCEPTION '%', CASE WHEN jsonb_array_length(p_jobs) = 1 THEN format('payload is %s bytes; the limit is 65536', v_size)
                                  ELSE format('payload of job %s is %s bytes; the limit is 65536', v_batch.big_ord, v_size) END
            USING ERRCODE = 'CD011',
                  HINT = 'Store large data elsewhere and put a reference in the payload.';
    END IF;

    INSERT INTO codity.jobs AS j
        (id, queue_id, project_id, task, payload, priority, status, run_at, max_attempts,
         idempotency_key, created_at, updated_at)
    OVERRIDING SYSTEM VALUE
    SELECT v_batch.ids[s.ord], v_queue.id, v_queue.project_id, s.task, s.payload, s.priority,
           CASE WHEN s.run_at <= p_now THEN 'queued'::codity.job_status
                ELSE 'scheduled'::codity.job_status END,
           s.run_at, s.max_attempts, s.idempotency_key, p_now, p_now
    FROM (
        SELECT e.ord::integer AS ord,
               e.spec ->> 'task' AS task,
               coalesce(e.spec -> 'payload', '{}'::jsonb) AS payload,
               coalesce((e.spec ->> 'priority')::smallint, 0::smallint) AS priority,
               coalesce((e.spec ->> 'run_at')::timestamptz, p_now) AS run_at,
               e.spec ->> 'idempotency_key' AS idempotency_key,
               coalesce((e.spec ->> 'max_attempts')::integer, v_queue.max_attempts) AS max_attempts
        FROM jsonb_array_elements(p_jobs) WITH ORDINALITY AS e(spec, ord)
    ) AS s
    ORDER BY s.ord
    ON CONFLICT (queue_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;
    GET DIAGNOSTICS v_inserted = ROW_COUNT;
    -- Only a job with a key can have been left out. Where one could, the rows that went in
    -- are counted by their ids: on a Citus cluster an INSERT ... SELECT is sent to the shard
    -- from the coordinator's side, and its row count is the rows sent, not those kept.
    IF v_batch.keyed THEN
        SELECT pg_catalog.count(*)::integer INTO v_inserted
        FROM codity.jobs j
        WHERE j.queue_id = v_queue.id AND j.id = ANY (v_batch.ids);
    END IF;

    IF v_inserted = cardinality(v_batch.ids) THEN
        -- Every job went in as described: each position's answer is known without a read.
        RETURN QUERY
        SELECT e.ord::integer, v_batch.ids[e.ord],
               CASE WHEN coalesce((e.spec ->> 'run_at')::timestamptz, p_now) <= p_now
                    THEN 'queued'::codity.job_status ELSE 'scheduled'::codity.job_status END,
               coalesce((e.spec ->> 'run_at')::timestamptz, p_now), true
        FROM jsonb_array_elements(p_jobs) WITH ORDINALITY AS e(spec, ord)
        ORDER BY e.ord;
    ELSE
        -- Each position's job: the one inserted under its id, else the one holding its key.
        -- This is a new statement, so it sees a concurrent enqueue that committed meanwhile.
        RETURN QUERY
        SELECT e.ord::integer, f.id, f.status, f.run_at, f.id = v_batch.ids[e.ord]
        FROM jsonb_array_elements(p_jobs) WITH ORDINALITY AS e(spec, ord)
        CROSS JOIN LATERAL (
            (SELECT j.id, j.status, j.run_at FROM codity.jobs j
             WHERE j.queue_id = v_queue.id AND j.id = v_batch.ids[e.ord])
            UNION ALL
            (SELECT j.id, j.status, j.run_at FROM codity.jobs j
             WHERE j.queue_id = v_queue.id AND j.idempotency_key = e.spec ->> 'idempotency_key')
            LIMIT 1
        ) AS f
        ORDER BY e.ord;
    END IF;
END;
$$;

COMMENT ON FUNCTION codity.enqueue_many_in_queue(bigint, jsonb, timestamptz) IS
'Insert a batch of jobs (a JSON array of objects) into one queue, given by id, honouring idempotency keys.

Each object takes task (required), payload, run_at, priority (-1000..1000, higher first),
idempotency_key and max_attempts (default: the queue''s). Jobs due now start queued, later
ones scheduled. One row comes back per input position: is_new is false when an
idempotency key matched an existing job, whose id is returned instead. Nothing is written
when any object is invalid (CD010) or a payload exceeds 64 KB (CD011). Raises no
NOTIFY (the caller wakes the queue''s workers: pg_notify(''codity_v1'', queue_id::text)).
Raises CD001 (no queue with this id).
Example: SELECT * FROM codity.enqueue_many_in_queue(3, ''[{"task": "emails.send", "payload": {"to": "a@example.com"}}, {"task": "emails.send", "idempotency_key": "welcome-42"}]'');';

REVOKE ALL ON FUNCTION codity.enqueue_many_in_queue(bigint, jsonb, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.enqueue_many_in_queue(bigint, jsonb, timestamptz) TO codity_app, codity_worker;

-- By name, within a project (the default one when none is given), then the body; then the
-- wakeup, from this side (rule 10). EXISTS stops at the first due job, usually the first.
CREATE OR REPLACE FUNCTION codity.enqueue_many(
    p_queue text,
    p_jobs jsonb,
    p_project_id bigint DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (
    job_position integer,
    job_id bigint,
    job_status codity.job_status,
    run_at timestamptz,
    is_new boolean
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue record := codity._queue(p_queue, p_project_id);
BEGIN
    RETURN QUERY
    SELECT e.job_position, e.job_id, e.job_status, e.run_at, e.is_new
    FROM codity.enqueue_many_in_queue(v_queue.id, p_jobs, p_now) AS e;
    -- The body has validated every job, so each run_at casts.
    IF NOT v_queue.is_paused AND EXISTS (
        SELECT 1 FROM jsonb_array_elements(p_jobs) AS e(spec)
        WHERE coalesce((e.spec ->> 'run_at')::timestamptz, p_now) <= p_now
    ) THEN
        PERFORM codity._notify(v_queue.id);
    END IF;
END;
$$;

COMMENT ON FUNCTION codity.enqueue_many(text, jsonb, bigint, timestamptz) IS
'Insert a batch of jobs (a JSON array of objects) into one queue, given by name, honouring idempotency keys.

Each object takes task (required), payload, run_at, priority (-1000..1000, higher first),
idempotency_key and max_attempts (default: the queue''s). Jobs due now start queued, later
ones scheduled. One row comes back per input position: is_new is false when an
idempotency key matched an existing job, whose id is returned instead. Nothing is written
when any object is invalid (CD010) or a payload exceeds 64 KB (CD011). Raises one
codity_v1 NOTIFY for the queue when the batch holds a job due now (unless the queue is
paused). Resolves the name in the project
(the default project when p_project_id is NULL) and calls enqueue_many_in_queue(queue_id, ...).
Raises CD001 (unknown queue), CD002 (unknown project).
Example: SELECT * FROM codity.enqueue_many(''emails'', ''[{"task": "emails.send", "payload": {"to": "a@example.com"}}, {"task": "emails.send", "idempotency_key": "welcome-42"}]'');';

REVOKE ALL ON FUNCTION codity.enqueue_many(text, jsonb, bigint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.enqueue_many(text, jsonb, bigint, timestamptz) TO codity_app, codity_worker;
