-- Codity schema, version 5: fenced calls say whether they applied, were already applied,
-- or came with a stale fence.
--
-- A client whose connection dies during COMMIT does not know whether its call landed, and
-- repeats it. Until now the repeat of a complete, fail or release that had landed looked
-- exactly like a zombie's stale call (accepted = false, a fence_rejections row), and a
-- repeated start raised CD020. The fenced calls now return an outcome the client can branch
-- on: 'applied', 'already_applied' (this fence's attempt already ended this way; nothing
-- changed, nothing recorded) or 'stale' (rejected and recorded, as before).
--
-- Their result types change, so the old signatures are dropped here (IF EXISTS: on a fresh
-- database the functions are created only after all migrations) and `codity migrate`
-- re-creates them from sql/functions right after.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0004_owner_role

CREATE TYPE codity.call_outcome AS ENUM ('applied', 'already_applied', 'stale');

DROP FUNCTION IF EXISTS codity.start(bigint, integer, timestamptz);
DROP FUNCTION IF EXISTS codity.start_many(bigint[], integer[], timestamptz);
DROP FUNCTION IF EXISTS codity.complete(bigint, integer, jsonb, timestamptz);
DROP FUNCTION IF EXISTS codity.complete_many(bigint[], integer[], jsonb[], timestamptz);
DROP FUNCTION IF EXISTS codity.fail(bigint, integer, text, boolean, timestamptz);
DROP FUNCTION IF EXISTS codity.release(bigint, integer, timestamptz);
DROP FUNCTION IF EXISTS codity._fenced_batch_outcome(bigint[], integer[], bigint[], codity.job_status, text, timestamptz);
