-- codity._check_results: complete_many's check of the results it is given.
--
-- NULL (no results) or one entry per job, none over 64 KB of JSON text; the message names
-- the first job whose result is too large. The wrapper that takes only job ids checks the
-- whole batch with it before splitting it by queue, so its messages are those of the batch
-- the caller sent. Pure.
--
-- SECURITY INVOKER without SET: called only from definer functions; granted to nobody.

CREATE OR REPLACE FUNCTION codity._check_results(p_job_ids bigint[], p_results jsonb[])
RETURNS void
LANGUAGE plpgsql
IMMUTABLE
SECURITY INVOKER
AS $$
DECLARE
    v_big record;
BEGIN
    IF p_results IS NOT NULL AND cardinality(p_results) <> cardinality(p_job_ids) THEN
        RAISE EXCEPTION 'results must be NULL or hold one entry per job (% jobs, % results)',
                        cardinality(p_job_ids), cardinality(p_results)
            USING ERRCODE = 'CD010';
    END IF;
    SELECT r.ord, octet_length(r.result::text) AS size INTO v_big
    FROM unnest(p_results) WITH ORDINALITY AS r(result, ord)
    WHERE octet_length(r.result::text) > 65536
    ORDER BY r.ord
    LIMIT 1;
    IF v_big.ord IS NOT NULL THEN
        RAISE EXCEPTION '%', CASE WHEN cardinality(p_job_ids) = 1
                                  THEN format('result is %s bytes; the limit is 65536', v_big.size)
                                  ELSE format('result of job %s is %s bytes; the limit is 65536',
                                              p_job_ids[v_big.ord], v_big.size) END
            USING ERRCODE = 'CD011',
                  HINT = 'Store large results elsewhere and return a reference.';
    END IF;
END;
$$;

COMMENT ON FUNCTION codity._check_results(bigint[], jsonb[]) IS
'Private: raises CD010 when results and job ids differ in number, CD011 for the first result over 64 KB.';

REVOKE ALL ON FUNCTION codity._check_results(bigint[], jsonb[]) FROM PUBLIC;
