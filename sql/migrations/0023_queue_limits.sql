-- Codity schema, version 23: per-queue concurrency and rate limits, enforced by the claim.
--
-- A queue's downstream may take at most N jobs at once, or at most R per period, however
-- many workers serve it (docs/DESIGN_DECISIONS.md 54).
--
-- 1. queues.max_running: at most this many of the queue's jobs claimed or running at once,
--    across every worker. queues.rate_limit per queues.rate_period_seconds: at most that
--    many claims in each period (fixed windows on the database's clock, date_bin from the
--    epoch). NULL: no limit, and the claim works as before.
-- 2. codity.queue_limiters: one row per limited queue, which the claim of a limited queue
--    locks (FOR UPDATE) before it counts, so that concurrent claims count one after
--    another and never hand out the N + 1st job; it also holds the current rate window and
--    the claims made in it. Written only by claims of limited queues.
-- 3. _queue, create_queue and worker_queues gain the columns: new signatures, made by the
--    function files.
--
-- Locks: ACCESS EXCLUSIVE on codity.queues for the columns (no rewrite, no default); creates
-- a table.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0022_queue_totals

ALTER TABLE codity.queues
    ADD COLUMN max_running integer,
    ADD COLUMN rate_limit integer,
    ADD COLUMN rate_period_seconds integer,
    ADD CONSTRAINT queues_limits_range CHECK (
        max_running BETWEEN 1 AND 100000
        AND rate_limit BETWEEN 1 AND 1000000
        AND rate_period_seconds BETWEEN 1 AND 86400),
    ADD CONSTRAINT queues_rate_whole CHECK ((rate_limit IS NULL) = (rate_period_seconds IS NULL));

COMMENT ON COLUMN codity.queues.max_running IS 'At most this many jobs of the queue claimed or running at once, across all workers (codity.claim); NULL: no limit.';
COMMENT ON COLUMN codity.queues.rate_limit IS 'At most this many claims per rate_period_seconds (fixed windows on the database clock); NULL: no limit.';

CREATE TABLE codity.queue_limiters (
    queue_id       bigint PRIMARY KEY,
    project_id     bigint NOT NULL,
    window_start   timestamptz,
    window_claims  integer NOT NULL DEFAULT 0,
    CONSTRAINT queue_limiters_queue_fkey FOREIGN KEY (queue_id, project_id)
        REFERENCES codity.queues (id, project_id) ON DELETE CASCADE,
    CONSTRAINT queue_limiters_claims_nonnegative CHECK (window_claims >= 0)
);

COMMENT ON TABLE codity.queue_limiters IS 'One row per queue with a limit: locked by its claims so they count one at a time, with the current rate window and its claims. Written by codity.claim_in_queue and codity.create_queue.';

GRANT SELECT ON codity.queue_limiters TO codity_app, codity_readonly;
ALTER TABLE codity.queue_limiters ENABLE ROW LEVEL SECURITY;
CREATE POLICY queue_limiters_project ON codity.queue_limiters TO codity_app
    USING (project_id = codity.current_project_id());
CREATE POLICY queue_limiters_readonly ON codity.queue_limiters FOR SELECT TO codity_readonly
    USING (true);

DROP FUNCTION IF EXISTS codity._queue(text, bigint);
DROP FUNCTION IF EXISTS codity._queue(bigint, bigint);
DROP FUNCTION IF EXISTS codity.create_queue(text, bigint, integer, text, integer, integer, integer, integer, integer, integer, integer);
DROP FUNCTION IF EXISTS codity.worker_queues(bigint);
