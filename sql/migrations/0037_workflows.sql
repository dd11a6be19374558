-- Codity schema, version 37: workflows, jobs that wait for jobs (issue 27).
--
-- A workflow is a set of jobs (its nodes) with edges "child after parent", enqueued whole
-- by codity.enqueue_workflow. A node with parents starts 'waiting'; the transaction that
-- settles its last parent makes it queued (or scheduled), and a parent that is dead-lettered
-- or cancelled cancels it (or, on an edge marked 'ignore', counts as settled). Design and
-- the proof that a child is released exactly once: docs/DESIGN_DECISIONS.md 69 and
-- docs/CONCURRENCY.md.
--
-- 1. codity.workflows: one row per workflow (its project, name, idempotency key, size).
--    Written once, by enqueue_workflow: no counter on it, so a wide fan-out's completions
--    never queue on one row. A workflow's progress is read from its jobs.
-- 2. codity.jobs gains workflow_id, node_key and deps_remaining, all NULL for a plain
--    job: a NULL costs no byte in a row that already has NULLs, so a plain job's rows and
--    WAL are as before, and the claim reads none of them.
-- 3. codity.job_deps: one row per edge, keyed and (on a Citus cluster) distributed by the
--    parent's queue (queue_id), so that settling a parent finds its edges on its own
--    shard; the child's row holds the count of its unsettled parents, and the edge the child's
--    depth (the longest path to it from a root), the order children are locked in.
-- 4. job_transitions: waiting -> queued, scheduled, cancelled.
--
-- Locks: ACCESS EXCLUSIVE on codity.jobs briefly for the columns (no rewrite: no default);
-- the partial index on workflow_id is built over NULLs only, and new tables lock nothing.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0036_job_status_waiting

CREATE TABLE codity.workflows (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id       bigint NOT NULL REFERENCES codity.projects (id) ON DELETE CASCADE,
    name             text,
    idempotency_key  text,
    nodes            integer NOT NULL,
    edges            integer NOT NULL,
    created_at       timestamptz NOT NULL,
    CONSTRAINT workflows_project_idempotency_key UNIQUE (project_id, idempotency_key),
    CONSTRAINT workflows_name_length CHECK (length(name) BETWEEN 1 AND 200),
    CONSTRAINT workflows_idempotency_key_length CHECK (length(idempotency_key) BETWEEN 1 AND 200),
    CONSTRAINT workflows_size CHECK (nodes BETWEEN 1 AND 10000 AND edges BETWEEN 0 AND 50000)
);
COMMENT ON TABLE codity.workflows IS 'One row per workflow: its project, name, idempotency key and size, written once by codity.enqueue_workflow. Its nodes are the jobs with its workflow_id; its edges are codity.job_deps.';

ALTER TABLE codity.jobs
    ADD COLUMN workflow_id bigint,
    ADD COLUMN node_key text,
    ADD COLUMN deps_remaining integer;
COMMENT ON COLUMN codity.jobs.workflow_id IS 'The workflow this job is a node of (codity.workflows); NULL for a plain job.';
COMMENT ON COLUMN codity.jobs.node_key IS 'The node''s key within its workflow, unique there; NULL for a plain job.';
COMMENT ON COLUMN codity.jobs.deps_remaining IS 'How many of the node''s parents have not settled yet; it leaves waiting when this reaches 0. NULL for a plain job.';
CREATE INDEX jobs_workflow_idx ON codity.jobs (workflow_id) WHERE workflow_id IS NOT NULL;

CREATE TABLE codity.job_deps (
    queue_id        bigint NOT NULL,
    parent_id       bigint NOT NULL,
    child_queue_id  bigint NOT NULL,
    child_id        bigint NOT NULL,
    child_depth     integer NOT NULL,
    project_id      bigint NOT NULL,
    workflow_id     bigint NOT NULL,
    on_failure      text NOT NULL DEFAULT 'cancel',
    resolved        text,
    resolved_at     timestamptz,
    CONSTRAINT job_deps_pkey PRIMARY KEY (queue_id, parent_id, child_queue_id, child_id),
    CONSTRAINT job_deps_parent_fkey FOREIGN KEY (queue_id, parent_id)
        REFERENCES codity.jobs (queue_id, id) ON DELETE CASCADE,
    CONSTRAINT job_deps_on_failure CHECK (on_failure IN ('cancel', 'ignore')),
    CONSTRAINT job_deps_resolved CHECK (
        (resolved IS NULL) = (resolved_at IS NULL)
        AND resolved IN ('completed', 'dead_letter', 'cancelled'))
);
COMMENT ON TABLE codity.job_deps IS 'One row per workflow edge: the child (child_queue_id, child_id) runs after the parent (queue_id, parent_id). resolved is the parent''s outcome, set once, in the transaction that settles it; on_failure says what a dead-lettered or cancelled parent does to the child: cancel it, or ignore it.';
CREATE INDEX job_deps_child_idx ON codity.job_deps (child_queue_id, child_id);

INSERT INTO codity.job_transitions (from_status, to_status, by_what) VALUES
    ('waiting', 'queued',    'workflow: its last parent settled'),
    ('waiting', 'scheduled', 'workflow: its last parent settled, run_at later'),
    ('waiting', 'cancelled', 'workflow: a parent dead-lettered or cancelled, or cancel');

GRANT SELECT ON codity.workflows, codity.job_deps TO codity_app, codity_readonly;
ALTER TABLE codity.workflows ENABLE ROW LEVEL SECURITY;
CREATE POLICY workflows_project ON codity.workflows TO codity_app
    USING (project_id = codity.current_project_id());
CREATE POLICY workflows_readonly ON codity.workflows FOR SELECT TO codity_readonly USING (true);
ALTER TABLE codity.job_deps ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_deps_project ON codity.job_deps TO codity_app
    USING (project_id = codity.current_project_id());
CREATE POLICY job_deps_readonly ON codity.job_deps FOR SELECT TO codity_readonly USING (true);
