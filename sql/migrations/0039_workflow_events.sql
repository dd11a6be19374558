-- Codity schema, version 39: workflows and batches on a Citus cluster (deferred settlement).
--
-- On a cluster whose codity.jobs is distributed by queue, the bodies Citus delegates to a
-- queue's node (complete_many_in_queue, fail_in_queue, reap_in_queue) can write only that
-- queue's shards, and a workflow node's children live in other queues. So there, settling a
-- node writes one row here, on the node's own shard (colocated with its job), instead of
-- telling its children; codity.tick folds the rows into the children on the coordinator
-- (codity._fold_settlements: the same codity._settle_children, children locked in the same
-- (depth, queue, id) order), and deletes them in that transaction: each settlement is
-- folded once, and a crash before the commit leaves the row for the next tick. On a single
-- server nothing writes here: a node's children are told in its own transaction, as before.
-- Design: docs/DESIGN_DECISIONS.md 73.
--
-- 1. codity.workflow_events, keyed, and (on a cluster) distributed, by the settled node's
--    queue_id; project_id is the queue's, for row-level security like every job table; the
--    foreign key to the job (with its queue) cascades, so a deleted job takes its pending
--    settlement with it.
-- 2. codity._check_single_server, which refused workflows and batches on a cluster (0A000),
--    is dropped.
--
-- Locks: a new, empty table; its foreign key takes SHARE ROW EXCLUSIVE on codity.jobs for a
-- moment, with nothing to validate.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0038_batches_and_workflow_actions

CREATE TABLE codity.workflow_events (
    queue_id    bigint NOT NULL,
    id          bigint GENERATED ALWAYS AS IDENTITY,
    job_id      bigint NOT NULL,
    project_id  bigint NOT NULL,
    outcome     text NOT NULL,
    settled_at  timestamptz NOT NULL,
    CONSTRAINT workflow_events_pkey PRIMARY KEY (queue_id, id),
    CONSTRAINT workflow_events_job_fkey FOREIGN KEY (queue_id, job_id)
        REFERENCES codity.jobs (queue_id, id) ON DELETE CASCADE,
    CONSTRAINT workflow_events_outcome CHECK (outcome IN ('completed', 'dead_letter'))
);
COMMENT ON TABLE codity.workflow_events IS 'On a Citus cluster only: a workflow node settled (completed or dead-lettered) by a body that runs on its queue''s node, whose children are not told yet. codity.tick folds each row into the children and deletes it in one transaction. Empty on a single server.';
CREATE INDEX workflow_events_job_idx ON codity.workflow_events (queue_id, job_id);

GRANT SELECT ON codity.workflow_events TO codity_app, codity_readonly;
ALTER TABLE codity.workflow_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY workflow_events_project ON codity.workflow_events TO codity_app
    USING (project_id = codity.current_project_id());
CREATE POLICY workflow_events_readonly ON codity.workflow_events FOR SELECT TO codity_readonly
    USING (true);

-- Workflows and batches no longer refuse a Citus cluster: the refusal's helper goes.
DROP FUNCTION IF EXISTS codity._check_single_server(text);
