-- Codity schema, version 38: batches, and what an operator does to a workflow (issue 27).
--
-- 1. A batch is a workflow of another kind: its members are nodes without edges between
--    them, its callbacks nodes that run after every member. codity.workflows gains kind
--    ('workflow' or 'batch') and sealed_at: an open batch (sealed_at NULL) takes more
--    members, and its callbacks count one more parent, the seal, until codity.seal_batch.
--    A batch holds up to 100,000 members, a workflow 10,000 nodes as before.
-- 2. Two more edge policies (job_deps.on_failure): 'hold' leaves the child waiting when the
--    parent is dead-lettered or cancelled, for an operator to retry or skip that parent or
--    cancel the workflow; 'run' releases the child when the parent is dead-lettered, and
--    cancels it once every such parent settled otherwise (a batch's "any dead" callback).
--    An edge's outcome can also be 'skipped': the parent was marked done by an operator
--    (it counts as completed; the child reads that no result came from it).
-- 3. job_transitions for codity.retry_workflow (a finished node back to waiting or queued)
--    and codity.skip_node (an unfinished or failed node marked completed without running).
-- 4. jobs_workflow_node_idx: a node by its key, and a batch's callbacks, without reading its
--    members.
--
-- Locks: ACCESS EXCLUSIVE on codity.workflows and codity.job_deps briefly (a column with a
-- constant default: no rewrite; each CHECK constraint is validated by one scan); SHARE on
-- codity.jobs while the partial index is built (it reads the table once, keeps no plain job).
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0037_workflows

ALTER TABLE codity.workflows
    ADD COLUMN kind text NOT NULL DEFAULT 'workflow',
    ADD COLUMN sealed_at timestamptz,
    ADD CONSTRAINT workflows_kind CHECK (kind IN ('workflow', 'batch')),
    DROP CONSTRAINT workflows_size,
    ADD CONSTRAINT workflows_size CHECK (
        nodes BETWEEN 0 AND CASE kind WHEN 'batch' THEN 100003 ELSE 10000 END
        AND edges BETWEEN 0 AND CASE kind WHEN 'batch' THEN 300000 ELSE 50000 END);
COMMENT ON COLUMN codity.workflows.kind IS 'workflow: nodes with edges, enqueued whole (codity.enqueue_workflow); batch: members without edges and up to three callbacks that run after all of them (codity.create_batch).';
COMMENT ON COLUMN codity.workflows.sealed_at IS 'A batch: when it was sealed (no member can be added after; its callbacks can run). A workflow: when it was enqueued.';
COMMENT ON COLUMN codity.workflows.nodes IS 'How many jobs it holds (a batch: members and callbacks); grows when members are added to an open batch.';
UPDATE codity.workflows SET sealed_at = created_at;

ALTER TABLE codity.job_deps
    DROP CONSTRAINT job_deps_on_failure,
    ADD CONSTRAINT job_deps_on_failure CHECK (on_failure IN ('cancel', 'ignore', 'hold', 'run')),
    DROP CONSTRAINT job_deps_resolved,
    ADD CONSTRAINT job_deps_resolved CHECK (
        (resolved IS NULL) = (resolved_at IS NULL)
        AND resolved IN ('completed', 'skipped', 'dead_letter', 'cancelled'));
COMMENT ON COLUMN codity.job_deps.on_failure IS 'What a dead-lettered or cancelled parent does to the child: cancel it (and what runs after it), ignore it (count the edge as settled), hold the child waiting for an operator, or run: the child runs when the parent is dead-lettered and is cancelled when every such parent settled otherwise.';

INSERT INTO codity.job_transitions (from_status, to_status, by_what) VALUES
    ('completed',   'waiting',   'retry_workflow: runs again after its parents'),
    ('completed',   'queued',    'retry_workflow: runs again'),
    ('dead_letter', 'waiting',   'retry_workflow: runs again after its parents'),
    ('cancelled',   'waiting',   'retry_workflow: runs again after its parents'),
    ('cancelled',   'queued',    'retry_workflow: runs again'),
    ('waiting',     'completed', 'skip_node: marked done without running'),
    ('scheduled',   'completed', 'skip_node: marked done without running'),
    ('queued',      'completed', 'skip_node: marked done without running'),
    ('dead_letter', 'completed', 'skip_node: marked done without running'),
    ('cancelled',   'completed', 'skip_node: marked done without running');

-- A node found by its key (codity.skip_node) and a batch's callbacks found without reading
-- its members (codity.add_to_batch, seal_batch): only jobs with a node key are in it, so a
-- plain job and a batch member cost it nothing.
CREATE INDEX jobs_workflow_node_idx ON codity.jobs (workflow_id, node_key) WHERE node_key IS NOT NULL;
