-- Codity schema, version 32: codity.heartbeat takes the jobs' queue ids (p_queue_ids).
--
-- The heartbeat found each listed job's queue by its id (codity._job_groups): on one server
-- an index probe per job, on a Citus cluster a read of every shard of codity.jobs at every
-- heartbeat of every worker. A worker knows the queue of each job it holds, so it now says
-- so; callers that leave the new argument out are answered as before (docs/DESIGN_DECISIONS.md
-- 61). The signature changes, so the old one is dropped here and the function files create
-- the new one; every call written for the old one still matches the new.
--
-- Locks: none beyond the catalogue row of the function dropped.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0031_jobs_schedule_id_without_foreign_key

DROP FUNCTION IF EXISTS codity.heartbeat(bigint, bigint[], integer[], timestamptz);
