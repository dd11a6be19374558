-- codity.complete_many: running -> completed for a batch of jobs, in one round trip.
--
-- A worker finishing hundreds of short jobs a second reports them in batches (River's
-- batch completer); the audit row of each execution is written in the next statement, the
-- only time it is written (migration 0013).
-- Fenced per job: a stale fence changes nothing and is recorded ('stale'); a job already
-- completed with this fence — a repeat after a lost COMMIT — is accepted as
-- 'already_applied' and changes nothing, so a client may always resend a batch whose
-- outcome it does not know. A job named twice is completed once, with the first result.
-- One queue per call (DESIGN.md, "Room to scale out", rules 1 and 2): the body takes the
-- queue's id and every statement filters on it; a job of another queue is unknown to it
-- (CD003). complete_many(job_ids, fences, results), which callers have always used, is a
-- wrapper that calls the body once per queue of the batch and answers in input order.
-- Locks: the UPDATE locks the matching rows; the worker never sends a heartbeat and a
-- batch at the same time, so lock order between its own calls cannot deadlock.
-- Callers: the Python worker's completer, codity.complete.
--
-- p_waited_ms: for each job, how long it waited in the worker between the claim's answer and
-- its handler's start (a prefetched job waits for a slot), measured on the worker's
-- monotonic clock. started_at, the claim's time for a job claimed with p_start, moves on by
-- that much, never past the finish: the time stays the database's (migration 0041;
-- docs/DESIGN_DECISIONS.md 74). NULL (or 0 for a job) leaves started_at as it is.
--
-- p_durable => false commits the batch without waiting for its WAL to reach disk
-- (synchronous_commit off for the rest of this transaction; docs/DESIGN_DECISIONS.md 44):
-- the Python worker's completions, which the reaper makes good after a server crash (one
-- re-run, fenced). Ignored while synchronous_standby_names is set: a failover pair's
-- completions wait for the standby like any commit (docs/DESIGN_DECISIONS.md 67). The setting is made in the body, not by the caller, so that on a Citus
-- cluster it applies where the body runs and commits, on the node that holds the queue
-- (a caller's set_config stays on the coordinator, and a second item in the call's FROM
-- stops Citus from sending the call there whole; docs/DESIGN_DECISIONS.md 61).

