-- Codity schema, version 12: a claim that starts what it claims.
--
-- codity.claim gains p_start (before p_now): with true, the jobs it hands out are marked
-- running at once, in the claim's own UPDATE, and their execution rows are inserted
-- running. A worker that starts everything it claims (the Python worker does) then writes
-- each job row once on the way out of the queue instead of twice (claim, then
-- start_many), and its execution row once instead of twice. The function files are
-- repeatable; only the old signature must go.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0011_schedule_jobs_idx

DROP FUNCTION IF EXISTS codity.claim(bigint, text, integer, boolean, timestamptz);
