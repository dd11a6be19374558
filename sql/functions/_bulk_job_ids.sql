-- codity._bulk_job_ids: the bulk calls' ids, checked and made a set.
--
-- codity.cancel_jobs and codity.retry_jobs take up to 1000 job ids as given by a person or
-- a page: repeats and NULLs are dropped, and the rest come back sorted, the order every
-- multi-row lock here is taken in. More than 1000 (or no array at all) is CD010. Pure.
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._bulk_job_ids(p_job_ids bigint[])
RETURNS bigint[]
LANGUAGE plpgsql
IMMUTABLE
SECURITY INVOKER
AS $$
BEGIN
    IF p_job_ids IS NULL OR pg_catalog.cardinality(p_job_ids) > 1000 THEN
        RAISE EXCEPTION 'give from 0 to 1000 job ids, got %', pg_catalog.cardinality(p_job_ids)
            USING ERRCODE = 'CD010', HINT = 'Split a larger set into batches.';
    END IF;
    RETURN ARRAY(SELECT DISTINCT i.id FROM unnest(p_job_ids) AS i(id)
                 WHERE i.id IS NOT NULL ORDER BY i.id);
END;
$$;

COMMENT ON FUNCTION codity._bulk_job_ids(bigint[]) IS
'Private: the distinct non-NULL ids of a bulk call, sorted; CD010 for more than 1000.';

REVOKE ALL ON FUNCTION codity._bulk_job_ids(bigint[]) FROM PUBLIC;