CREATE OR REPLACE FUNCTION codity.complete_many_in_queue(
    p_queue_id bigint,
    p_job_ids bigint[],
    p_fences integer[],
    p_results jsonb[] DEFAULT NULL,
    p_now timestamptz DEFAULT now(),
    p_durable boolean DEFAULT true,
    p_waited_ms integer[] DEFAULT NULL
)
RETURNS TABLE (
    job_id bigint,
    accepted boolean,
    outcome codity.call_outcome,
    job_status codity.job_status,
    detail text
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_done bigint[];
    v_project_ids bigint[];
    v_fences integer[];
    v_attempts integer[];
    v_worker_ids bigint[];
    v_claimed_at timestamptz[];
    v_started_at timestamptz[];
    v_results jsonb[];
    v_nodes bigint[];
BEGIN
    IF p_now IS DISTINCT FROM pg_catalog.now() THEN  -- the common case without a statement
        PERFORM codity._check_clock(p_now);
    END IF;
    PERFORM codity._check_fence_arrays(p_job_ids, p_fences);
    PERFORM codity._check_results(p_job_ids, p_results);
    IF p_waited_ms IS NOT NULL
       AND (cardinality(p_waited_ms) <> cardinality(p_job_ids) OR 0 > ANY (p_waited_ms)) THEN
        RAISE EXCEPTION 'waited_ms must be NULL or hold one count of 0 or more per job (% jobs, % counts)',
                        cardinality(p_job_ids), cardinality(p_waited_ms)
            USING ERRCODE = 'CD010';
    END IF;
    PERFORM codity._check_transition('running', 'completed');
    -- Not with a synchronous standby asked for: whoever set one wants every commit that was
    -- acknowledged to survive the primary's loss, and one not yet on the standby does not
    -- (issue 25: 10-50 completions per kill -9 of a pg_auto_failover primary).
    IF NOT coalesce(p_durable, true)
       AND pg_catalog.current_setting('synchronous_standby_names') = '' THEN
        PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    END IF;

    WITH batch AS (
        SELECT DISTINCT ON (b.job_id, b.fence) b.job_id, b.fence, p_results[b.ord] AS result,
               p_waited_ms[b.ord] AS waited_ms
        FROM unnest(p_job_ids, p_fences) WITH ORDINALITY AS b(job_id, fence, ord)
        ORDER BY b.job_id, b.fence, b.ord
    ),
    done AS (
        UPDATE codity.jobs j
        SET status = 'completed', finished_at = p_now, lock_expires_at = NULL, updated_at = p_now,
            started_at = codity._began(j.started_at, b.waited_ms, p_now)
        FROM batch b
        WHERE j.queue_id = p_queue_id AND j.id = b.job_id
          AND j.execution_seq = b.fence AND j.status = 'running'
        RETURNING j.id, j.project_id, j.execution_seq, j.attempt, j.worker_id,
                  j.claimed_at, j.started_at, b.result, j.workflow_id
    )
    SELECT coalesce(array_agg(d.id), '{}'), array_agg(d.project_id),
           array_agg(d.execution_seq), array_agg(d.attempt), array_agg(d.worker_id),
           array_agg(d.claimed_at), array_agg(d.started_at), array_agg(d.result),
           array_agg(d.id) FILTER (WHERE d.workflow_id IS NOT NULL)
    INTO v_done, v_project_ids, v_fences, v_attempts, v_worker_ids, v_claimed_at,
         v_started_at, v_results, v_nodes
    FROM done d;

    -- The execution rows in a statement of their own, from the arrays: an INSERT inside a
    -- CTE is never router-planned by Citus (DESIGN.md, "Room to scale out", rule 3).
    INSERT INTO codity.job_executions
        (job_id, queue_id, project_id, execution_seq, attempt, worker_id, status, claimed_at,
         started_at, finished_at, result)
    SELECT d.job_id, p_queue_id, d.project_id, d.fence, d.attempt, d.worker_id, 'completed',
           d.claimed_at, d.started_at, p_now, d.result
    FROM unnest(v_done, v_project_ids, v_fences, v_attempts, v_worker_ids,
                v_claimed_at, v_started_at, v_results)
         AS d(job_id, project_id, fence, attempt, worker_id, claimed_at, started_at,
              result);

    -- Workflow nodes (never a plain job): the jobs that run after them are told in this
    -- transaction, and the last parent's completion releases them (codity._settle_children);
    -- on a Citus cluster codity.tick does, from a row left on this queue's shard
    -- (codity._settle_nodes).
    IF v_nodes IS NOT NULL THEN
        PERFORM codity._settle_nodes(p_queue_id, v_nodes, 'completed', p_now);
    END IF;

    RETURN QUERY
    SELECT * FROM codity._fenced_batch_outcome(
        p_queue_id, p_job_ids, p_fences, v_done, 'completed', 'completed', 'complete', p_now);
END;
$$;

COMMENT ON FUNCTION codity.complete_many_in_queue(bigint, bigint[], integer[], jsonb[], timestamptz, boolean, integer[]) IS
'Complete a batch of running jobs of one queue in one call, with optional results; fenced per job like codity.complete.

One row per input position, in order. outcome is applied; already_applied (completed
before with this fence, e.g. the batch is being resent after a lost COMMIT, or a repeat
within the batch: nothing changed); or stale (accepted = false, nothing changed, rejection
recorded). A job that is held with a current fence but not running raises CD020. Raises
CD003 (no such job in this queue), CD010 (arrays of different lengths or with NULLs, a
negative wait), CD011 (a result over 64 KB). p_waited_ms: per job, the milliseconds it waited
in the worker for a slot after its claim; its started_at moves on by that much, never past
the finish. p_durable => false commits without waiting for the WAL flush
(synchronous_commit off for the rest of the transaction; not while synchronous_standby_names
is set, so a failover loses none): a completion lost to a server
crash leaves its job running under this fence, and the reaper requeues it.
Example: SELECT * FROM codity.complete_many_in_queue(3, ARRAY[42, 43]::bigint[], ARRAY[1, 1]);';

REVOKE ALL ON FUNCTION codity.complete_many_in_queue(bigint, bigint[], integer[], jsonb[], timestamptz, boolean, integer[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.complete_many_in_queue(bigint, bigint[], integer[], jsonb[], timestamptz, boolean, integer[]) TO codity_app, codity_worker;

-- The jobs' queues looked up by id, one body call per queue, answers in input order. The
-- arguments are checked on the whole batch first, so errors name it as it was sent.
CREATE OR REPLACE FUNCTION codity.complete_many(
    p_job_ids bigint[],
    p_fences integer[],
    p_results jsonb[] DEFAULT NULL,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (
    job_id bigint,
    accepted boolean,
    outcome codity.call_outcome,
    job_status codity.job_status,
    detail text
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    PERFORM codity._check_fence_arrays(p_job_ids, p_fences);
    PERFORM codity._check_results(p_job_ids, p_results);
    RETURN QUERY
    SELECT c.job_id, c.accepted, c.outcome, c.job_status, c.detail
    FROM codity._job_groups(p_job_ids) AS g
    CROSS JOIN LATERAL codity.complete_many_in_queue(
        g.queue_id, codity._at(p_job_ids, g.positions), codity._at(p_fences, g.positions),
        codity._at(p_results, g.positions), p_now
    ) WITH ORDINALITY AS c(job_id, accepted, outcome, job_status, detail, n)
    ORDER BY g.positions[c.n];
END;
$$;

COMMENT ON FUNCTION codity.complete_many(bigint[], integer[], jsonb[], timestamptz) IS
'Complete a batch of running jobs in one call, whatever their queues, with optional results; fenced per job like codity.complete.

One row per input position, in order. outcome is applied; already_applied (completed
before with this fence, e.g. the batch is being resent after a lost COMMIT, or a repeat
within the batch: nothing changed); or stale (accepted = false, nothing changed, rejection
recorded). A job that is held with a current fence but not running raises CD020. Looks up
each job''s queue and calls complete_many_in_queue(queue_id, ...) once per queue: a client that
knows the queue calls that directly. Raises CD003 (unknown job), CD010 (arrays of
different lengths or with NULLs), CD011 (a result over 64 KB).
Example: SELECT * FROM codity.complete_many(ARRAY[42, 43]::bigint[], ARRAY[1, 1]);';

REVOKE ALL ON FUNCTION codity.complete_many(bigint[], integer[], jsonb[], timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.complete_many(bigint[], integer[], jsonb[], timestamptz) TO codity_app, codity_worker;
