-- Codity schema, version 35: a queue's weight, its share of a worker's room.
--
-- A worker serving several queues shares its free room among those with work in
-- proportion to their weights (codity.worker.fair_share; docs/DESIGN_DECISIONS.md 68).
-- Every queue weighs 1 until an operator says otherwise, so that queues share equally.
--
-- 1. queues.weight: 1 to 1000, NOT NULL DEFAULT 1 (a constant default: no rewrite).
-- 2. create_queue gains p_weight and worker_queues returns the weight: new signatures,
--    made by the function files.
--
-- Locks: ACCESS EXCLUSIVE on codity.queues for the column, briefly (no rewrite).
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0034_worker_queues_lease_seconds

ALTER TABLE codity.queues
    ADD COLUMN weight integer NOT NULL DEFAULT 1,
    ADD CONSTRAINT queues_weight_range CHECK (weight BETWEEN 1 AND 1000);

COMMENT ON COLUMN codity.queues.weight IS 'The queue''s share of a worker''s room beside the other queues it serves that have work, in proportion to their weights (1 to 1000, default 1).';

DROP FUNCTION IF EXISTS codity.create_queue(text, bigint, integer, text, integer, integer, integer, integer, integer, integer, integer, integer, integer, integer);
DROP FUNCTION IF EXISTS codity.worker_queues(bigint);
