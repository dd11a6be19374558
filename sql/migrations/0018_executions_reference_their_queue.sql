-- Codity schema, version 18: an attempt's audit row references its queue, not its job.
--
-- job_executions referenced jobs (queue_id, id) ON DELETE CASCADE. Every execution row an
-- attempt's end writes ran one referential query against the job row the same call had
-- just updated, and took a key-share lock on it: one more WAL record per job. The reference
-- holds by construction: only the functions write execution rows (no role has INSERT on the
-- table), each from the job row it has just locked and updated in the same transaction, and
-- a locked job cannot be deleted under it. What the reference also did is take a queue's or
-- a project's history with it when they are deleted; a reference to the queue does that
-- too, and its check reads a row that a transaction locks once (the queue's) instead of one
-- per job. Measured with the worker's claim and completion batches of 500 over 40,000 jobs
-- (docs/PERFORMANCE.md, "The payload index and the collector"), eight rounds alternating:
-- 43.4 -> 39.6 µs of backend CPU per job (no reference at all: 35.8), 1,527 -> 1,471 B of
-- WAL.
--
-- One behaviour changes: deleting a job row by hand (no function deletes a single job)
-- leaves its execution rows, which still name their queue and project. Deleting the queue
-- (codity.delete_queue) or the project still deletes them.
--
-- Locks: adding the reference reads every execution row to check it, under a SHARE ROW
-- EXCLUSIVE lock on job_executions and queues (attempts' ends wait): seconds per million
-- rows.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0017_payload_index_without_held_jobs

ALTER TABLE codity.job_executions DROP CONSTRAINT job_executions_job_fkey;
ALTER TABLE codity.job_executions ADD CONSTRAINT job_executions_queue_fkey
    FOREIGN KEY (queue_id, project_id) REFERENCES codity.queues (id, project_id) ON DELETE CASCADE;
