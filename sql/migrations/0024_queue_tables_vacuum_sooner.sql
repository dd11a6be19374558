-- Codity schema, version 24: autovacuum visits the job tables after far fewer dead rows.
--
-- Every job leaves dead row versions behind: the claim's and the completion's updates, and
-- since migration 0021 the prune's deletes (of the job and its executions). Until vacuum
-- removes them their entries stay in the claim index, and every claim walks past them. At
-- PostgreSQL's defaults a table is vacuumed once a fifth of it is dead, and each pass is
-- throttled: in the 10-minute soak at 11,000 jobs/s (docs/PERFORMANCE.md, "Retention soak")
-- codity.jobs was vacuumed 8 times, grew from 0.9 to 1.3 GB while holding the same number
-- of rows, its claim index doubled and claims took twice as long. A queue's tables are
-- small and hot: vacuum them after 1 % of their rows (and at least 1,000) have died or been
-- inserted, unthrottled. The server's autovacuum_naptime (1 min by default) still bounds how
-- often; the embedded server runs with 10 s, and docs/RUNBOOK.md asks the same of others.
--
-- Locks: SHARE UPDATE EXCLUSIVE on each table for the change (enqueues, claims and
-- completions go on; a running vacuum of the table would be waited for).
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0023_queue_limits

ALTER TABLE codity.jobs SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE codity.job_executions SET (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0);
ALTER TABLE codity.queue_limiters SET (
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);
