-- Codity schema, version 30: codity.complete_many_in_queue takes p_durable.
--
-- The Python worker committed its completions without waiting for the WAL flush by setting
-- synchronous_commit in the same statement as the call (docs/DESIGN_DECISIONS.md 44). On a
-- Citus cluster that setting stays on the coordinator, and the second item in the call's
-- FROM stops Citus from sending the call whole to the node that holds the queue. The body
-- now takes p_durable (true by default) and makes the setting itself, where it runs and
-- commits (docs/DESIGN_DECISIONS.md 61). The signature changes, so the old one is dropped
-- here and the function files create the new one.
--
-- Locks: none beyond the catalogue row of the function dropped.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0029_every_queue_has_totals

DROP FUNCTION IF EXISTS codity.complete_many_in_queue(bigint, bigint[], integer[], jsonb[], timestamptz);
