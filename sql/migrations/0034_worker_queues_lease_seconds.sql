-- Codity schema, version 34: codity.worker_queues gives each queue's lease_seconds.
--
-- A worker cut off from the database must stop its handlers before their leases run out,
-- on its own clock, since no heartbeat can tell it (issue 25; docs/DESIGN_DECISIONS.md
-- 64). For that it must know how long a claim or a heartbeat leases a job for: the
-- queue's lease_seconds, read with the queue's limits at every heartbeat, so a lease
-- changed later is followed. The result gains a column, so the old function is dropped
-- here and the function files create the new one; calls written for the old one still
-- work (SELECT * gets one column more).
--
-- Locks: the catalogue row of the function dropped.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0033_worker_overview_counts_by_group

DROP FUNCTION IF EXISTS codity.worker_queues(bigint);
