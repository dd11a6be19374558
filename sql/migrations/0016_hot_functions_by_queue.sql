-- Codity schema, version 16: the hot functions take the queue's id (DESIGN.md, "Room to
-- scale out", rules 1 and 2).
--
-- No table changes. The function files define new bodies that take p_queue_id first
-- (claim, start_many, complete_many, fail, release, extend_leases, reap, enqueue_many) and
-- keep the signatures callers already use as wrappers over them. Four private helpers gain
-- the queue id or, for codity._queue, a column, so their old signatures are dropped here:
-- CREATE OR REPLACE can neither change a function's arguments nor its result columns, and a
-- leftover overload without the queue would invite the next caller to skip it. The function
-- files, applied after every migration, create the new ones. IF EXISTS: on a fresh
-- database no function exists yet when the migrations run.

DROP FUNCTION IF EXISTS codity._queue(text, bigint);
DROP FUNCTION IF EXISTS codity._lock_fenced_job(bigint, integer);
DROP FUNCTION IF EXISTS codity._dead_letter(bigint, text, text, timestamptz);
DROP FUNCTION IF EXISTS codity._fenced_batch_outcome(
    bigint[], integer[], bigint[], codity.job_status, codity.execution_status, text, timestamptz);
