-- Codity schema, version 20: the private single-job body takes its queue's facts from its
-- caller.
--
-- codity._enqueue_one looked its queue up again after codity.enqueue had just found it by
-- name: one more PL/pgSQL call and query per job on the enqueue path. It now takes the
-- queue's project and default max_attempts as arguments (sql/functions/_enqueue_one.sql),
-- a new signature; the function files create it, and this drops the old one so that no
-- stale overload is left behind. Private and granted to nobody, so no caller outside the
-- functions can notice.
--
-- Locks: none beyond the catalogue row of the function dropped.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0019_executions_without_a_reference

DROP FUNCTION IF EXISTS codity._enqueue_one(bigint, text, jsonb, timestamptz, integer, text, integer, timestamptz);
