-- Codity schema, version 41: a completion or a failure says how long its job waited.
--
-- A worker claims jobs beyond its free slots (its prefetch) and starts each when a slot
-- frees; claimed with p_start, every job of the claim was recorded as started at the
-- claim's time, so an execution's started_at could be seconds before its handler began
-- (issue 29, item 7). codity.complete_many_in_queue and codity.fail_in_queue now take the
-- milliseconds each job waited in the worker (p_waited_ms) and move started_at on by them,
-- never past the finish: the time stays the database's, the worker gives a duration
-- measured on its own monotonic clock (docs/DESIGN_DECISIONS.md 74). The signatures
-- change, so the old ones are dropped here and the function files create the new ones.
--
-- Locks: none beyond the catalogue rows of the functions dropped.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0040_fence_rejection_totals

DROP FUNCTION IF EXISTS codity.complete_many_in_queue(bigint, bigint[], integer[], jsonb[], timestamptz, boolean);
DROP FUNCTION IF EXISTS codity.fail_in_queue(bigint, bigint, integer, text, boolean, timestamptz);
