-- codity._fenced_batch_outcome: one answer per job of a batch call, in input order.
--
-- The batch UPDATE changed the jobs whose fence was current and whose state allowed the
-- move (p_done, distinct ids). Each input position is then one of:
--   applied          its job is in p_done (the first position naming that job and fence);
--   already_applied  the execution of this fence already ended the way the call asks
--                    (p_closed_as: a repeat by the fence's owner, e.g. after a lost COMMIT),
--                    or, for start, the job is running under this fence,
--                    or it repeats a position of this batch: nothing changed, nothing logged;
--   stale            the fence is no longer current or the job no longer held: recorded in
--                    codity.fence_rejections and reported not accepted;
-- or the job is held with a current fence in a state the move does not allow: CD020, as for
-- the single calls; or it is not in the queue (p_queue_id: the batch's one queue): CD003.
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._fenced_batch_outcome(
    p_queue_id bigint,
    p_job_ids bigint[],
    p_fences integer[],
    p_done bigint[],
    p_to codity.job_status,
    p_closed_as codity.execution_status,
    p_call text,
    p_now timestamptz
)
RETURNS TABLE (
    job_id bigint,
    accepted boolean,
    outcome codity.call_outcome,
    job_status codity.job_status,
    detail text
)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $$
#variable_conflict use_column
DECLARE
    v_pair record;
    v_job codity.jobs;
    v_reported bigint[] := '{}';
    v_applied text := CASE p_to WHEN 'running' THEN 'started' ELSE p_to::text END;
BEGIN
    -- The usual case, every job moved: all applied, in input order, in one query instead of
    -- one per job. p_done holds distinct ids taken from p_job_ids (an UPDATE returns a row
    -- once), so equal sizes mean that every position names a different job, all moved.
    IF cardinality(p_done) = cardinality(p_job_ids) THEN
        RETURN QUERY
        SELECT b.job_id, true, 'applied'::codity.call_outcome, p_to, v_applied
        FROM unnest(p_job_ids) WITH ORDINALITY AS b(job_id, ord)
        ORDER BY b.ord;
        RETURN;
    END IF;
    FOR v_pair IN
        SELECT b.job_id, b.fence FROM unnest(p_job_ids, p_fences) WITH ORDINALITY AS b(job_id, fence, ord)
        ORDER BY b.ord
    LOOP
        SELECT j.* INTO v_job FROM codity.jobs j WHERE j.queue_id = p_queue_id AND j.id = v_pair.job_id;
        IF v_job.id IS NULL THEN
            RAISE EXCEPTION '%', codity._no_such_job(p_queue_id, v_pair.job_id) USING ERRCODE = 'CD003';
        END IF;
        -- Moved by this call, with this very fence (a second position of the same job may
        -- carry another, stale one).
        IF v_pair.job_id = ANY (p_done) AND v_job.execution_seq = v_pair.fence THEN
            IF v_pair.job_id = ANY (v_reported) THEN
                RETURN QUERY SELECT v_pair.job_id, true, 'already_applied'::codity.call_outcome, p_to,
                                    'repeated in this batch; applied once'::text;
            ELSE
                v_reported := v_reported || v_pair.job_id;
                RETURN QUERY SELECT v_pair.job_id, true, 'applied'::codity.call_outcome, p_to, v_applied;
            END IF;
            CONTINUE;
        END IF;
        -- Done before with this fence: an execution closed that way, or (start) the job
        -- still running under it — a held attempt has no execution row yet (migration 0013).
        IF EXISTS (
            SELECT 1 FROM codity.job_executions x
            WHERE x.queue_id = p_queue_id AND x.job_id = v_pair.job_id AND x.execution_seq = v_pair.fence AND x.status = p_closed_as
        ) OR (p_to = 'running' AND v_job.status = 'running' AND v_job.execution_seq = v_pair.fence) THEN
            RETURN QUERY SELECT v_pair.job_id, true, 'already_applied'::codity.call_outcome, v_job.status,
                                pg_catalog.format('already %s with fence %s; nothing changed',
                                                  p_closed_as, v_pair.fence);
            CONTINUE;
        END IF;
        IF v_job.execution_seq = v_pair.fence AND v_job.status IN ('claimed', 'running') THEN
            PERFORM codity._check_transition(v_job.status, p_to, v_job.id);
        END IF;
        RETURN QUERY SELECT v_pair.job_id, false, 'stale'::codity.call_outcome, v_job.status,
                            codity._reject_stale(v_job, p_call, v_pair.fence, p_now);
    END LOOP;
END;
$$;

COMMENT ON FUNCTION codity._fenced_batch_outcome(bigint, bigint[], integer[], bigint[], codity.job_status, codity.execution_status, text, timestamptz) IS
'Private: per-position outcome of a fenced batch call (applied, already_applied, stale); records stale fences, raises CD020 for illegal moves.';

REVOKE ALL ON FUNCTION codity._fenced_batch_outcome(bigint, bigint[], integer[], bigint[], codity.job_status, codity.execution_status, text, timestamptz) FROM PUBLIC;
