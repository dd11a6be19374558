-- Codity schema, version 11: a schedule's newest jobs without reading all of them.
--
-- The schedule page lists a schedule's latest jobs, newest first. jobs_schedule_idx
-- (schedule_id) made that read every job the schedule ever enqueued and sort them: a cron
-- every minute leaves 525,600 a year. With id in the key the read walks the index backwards
-- and stops after the page. Same partial predicate, so no job write touches it that did not
-- before; schedule_id = … is leakproof, so it stays an index condition under row-level
-- security.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0010_dashboard_state_indexes

DROP INDEX codity.jobs_schedule_idx;
CREATE INDEX jobs_schedule_idx ON codity.jobs (schedule_id, id) WHERE schedule_id IS NOT NULL;
