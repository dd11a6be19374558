-- codity.claim: hand up to p_limit due jobs of one queue to one worker, atomically.
--
-- Why FOR UPDATE SKIP LOCKED: N workers claiming at the same instant each lock different
-- rows; a row locked by another claim is skipped, not waited for. SELECT-then-UPDATE in
-- two statements hands the same row to two workers; FOR UPDATE alone is correct but
-- serialises every worker behind the first; advisory locks need a lock per job and do not
-- compose with the ordering.
--
-- Why this ORDER BY: (priority DESC, run_at, id) matches codity.jobs_claim_idx term for
-- term, and the index is partial on status = 'queued', so the plan is
-- Limit -> LockRows -> Index Scan, with no Sort node (docs/EXPLAIN.md).
--
-- Why the pick and the UPDATE are two statements: an unfenced LIMIT subquery joined into an
-- UPDATE may be re-evaluated by the planner and lock/update more rows than asked (the
-- planner trap Oban documents). Here the locked rows are in an array before the UPDATE
-- runs, and the UPDATE takes exactly those.
--
-- Why SET plan_cache_mode = force_generic_plan: PostgreSQL chose a plan of its own for the
-- claim at every call (a generic plan cannot know the limit or the time, so its estimate
-- always looked worse), and planning cost more than running: about 270 us of a claim's
-- server time, with the jobs table's thirteen indexes to weigh. The generic plans of these
-- two statements are the ones wanted at any size (Limit -> LockRows -> Index Scan on
-- jobs_claim_idx; the UPDATE by key; ./codity explain checks them), so each session plans
-- them once. Measured with scripts/hot_path_cost.py (docs/PERFORMANCE.md): the
-- claim-and-complete pair's server CPU per job fell by a third with one job per claim and
-- by 12 % with 500.
--
-- Why SET enable_sort = off and enable_seqscan = off: a generic plan is made for the table
-- as it is then, and kept until the table's statistics change. Planned on a table of a few
-- rows, the pick would seq-scan and sort and the UPDATE seq-scan, and keep doing so while a
-- burst of jobs arrived, until the next ANALYZE. Without sorts, the one way left to return
-- the rows in order under a LIMIT is the claim index; without sequential scans, the UPDATE
-- finds its rows by index; whatever the size. The sorts that remain, of the rows claimed,
-- have no other way and are kept (tests/test_generated_docs.py plans a claim on 3 jobs).
--
-- Why the UPDATE finds its rows by ctid, with index scans off for it alone: the rows are
-- locked (FOR UPDATE, this transaction) from the pick on, so no other transaction can
-- update, delete or move them (VACUUM FULL and CLUSTER need a lock the claim's own lock
-- conflicts with), and the ctid the pick returned is where each row stays until the UPDATE
-- writes it (a row another transaction changed after the pick's snapshot is locked in
-- its latest version, and that is the ctid returned). A Tid Scan reads those rows and
-- nothing else, whatever the statistics say. The UPDATE keeps status = 'queued' all the
-- same: no two workers ever get one job, even if a ctid were wrong, since the UPDATE
-- locks what it writes and rechecks it.
-- By id it read the queue's whole history on PostgreSQL 15 whenever the table's
-- statistics made the queue look small: 15 also plans `queue_id = $1 AND id = ANY ($2)`
-- as a range over queue_id on jobs_pkey (the ids a filter), and prices that range by the
-- average queue; with 3,200 queues, one of 20,000 jobs, a claim of 3 read 20,206 index
-- entries (docs/DESIGN_DECISIONS.md 58; tests/test_hot_path_plans.py). Costs alone would
-- not keep the planner off that range (it still chose it over a Tid Scan), so the body
-- turns index and bitmap scans off with set_config(..., true) just before the UPDATE;
-- the SET enable_*scan = on clauses of the header make PostgreSQL restore the caller's
-- values when the function returns (a setting changed inside a function outlives it
-- unless the function's own SET clause names it), and give the pick its index scan
-- whatever the caller set. The queue_id filter stays, for rule 2 of "Room to scale out":
-- Citus sends a statement with its distribution key to the one shard, ctid and all.
--
-- Why SET jit = off: before PostgreSQL 18, a disabled plan node is not removed but priced
-- at 10^10, so the unavoidable sort made every claim's plan cost more than jit_above_cost,
-- and a server built with LLVM (Debian's PostgreSQL 15) compiled each claim: 135 ms of JIT
-- for a 0.1 ms statement, a 1,000-job claim storm 71 s instead of 2. A claim is never
-- worth compiling, at any size (a generic plan over millions of queued jobs crosses the
-- threshold too).
--
-- One queue per call: a statement that locks rows must stay on one queue so the jobs
-- table can later be distributed by queue (DESIGN.md, "Room to scale out"). The body takes
-- the queue's id (rule 1: a name cannot be delegated to the node that holds the queue);
-- claim(worker, 'name', ...), for people and clients that know only the name, resolves it
-- in the worker's project and calls the body.
--
-- Every claimed job gets a new execution_seq (the fence token); the attempt is charged
-- here, and reap and release give it back. The attempt's execution row is written once,
-- when it ends (complete, fail, release, reap, cancel: migration 0013); until then the job
-- row is the record of it (worker, claimed_at, started_at, attempt, fence).
-- A paused queue hands out nothing. Callers: the Python worker, any client.
--
-- Least privilege: the queue is looked up in the worker's own project (the worker row says
-- which; there is no project argument to get wrong), and must be one the worker registered
-- for — any queue of its project when it registered with none (CD023 otherwise). Capacity
-- is not enforced here: it would need the worker's held jobs counted across queues on
-- every claim (docs/DESIGN_DECISIONS.md 27); the worker keeps to it itself.
--
-- Crash isolation: a job whose lease expired before (crash_count > 0, a "suspect") may be
-- the one that kills its worker. Claimed in a batch with healthy jobs, it would take them
-- down with it every time, and the crash cap would dead-letter them all. So a suspect is
-- always claimed alone, and a caller that holds other jobs passes p_suspects => false to
-- get none at all (the Python worker claims suspects only when idle, and claims nothing
-- else while one runs). The crash is then pinned on the job that causes it.
--
-- Limits (migration 0023, docs/DESIGN_DECISIONS.md 54): a queue with max_running hands out
-- a job only while fewer than that many are claimed or running, across all workers; one
-- with rate_limit, at most that many per rate_period_seconds (fixed windows from the epoch,
-- on the database's clock). Its claims lock the queue's limiter row first and count one
-- after another (codity._limit_room), so both hold exactly under any concurrency. A queue
-- without limits skips all of it: one test of two fields its row was read with anyway.
--
-- Claim and start in one write: a caller that runs every job it claims right away passes
-- p_start => true and gets them running (started_at = the claim's time) instead of
-- writing each job row a second time through start_many (migration 0012). The default stays a plain claim, for clients that
-- start each job when its handler begins.

CREATE OR REPLACE FUNCTION codity.claim_in_queue(
    p_queue_id bigint,
    p_worker_id bigint,
    p_limit integer DEFAULT 1,
    p_suspects boolean DEFAULT true,
    p_start boolean DEFAULT false,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (
    job_id bigint,
    fence integer,
    task text,
    payload jsonb,
    attempt integer,
    max_attempts integer,
    priority smallint,
    run_at timestamptz,
    lease_expires_at timestamptz,
    timeout_seconds integer,
    created_at timestamptz,
    crashes integer
)
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_sort = off
SET enable_seqscan = off
SET enable_indexscan = on
SET enable_bitmapscan = on
SET enable_tidscan = on
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_worker record;
    v_queue record;
    v_rows tid[];
    v_suspects boolean[];
    v_cut integer;
    v_lease_expires_at timestamptz;
    v_room integer := p_limit;
    v_limiter record;
BEGIN
    IF p_now IS DISTINCT FROM pg_catalog.now() THEN  -- the common case without a statement
        PERFORM codity._check_clock(p_now);
    END IF;
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'limit must be from 1 to 1000, got %', p_limit USING ERRCODE = 'CD010';
    END IF;
    SELECT w.status, w.project_id, w.queues INTO v_worker FROM codity.workers w WHERE w.id = p_worker_id;
    IF v_worker.status IS NULL THEN
        RAISE EXCEPTION 'worker % does not exist', p_worker_id
            USING ERRCODE = 'CD004', HINT = 'Register with codity.register_worker first.';
    ELSIF v_worker.status <> 'active' THEN
        RAISE EXCEPTION 'worker % is %; it may not claim', p_worker_id, v_worker.status
            USING ERRCODE = 'CD005', HINT = 'Register again to get a new worker id.';
    END IF;
    v_queue := codity._queue(p_queue_id, v_worker.project_id);
    IF cardinality(v_worker.queues) > 0 AND NOT (v_queue.name = ANY (v_worker.queues)) THEN
        RAISE EXCEPTION 'worker % may not claim from queue "%"', p_worker_id, v_queue.name
            USING ERRCODE = 'CD023',
                  DETAIL = pg_catalog.format('It registered for %s.', pg_catalog.array_to_string(v_worker.queues, ', ')),
                  HINT = 'Register a worker for that queue.';
    END IF;
    IF v_queue.is_paused THEN
        RETURN;
    END IF;
    IF v_queue.max_running IS NOT NULL OR v_queue.rate_limit IS NOT NULL THEN
        v_limiter := codity._limit_room(v_queue.id, v_queue.project_id, p_limit,
                                        v_queue.max_running, v_queue.rate_limit,
                                        v_queue.rate_period_seconds, p_now);
        v_room := v_limiter.room;
        IF v_room = 0 THEN
            RETURN;
        END IF;
    END IF;
    -- Times into variables first (DESIGN.md, "Room to scale out", rule 9).
    v_lease_expires_at := p_now + pg_catalog.make_interval(secs => v_queue.lease_seconds);
    PERFORM codity._check_transition('queued', 'claimed');
    IF p_start THEN
        PERFORM codity._check_transition('claimed', 'running');
    END IF;

    -- The rows, locked, in claim order, in a statement of their own: the rows are fixed
    -- before the UPDATE (the planner cannot re-evaluate the LIMIT into it), and both
    -- statements are simple enough for one generic plan per session (the function's SET
    -- plan_cache_mode; see the header).
    WITH picked AS MATERIALIZED (
        SELECT j.ctid, j.id, j.priority, j.run_at, j.crash_count
        FROM codity.jobs j
        WHERE j.queue_id = v_queue.id
          AND j.status = 'queued'
          AND j.run_at <= p_now
          AND (coalesce(p_suspects, true) OR j.crash_count = 0)
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT v_room
        FOR UPDATE SKIP LOCKED
    )
    SELECT pg_catalog.array_agg(p.ctid ORDER BY p.priority DESC, p.run_at, p.id),
           pg_catalog.array_agg(p.crash_count > 0 ORDER BY p.priority DESC, p.run_at, p.id)
    INTO v_rows, v_suspects
    FROM picked p;
    IF v_rows IS NULL THEN
        RETURN;
    END IF;
    -- A suspect (a job with a crash on record) comes alone: when it is first in line the
    -- batch is that one job, otherwise the batch stops before the first suspect. Rows
    -- locked but not taken stay queued (their locks end with this transaction).
    v_cut := pg_catalog.array_position(v_suspects, true);
    IF v_cut IS NOT NULL THEN
        v_rows := v_rows[1:greatest(v_cut - 1, 1)];
    END IF;
    IF v_queue.rate_limit IS NOT NULL THEN  -- count these in the rate window
        UPDATE codity.queue_limiters l
        SET window_start = v_limiter.window_start,
            window_claims = v_limiter.window_claims + pg_catalog.cardinality(v_rows)
        WHERE l.queue_id = v_queue.id;
    END IF;

    -- The locked rows by ctid, and nothing else (see the header).
    PERFORM pg_catalog.set_config('enable_indexscan', 'off', true),
            pg_catalog.set_config('enable_bitmapscan', 'off', true);
    RETURN QUERY
    WITH claimed AS (
        UPDATE codity.jobs j
        SET status = CASE WHEN p_start THEN 'running' ELSE 'claimed' END::codity.job_status,
            worker_id = p_worker_id,
            claimed_at = p_now,
            started_at = CASE WHEN p_start THEN p_now END,
            lock_expires_at = v_lease_expires_at,
            attempt = j.attempt + 1,
            execution_seq = j.execution_seq + 1,
            updated_at = p_now
        WHERE j.queue_id = v_queue.id AND j.ctid = ANY (v_rows) AND j.status = 'queued'
        RETURNING j.id, j.execution_seq, j.task, j.payload, j.attempt, j.max_attempts,
                  j.priority, j.run_at, j.lock_expires_at, j.created_at, j.crash_count
    )
    SELECT c.id, c.execution_seq, c.task, c.payload, c.attempt, c.max_attempts, c.priority,
           c.run_at, c.lock_expires_at, v_queue.job_timeout_seconds, c.created_at, c.crash_count
    FROM claimed c
    ORDER BY c.priority DESC, c.run_at, c.id;
END;
$$;

COMMENT ON FUNCTION codity.claim_in_queue(bigint, bigint, integer, boolean, boolean, timestamptz) IS
'Atomically claim up to p_limit due jobs of one queue, given by id, for a worker; each comes with its fence token.

FOR UPDATE SKIP LOCKED in priority DESC, run_at, id order: concurrent workers never get
the same job. Each claimed job is charged an attempt, leased for the queue''s
lease_seconds and given a new execution (fence = execution_seq) that start, heartbeat,
complete, fail and release must present. A paused queue returns no rows. The queue is one
of the worker''s project, and one it registered for (any of its project''s when it named
none). A job with a crash on record (crashes > 0) comes alone in its batch, and not at
all with p_suspects => false: pass that while the worker holds other jobs, so a job that
kills its worker takes nothing healthy down with it. With p_start => true the jobs come
back already running (claim and start in one write), for a caller that starts all it
claims. Raises CD001 (no queue with this id in the worker''s project), CD004
(unknown worker), CD005 (worker not active),
CD010 (limit outside 1..1000), CD023 (the worker did not register for that queue).
Example: SELECT * FROM codity.claim_in_queue(3, 1, 10, p_start => true);';

REVOKE ALL ON FUNCTION codity.claim_in_queue(bigint, bigint, integer, boolean, boolean, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.claim_in_queue(bigint, bigint, integer, boolean, boolean, timestamptz) TO codity_app, codity_worker;

-- By name: resolved in the worker's project, then the body. An unknown worker passes no
-- queue, and the body says the worker is unknown.
CREATE OR REPLACE FUNCTION codity.claim(
    p_worker_id bigint,
    p_queue text,
    p_limit integer DEFAULT 1,
    p_suspects boolean DEFAULT true,
    p_start boolean DEFAULT false,
    p_now timestamptz DEFAULT now()
)
RETURNS TABLE (
    job_id bigint,
    fence integer,
    task text,
    payload jsonb,
    attempt integer,
    max_attempts integer,
    priority smallint,
    run_at timestamptz,
    lease_expires_at timestamptz,
    timeout_seconds integer,
    created_at timestamptz,
    crashes integer
)
LANGUAGE sql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
    SELECT c.*
    FROM codity.claim_in_queue(
        (SELECT (codity._queue(p_queue, w.project_id)).id FROM codity.workers w WHERE w.id = p_worker_id),
        p_worker_id, p_limit, p_suspects, p_start, p_now) AS c;
$$;

COMMENT ON FUNCTION codity.claim(bigint, text, integer, boolean, boolean, timestamptz) IS
'Atomically claim up to p_limit due jobs of one queue, given by name, for a worker; each comes with its fence token.

FOR UPDATE SKIP LOCKED in priority DESC, run_at, id order: concurrent workers never get
the same job. Each claimed job is charged an attempt, leased for the queue''s
lease_seconds and given a new execution (fence = execution_seq) that start, heartbeat,
complete, fail and release must present. A paused queue returns no rows. The queue is one
of the worker''s project, and one it registered for (any of its project''s when it named
none). A job with a crash on record (crashes > 0) comes alone in its batch, and not at
all with p_suspects => false: pass that while the worker holds other jobs, so a job that
kills its worker takes nothing healthy down with it. With p_start => true the jobs come
back already running (claim and start in one write), for a caller that starts all it
claims. Resolves the name in the worker''s project and calls claim_in_queue(queue_id,
worker, ...): a client that knows the queue''s id (codity.worker_queues) calls that
directly. Raises CD001 (unknown queue), CD004
(unknown worker), CD005 (worker not active),
CD010 (limit outside 1..1000), CD023 (the worker did not register for that queue).
Example: SELECT * FROM codity.claim(1, ''emails'', 10, p_start => true);';

REVOKE ALL ON FUNCTION codity.claim(bigint, text, integer, boolean, boolean, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.claim(bigint, text, integer, boolean, boolean, timestamptz) TO codity_app, codity_worker;
