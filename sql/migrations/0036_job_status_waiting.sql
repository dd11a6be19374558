-- Codity schema, version 36: a job state for the members of a workflow that wait for others.
--
-- 'waiting': a node of a workflow (issue 27, docs/DESIGN_DECISIONS.md 69) whose parents
-- have not all settled. It is in no partial index of the claim, the promoter or the
-- reaper, so none of them ever reads such a row: a plain job pays nothing for workflows.
-- A value added to an enum cannot be used in the transaction that adds it, so this
-- migration does nothing else; 0037 builds on it.
--
-- Locks: none beyond the type's catalogue row.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0035_queue_weight

ALTER TYPE codity.job_status ADD VALUE IF NOT EXISTS 'waiting' BEFORE 'scheduled';
