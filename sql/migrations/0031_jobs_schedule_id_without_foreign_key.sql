-- Codity schema, version 31: jobs.schedule_id is no foreign key any more.
--
-- It pointed from codity.jobs at codity.scheduled_jobs (ON DELETE SET NULL). On a Citus
-- cluster scheduled_jobs is a reference table, and Citus refuses to write a reference table
-- that a distributed table references by foreign key after a statement of the same
-- transaction read the distributed table over several connections: codity.tick() reads
-- every shard (sweep, reap, promote) before materialize_cron advances the schedules, so a
-- scheduler died at its first tick with a schedule due (docs/DESIGN_DECISIONS.md 61). The
-- link keeps its meaning without the constraint: codity.delete_schedule sets the
-- schedule's jobs' schedule_id to NULL itself, in the same transaction as the delete, and
-- the functions that write schedule_id (materialize_cron, run_schedule_now) take it from
-- the schedule row they hold locked. As with dead_letters.job_id (migration 0015), readers
-- join it with LEFT JOIN.
--
-- Locks: codity.jobs and codity.scheduled_jobs briefly (ACCESS EXCLUSIVE to drop the
-- constraint). Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0030_complete_many_durable_flag

ALTER TABLE codity.jobs DROP CONSTRAINT IF EXISTS jobs_schedule_id_fkey;
