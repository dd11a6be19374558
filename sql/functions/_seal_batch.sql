-- codity._seal_batch: a batch takes no more members, and its callbacks may run.
--
-- Each callback still waiting counts its last parent, the seal, down: with no member left
-- unsettled, "all_done" and "all_succeeded" are queued (scheduled with a later run_at) and
-- "any_dead" is cancelled, no member having been dead-lettered; otherwise they wait for
-- the members. Their queues are woken. The caller holds the batch's workflow row and has
-- set sealed_at. Locks the callbacks in (queue, id) order, as settlements take them.
-- SECURITY INVOKER without SET: called only from definer functions; granted to nobody.

CREATE OR REPLACE FUNCTION codity._seal_batch(p_batch_id bigint, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $$
DECLARE
    v_callback record;
    v_status codity.job_status;
BEGIN
    FOR v_callback IN
        SELECT c.queue_id, c.id, c.node_key FROM codity.jobs c
        WHERE c.workflow_id = p_batch_id AND c.node_key IS NOT NULL
        ORDER BY c.queue_id, c.id
    LOOP
        UPDATE codity.jobs j
        SET deps_remaining = j.deps_remaining - 1,
            status = CASE WHEN j.deps_remaining > 1 THEN 'waiting'::codity.job_status
                          WHEN v_callback.node_key = 'any_dead' THEN 'cancelled'::codity.job_status
                          WHEN j.run_at <= p_now THEN 'queued'::codity.job_status
                          ELSE 'scheduled'::codity.job_status END,
            finished_at = CASE WHEN j.deps_remaining <= 1 AND v_callback.node_key = 'any_dead' THEN p_now END,
            last_error = CASE WHEN j.deps_remaining <= 1 AND v_callback.node_key = 'any_dead'
                              THEN 'cancelled: no job it watches was dead-lettered' END,
            updated_at = p_now
        WHERE j.queue_id = v_callback.queue_id AND j.id = v_callback.id AND j.status = 'waiting'
        RETURNING j.status INTO v_status;
        IF v_status = 'queued' AND NOT (SELECT q.is_paused FROM codity.queues q WHERE q.id = v_callback.queue_id) THEN
            PERFORM codity._notify(v_callback.queue_id);
        END IF;
        v_status := NULL;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION codity._seal_batch(bigint, timestamptz) IS
'Private: count the seal down on a batch''s waiting callbacks, releasing (or, for any_dead, cancelling) those with no member left unsettled.';

REVOKE ALL ON FUNCTION codity._seal_batch(bigint, timestamptz) FROM PUBLIC;
