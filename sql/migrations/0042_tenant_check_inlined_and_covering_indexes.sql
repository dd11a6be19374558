-- Codity schema, version 42: row-level security's tenant check costs a comparison per row,
-- the finished-state indexes carry the project, so the dashboard's counts stay in them,
-- and waiting jobs get an index of their own.
--
-- Found with `codity bench-dashboard` at 1,000,000 jobs (2026-12-07): the overview, the
-- queues page and the jobs list took 3-3.5 s, against 20-75 ms on 2026-12-03. Three causes:
--
-- 1. Since migration 0015 every policy compares the row's project_id with
--    codity.current_project_id(), a SQL function with its own search_path, which
--    PostgreSQL cannot inline: it ran as a function call per row read, with a GUC save
--    and restore each time, about 3 us a row, so each capped count of 10,000 rows cost
--    30 ms and a page of the overview made dozens of them. Without the SET clause the
--    function is inlined into every policy: the row's project_id is compared with the
--    setting read in place. The policies stay as they are (rule 8 of DESIGN.md: the row
--    and a setting, no subquery). A scalar subquery, (SELECT codity.current_project_id()),
--    would be cheaper still, read once per statement (the queue page's counts in 49 ms
--    against 94 here), but Citus refuses it: "Subqueries are not supported in policies
--    on distributed tables" (tried on the test cluster, 2026-12-07).
-- 2. Counting jobs of a finished state (completed, failed, dead_letter, cancelled: most of
--    the table under retention) or a backlog (queued) visited the heap for every row, to
--    read project_id for the policy. With project_id in those partial indexes (INCLUDE),
--    the count is an index-only scan once autovacuum has marked the pages all-visible, as
--    finished jobs' pages soon are, and a backlog's that waits. It costs 8 bytes more per
--    entry: one entry at enqueue (jobs_claim_idx) and one at the finish, against about
--    1,800 bytes of WAL per job. The promote and lease indexes are left as they are:
--    scheduled and held jobs are few, and held rows change all the time.
--
-- Locks: the functions' catalogue rows (instant). The five indexes are rebuilt in this
-- transaction: SHARE on codity.jobs while they build, so enqueues and state changes wait
-- and reads go on (about 2 s per 1,000,000 finished jobs on this machine's 2 cores).
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0041_attempts_start_when_their_handler_does

-- Inlinable: no SET clause (PostgreSQL never inlines a function that has one), every name
-- qualified, and the comparison through OPERATOR(pg_catalog.=), so the body means the same
-- whatever the caller's search_path. Not SECURITY DEFINER: it runs as its caller, who may
-- set the tenant setting anyway. Same result as before for every value of the setting.
CREATE OR REPLACE FUNCTION codity.current_project_id()
RETURNS bigint
LANGUAGE sql
STABLE
PARALLEL SAFE
AS $$
SELECT CASE WHEN pg_catalog.current_setting('codity.project_id', true) OPERATOR(pg_catalog.=) ''
            THEN NULL
            ELSE pg_catalog.current_setting('codity.project_id', true)::pg_catalog.int8 END
$$;

CREATE OR REPLACE FUNCTION codity.current_org_id()
RETURNS bigint
LANGUAGE sql
STABLE
PARALLEL SAFE
AS $$
SELECT CASE WHEN pg_catalog.current_setting('codity.org_id', true) OPERATOR(pg_catalog.=) ''
            THEN NULL
            ELSE pg_catalog.current_setting('codity.org_id', true)::pg_catalog.int8 END
$$;

DROP INDEX codity.jobs_claim_idx;
CREATE INDEX jobs_claim_idx ON codity.jobs (queue_id, priority DESC, run_at, id) INCLUDE (project_id)
    WHERE status = 'queued';
DROP INDEX codity.jobs_completed_idx;
CREATE INDEX jobs_completed_idx ON codity.jobs (queue_id, id) INCLUDE (project_id)
    WHERE status = 'completed';
DROP INDEX codity.jobs_failed_idx;
CREATE INDEX jobs_failed_idx ON codity.jobs (queue_id, id) INCLUDE (project_id)
    WHERE status = 'failed';
DROP INDEX codity.jobs_dead_letter_idx;
CREATE INDEX jobs_dead_letter_idx ON codity.jobs (queue_id, id) INCLUDE (project_id)
    WHERE status = 'dead_letter';
DROP INDEX codity.jobs_cancelled_idx;
CREATE INDEX jobs_cancelled_idx ON codity.jobs (queue_id, id) INCLUDE (project_id)
    WHERE status = 'cancelled';

-- 3. The jobs list counts each state tab, and 'waiting' (a workflow's job whose parents
--    have not finished, migration 0036) had no index of its own: its count read every job
--    of every queue, 1.5 s at 1,000,000 jobs, on every load of the jobs list. Only
--    workflow jobs ever enter this index, and leave it when released.
CREATE INDEX jobs_waiting_idx ON codity.jobs (queue_id, id) INCLUDE (project_id)
    WHERE status = 'waiting';
