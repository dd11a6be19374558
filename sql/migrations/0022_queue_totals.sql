-- Codity schema, version 22: per queue, running totals of what its executions came to.
--
-- Prometheus counters must never go down, and since migration 0021 the rows they would be
-- counted from are pruned: a count of the completed executions falls when a day of them is
-- deleted. codity.roll_up, which already counts each closed minute into
-- codity.queue_minutes, now also adds the minute's counts to codity.queue_totals, whose rows
-- only grow. A counter is the total up to rollup_state.rolled_until plus the executions
-- finished since, counted live (a minute or two of rows); codity.prune deletes nothing
-- after rolled_until, so the two never overlap and never miss a row (GET /api/v1/metrics,
-- docs/RUNBOOK.md "Monitoring"). Nothing is written on the job hot path.
--
-- The totals start from what is there: every execution and dead letter before
-- rolled_until, counted once here (a scan of the executions: seconds per million rows).
--
-- Locks: creates a table; reads job_executions and dead_letters (ACCESS SHARE).
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0021_retention

CREATE TABLE codity.queue_totals (
    queue_id       bigint PRIMARY KEY,
    project_id     bigint NOT NULL,
    completed      bigint NOT NULL DEFAULT 0,
    failed         bigint NOT NULL DEFAULT 0,
    reaped         bigint NOT NULL DEFAULT 0,
    dead_lettered  bigint NOT NULL DEFAULT 0,
    CONSTRAINT queue_totals_queue_fkey FOREIGN KEY (queue_id, project_id)
        REFERENCES codity.queues (id, project_id) ON DELETE CASCADE,
    CONSTRAINT queue_totals_nonnegative CHECK (
        completed >= 0 AND failed >= 0 AND reaped >= 0 AND dead_lettered >= 0)
);

COMMENT ON TABLE codity.queue_totals IS 'Per queue, since it was created (or since migration 0022): executions completed, failed and reaped and jobs dead-lettered, up to rollup_state.rolled_until. Only ever grows; written by codity.roll_up.';

INSERT INTO codity.queue_totals (queue_id, project_id, completed, failed, reaped, dead_lettered)
SELECT q.id, q.project_id,
       (SELECT count(*) FROM codity.job_executions x
        WHERE x.queue_id = q.id AND x.status = 'completed' AND x.finished_at < s.rolled_until),
       (SELECT count(*) FROM codity.job_executions x
        WHERE x.queue_id = q.id AND x.status = 'failed' AND x.finished_at < s.rolled_until),
       (SELECT count(*) FROM codity.job_executions x
        WHERE x.queue_id = q.id AND x.status = 'reaped' AND x.finished_at < s.rolled_until),
       (SELECT count(*) FROM codity.dead_letters d
        WHERE d.queue_id = q.id AND d.dead_at < s.rolled_until)
FROM codity.queues q CROSS JOIN codity.rollup_state s
WHERE s.rolled_until IS NOT NULL;

GRANT SELECT ON codity.queue_totals TO codity_app, codity_readonly;
ALTER TABLE codity.queue_totals ENABLE ROW LEVEL SECURITY;
CREATE POLICY queue_totals_project ON codity.queue_totals TO codity_app
    USING (project_id = codity.current_project_id());
CREATE POLICY queue_totals_readonly ON codity.queue_totals FOR SELECT TO codity_readonly
    USING (true);
