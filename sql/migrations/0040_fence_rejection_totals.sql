-- Codity schema, version 40: fence rejections are pruned, their count kept (issue 29).
--
-- codity.fence_rejections grew for as long as Codity ran: nothing deleted a row, because
-- /metrics reports codity_fence_rejections_total by counting them, and a counter must not
-- fall. Now codity.prune_housekeeping deletes the rejections older than a period (30 days by
-- default) and, in the same transaction, adds how many it deleted per project and queue to
-- codity.fence_rejection_totals; /metrics reports the totals plus the rows left, so the
-- counter never falls (as codity.queue_totals does for the jobs, migration 0022).
--
-- 1. codity.fence_rejection_totals: one row per (project, queue); either may be NULL, as on
--    a rejection about a job that never existed, and NULLs are one key (NULLS NOT DISTINCT).
--    Row-level security by project like fence_rejections; on a Citus cluster a reference
--    table like it (codity.db.citus).
-- 2. codity.prune_housekeeping takes p_keep_fence_rejections and answers fence_rejections:
--    its old signature is dropped here, the function file creates the new one.
--
-- Locks: a new, empty table; DROP FUNCTION takes a lock on the function only.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0039_workflow_events

CREATE TABLE codity.fence_rejection_totals (
    project_id  bigint,
    queue_id    bigint,
    rejections  bigint NOT NULL,
    CONSTRAINT fence_rejection_totals_key UNIQUE NULLS NOT DISTINCT (project_id, queue_id),
    CONSTRAINT fence_rejection_totals_rejections CHECK (rejections >= 0)
);
COMMENT ON TABLE codity.fence_rejection_totals IS 'Fence rejections pruned from codity.fence_rejections, counted per project and queue (NULL: unknown), so that /metrics reports a total that never falls: these plus the rows left.';

GRANT SELECT ON codity.fence_rejection_totals TO codity_app, codity_readonly;
ALTER TABLE codity.fence_rejection_totals ENABLE ROW LEVEL SECURITY;
CREATE POLICY fence_rejection_totals_project ON codity.fence_rejection_totals TO codity_app
    USING (project_id = codity.current_project_id());
CREATE POLICY fence_rejection_totals_readonly ON codity.fence_rejection_totals FOR SELECT
    TO codity_readonly USING (true);

DROP FUNCTION IF EXISTS codity.prune_housekeeping(timestamptz, integer, interval, interval);
