-- Codity schema, version 21: finished jobs are kept for a period per queue, then pruned.
--
-- Until now every completed job, its executions and every dead letter stayed forever: the
-- jobs table, its indexes and every count over them grew without bound. Each queue now says
-- how long it keeps them (docs/DESIGN_DECISIONS.md 53), and codity.prune, which the
-- scheduler calls after each tick, deletes what has aged out in small batches.
--
-- 1. queues.keep_completed_seconds: completed and cancelled jobs, with their executions,
--    are kept this long after they finished (default 7 days); NULL keeps them forever.
--    queues.keep_dead_letters_seconds: the same for dead-lettered jobs and their
--    codity.dead_letters rows (default 30 days). Both from 60 s to 10 years. Existing
--    queues get the defaults: after this migration the scheduler starts deleting jobs that
--    finished more than 7 days ago (dead letters: 30); set NULL first to keep them.
-- 2. jobs_finished_idx: the finished jobs of a queue by finish time, so that a prune that
--    finds nothing due reads one index entry per queue, however many jobs are kept. It
--    costs one index insertion per job that finishes (docs/PERFORMANCE.md, "Retention").
--
-- Locks: ACCESS EXCLUSIVE on codity.queues for the columns (no rewrite: constant
-- defaults; the CHECK reads the few queue rows), then building the index holds a SHARE
-- lock on codity.jobs (enqueues, claims and completions wait) for as long as it reads the
-- table: seconds per million jobs.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0020_enqueue_one_takes_its_queue

ALTER TABLE codity.queues
    ADD COLUMN keep_completed_seconds integer DEFAULT 604800,
    ADD COLUMN keep_dead_letters_seconds integer DEFAULT 2592000,
    ADD CONSTRAINT queues_keep_range CHECK (
        keep_completed_seconds BETWEEN 60 AND 315360000
        AND keep_dead_letters_seconds BETWEEN 60 AND 315360000);

COMMENT ON COLUMN codity.queues.keep_completed_seconds IS 'How long completed and cancelled jobs and their executions are kept after they finished (codity.prune); NULL: forever.';
COMMENT ON COLUMN codity.queues.keep_dead_letters_seconds IS 'How long dead-lettered jobs, their executions and their dead_letters rows are kept (codity.prune); NULL: forever.';

CREATE INDEX jobs_finished_idx ON codity.jobs (queue_id, finished_at) WHERE finished_at IS NOT NULL;

-- create_queue takes the two settings: a new signature, made by the function files.
DROP FUNCTION IF EXISTS codity.create_queue(text, bigint, integer, text, integer, integer, integer, integer, integer);
