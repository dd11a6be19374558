-- codity._check_fence_arrays: the batch calls' argument check.
--
-- Job ids and fences come as two parallel arrays; they must be the same length and hold no
-- NULL (a NULL fence would compare as unknown and slip past the fence check). Pure.
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._check_fence_arrays(p_job_ids bigint[], p_fences integer[])
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SECURITY INVOKER
AS $$
BEGIN
    IF p_job_ids IS NULL OR p_fences IS NULL THEN
        RAISE EXCEPTION 'job ids and fences must not be NULL' USING ERRCODE = 'CD010';
    END IF;
    IF cardinality(p_job_ids) <> cardinality(p_fences) THEN
        RAISE EXCEPTION 'job ids and fences differ in length (% and %)',
                        cardinality(p_job_ids), cardinality(p_fences)
            USING ERRCODE = 'CD010', HINT = 'Pass one fence per job id, in the same order.';
    END IF;
    IF array_position(p_job_ids, NULL) IS NOT NULL OR array_position(p_fences, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'job ids and fences must not contain NULL'
            USING ERRCODE = 'CD010', HINT = 'Pass the fence token that codity.claim returned with each job.';
    END IF;
END;
$$;

COMMENT ON FUNCTION codity._check_fence_arrays(bigint[], integer[]) IS
'Private: raise CD010 unless job ids and fences are non-NULL arrays of one length without NULLs.';

REVOKE ALL ON FUNCTION codity._check_fence_arrays(bigint[], integer[]) FROM PUBLIC;
