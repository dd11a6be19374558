-- Codity schema, version 43: the dead letters of a queue are counted in their index.
--
-- The dead-letter list's count is made queue by queue since issue 24, each queue up to its
-- share of the cap (docs/DESIGN_DECISIONS.md 78): on a Citus cluster each shard then
-- sends a number per queue instead of up to 10,001 rows. Each queue's count walks
-- dead_letters_queue_idx, and row-level security checks every row's project_id, which the
-- index did not hold: a heap read per letter, 12-19 ms for the ten queues of
-- `codity bench-dashboard` on one server, against 3 ms for the old count's sequential read.
-- With project_id in the index the walk is an index-only scan once the pages are
-- all-visible (dead letters are only ever appended, then marked replayed). Eight bytes
-- more per entry, written when a job is dead-lettered, off the hot path.
-- On a Citus cluster `codity migrate` applies this on the coordinator, and Citus rebuilds
-- the index on every shard.

DROP INDEX codity.dead_letters_queue_idx;
CREATE INDEX dead_letters_queue_idx ON codity.dead_letters (queue_id, dead_at DESC)
    INCLUDE (project_id);
