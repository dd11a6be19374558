-- Codity schema, version 26: the same rules on codity.jobs and codity.job_executions, in
-- three CHECK constraints instead of sixteen.
--
-- Why: PostgreSQL prepares every CHECK constraint of a table afresh for each statement that
-- writes it: it parses the stored expression tree from text, plans it and builds its
-- evaluator, once per constraint, before the first row (ExecRelCheck). The claim, the
-- completion and a single enqueue each write codity.jobs in one statement, so they paid for
-- eleven constraints every time: about 29 us of server CPU per statement, measured as a
-- single-row UPDATE of a copy of the table with and without them (pgbench, one client).
-- The same rules as one constraint cost about 6 us: most of the price is per constraint,
-- not per rule. With the claim and the completion of a few jobs per call (the default
-- capacity of 5, a pickup, a single enqueue) that is a share of every call
-- (docs/DESIGN_DECISIONS.md 58; docs/PERFORMANCE.md, issue 12).
--
-- What stays the same: every rule, word for word, and when it is checked. A CHECK fails
-- when its expression is false and passes when it is true or NULL; an AND of the old
-- expressions is false exactly when one of them is false, so a row passes the new
-- constraints exactly when it passed the old ones (NULL idempotency keys and results pass
-- as before). Two constraints on codity.jobs keep the two kinds of rule apart in an error
-- message: jobs_fields_valid (what a caller sends; the functions check it first and raise
-- CD010/CD011, so only a direct write can break it) and jobs_state_consistent (how status,
-- counters and timestamps agree; only a bug or an injected fault breaks it). The status
-- lists are array constants ('{...}'::codity.job_status[]): one constant to read back per
-- list instead of an ARRAY[...] of one constant per status, folded again at every
-- statement.
--
-- Locks: ACCESS EXCLUSIVE on both tables while the new constraints are validated (one scan
-- of each; every row already obeys the same rules). Claims and completions wait for it.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0025_housekeeping_indexes

ALTER TABLE codity.jobs
    DROP CONSTRAINT jobs_task_nonempty,
    DROP CONSTRAINT jobs_priority_range,
    DROP CONSTRAINT jobs_max_attempts_range,
    DROP CONSTRAINT jobs_idempotency_key_length,
    DROP CONSTRAINT jobs_payload_size,
    DROP CONSTRAINT jobs_attempt_bounds,
    DROP CONSTRAINT jobs_counters_nonnegative,
    DROP CONSTRAINT jobs_finished_iff_terminal,
    DROP CONSTRAINT jobs_held_has_claim_time,
    DROP CONSTRAINT jobs_lease_iff_held,
    DROP CONSTRAINT jobs_running_has_start,
    ADD CONSTRAINT jobs_fields_valid CHECK (
        -- task: 1 to 200 characters
        length(task) >= 1 AND length(task) <= 200
        -- priority: -1000 to 1000, higher runs first
        AND priority >= -1000 AND priority <= 1000
        -- max_attempts: 1 to 1000
        AND max_attempts >= 1 AND max_attempts <= 1000
        -- idempotency_key: 1 to 200 characters when present
        AND length(idempotency_key) >= 1 AND length(idempotency_key) <= 200
        -- payload: at most 64 KB of JSON text
        AND octet_length(payload::text) <= 65536
    ),
    ADD CONSTRAINT jobs_state_consistent CHECK (
        -- 0 <= attempt <= max_attempts; the fence and the crash count never go below 0
        attempt >= 0 AND attempt <= max_attempts
        AND execution_seq >= 0 AND crash_count >= 0
        -- finished_at exactly when completed, dead or cancelled
        AND (status = ANY ('{completed,dead_letter,cancelled}'::codity.job_status[]))
            = (finished_at IS NOT NULL)
        -- a lease exactly when claimed or running, and a claim time with it
        AND (status = ANY ('{claimed,running}'::codity.job_status[]))
            = (lock_expires_at IS NOT NULL)
        AND (status <> ALL ('{claimed,running}'::codity.job_status[]) OR claimed_at IS NOT NULL)
        -- running means started
        AND (status <> 'running' OR started_at IS NOT NULL)
    );

ALTER TABLE codity.job_executions
    DROP CONSTRAINT job_executions_seq_positive,
    DROP CONSTRAINT job_executions_closed,
    DROP CONSTRAINT job_executions_finished_iff_closed,
    DROP CONSTRAINT job_executions_refund_only_when_requeued,
    DROP CONSTRAINT job_executions_result_size,
    ADD CONSTRAINT job_executions_consistent CHECK (
        -- the fence and the attempt count from 1
        execution_seq >= 1 AND attempt >= 1
        -- written when the attempt ends (migration 0013): always closed, never open
        AND finished_at IS NOT NULL
        AND (status = ANY ('{claimed,running}'::codity.execution_status[])) = (finished_at IS NULL)
        -- only an attempt that was reaped or released is refunded
        AND (NOT attempt_refunded OR status = ANY ('{reaped,released}'::codity.execution_status[]))
        -- result: at most 64 KB of JSON text
        AND octet_length(result::text) <= 65536
    );
