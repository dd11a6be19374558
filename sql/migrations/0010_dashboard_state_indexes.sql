-- Codity schema, version 10: the dashboard's per-state reads, fast under row-level security.
--
-- As codity_app every read of codity.jobs runs under row-level security, and a condition
-- whose operator is not LEAKPROOF may not be checked before the policy's: enum equality
-- (status = 'completed') is not, so it was never an index condition of
-- jobs_queue_status_idx (queue_id, status, id). A capped count of a queue's completed jobs
-- walked every job of the queue and filtered: 290-340 ms per overview at a million jobs,
-- against 24 ms for the same call as the table's owner. A partial index is chosen by
-- predicate proof instead, with no operator evaluated early, as the claim, promote and lease
-- indexes already are; queued, scheduled and claimed/running have theirs (migration 1).
--
-- 1. One partial (queue_id, id) index per remaining state: counts stop at the cap, lists
--    read newest first per queue. jobs_queue_status_idx goes: with these it serves no read,
--    and every update of a job (none is HOT) inserted into it, where the partial ones take
--    one insertion per job, when it reaches that state.
-- 2. Dead letters not yet replayed, per queue, newest first: what the overview counts and
--    the dead-letter screen lists by default.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0009_dashboard_reads

DROP INDEX codity.jobs_queue_status_idx;

CREATE INDEX jobs_completed_idx ON codity.jobs (queue_id, id) WHERE status = 'completed';
CREATE INDEX jobs_failed_idx ON codity.jobs (queue_id, id) WHERE status = 'failed';
CREATE INDEX jobs_dead_letter_idx ON codity.jobs (queue_id, id) WHERE status = 'dead_letter';
CREATE INDEX jobs_cancelled_idx ON codity.jobs (queue_id, id) WHERE status = 'cancelled';

CREATE INDEX dead_letters_unreplayed_idx ON codity.dead_letters (queue_id, dead_at DESC)
    WHERE replayed_at IS NULL;
