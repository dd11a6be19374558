-- Codity schema, version 28: the private single-job body returns one row, not a set.
--
-- codity.enqueue ran codity._enqueue_one as a query (RETURN QUERY SELECT ... FROM it): a
-- query of its own per job and a tuplestore for the one row. As a function with OUT
-- parameters it is called as an expression (sql/functions/enqueue.sql), which with the
-- queue read in codity.enqueue's own query instead of through codity._queue took 175.0 ->
-- 166.7 us of server CPU per single enqueue (medians of 8 rounds of 3,000 calls, a commit
-- each). The return type changes, so the old function is dropped here and the function
-- files create the new one. Private and granted to nobody, so no caller outside the
-- functions can notice.
--
-- Locks: none beyond the catalogue row of the function dropped.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0027_payload_index_without_empty_payloads

DROP FUNCTION IF EXISTS codity._enqueue_one(bigint, bigint, integer, text, jsonb, timestamptz, integer, text, integer, timestamptz);
