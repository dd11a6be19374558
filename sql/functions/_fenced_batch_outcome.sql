-- codity._fenced_batch_outcome: one answer per job of a batch call.
--
-- The batch UPDATE changed the jobs whose fence was current and whose state allowed the
-- move (p_done). Every other job is either stale (fence no longer current, or no longer
-- held): recorded in codity.fence_rejections and reported not accepted; or held with a
-- current fence in a state the move does not allow: CD020, as for the single calls.
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._fenced_batch_outcome(
    p_job_ids bigint[],
    p_fences integer[],
    p_done bigint[],
    p_to codity.job_status,
    p_call text,
    p_now timestamptz
)
RETURNS TABLE (job_id bigint, accepted boolean, job_status codity.job_status, detail text)
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
AS $$
#variable_conflict use_column
DECLARE
    v_pair record;
    v_job codity.jobs;
BEGIN
    -- The usual case, every job moved: all accepted, in input order, in one query instead of
    -- one per job. p_done holds distinct ids taken from p_job_ids (an UPDATE returns a row
    -- once), so equal sizes mean that every job of the batch is in it.
    IF cardinality(p_done) = cardinality(p_job_ids) THEN
        RETURN QUERY
        SELECT b.job_id, true, p_to, p_to::text
        FROM unnest(p_job_ids) WITH ORDINALITY AS b(job_id, ord)
        ORDER BY b.ord;
        RETURN;
    END IF;
    FOR v_pair IN
        SELECT b.job_id, b.fence FROM unnest(p_job_ids, p_fences) WITH ORDINALITY AS b(job_id, fence, ord)
        ORDER BY b.ord
    LOOP
        IF v_pair.job_id = ANY (p_done) THEN
            RETURN QUERY SELECT v_pair.job_id, true, p_to, p_to::text;
            CONTINUE;
        END IF;
        SELECT j.* INTO v_job FROM codity.jobs j WHERE j.id = v_pair.job_id;
        IF v_job.id IS NULL THEN
            RAISE EXCEPTION 'job % does not exist', v_pair.job_id USING ERRCODE = 'CD003';
        END IF;
        IF v_job.execution_seq = v_pair.fence AND v_job.status IN ('claimed', 'running') THEN
            PERFORM codity._check_transition(v_job.status, p_to, v_job.id);
        END IF;
        RETURN QUERY SELECT v_pair.job_id, false, v_job.status,
                            codity._reject_stale(v_job, p_call, v_pair.fence, p_now);
    END LOOP;
END;
$$;

COMMENT ON FUNCTION codity._fenced_batch_outcome(bigint[], integer[], bigint[], codity.job_status, text, timestamptz) IS
'Private: per-job outcome of a fenced batch call; records stale fences, raises CD020 for illegal moves.';

REVOKE ALL ON FUNCTION codity._fenced_batch_outcome(bigint[], integer[], bigint[], codity.job_status, text, timestamptz) FROM PUBLIC;
