-- Codity schema, version 29: every queue has its codity.queue_totals row, from its creation.
--
-- The row was written by codity.roll_up the first time a queue's minute had something to
-- add. codity.create_queue now writes it with the queue (all zeros), and this backfills the
-- queues made before. With a job-side row per queue, the scheduler's cross-queue reads
-- (codity.promote, codity.reap, codity.queue_depths) start from codity.queue_totals and
-- probe each queue's jobs correlated on the queue id: on a Citus cluster, where queue_totals
-- is distributed with the jobs, that probe runs on the shards beside it, whereas Citus
-- refuses a subquery correlated from codity.queues (a reference table) into the jobs
-- (docs/DESIGN_DECISIONS.md 61). On one server the plans are the same per-queue probes.
--
-- Locks: queue_totals rows of queues that have none (an insert); nothing else.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0028_enqueue_one_returns_a_row

INSERT INTO codity.queue_totals (queue_id, project_id)
SELECT q.id, q.project_id FROM codity.queues q
ON CONFLICT (queue_id) DO NOTHING;
