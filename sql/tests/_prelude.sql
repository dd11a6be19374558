-- Shared by every SQL test file (run first, in the same session; not a test itself).
--
-- pg_temp.codity_state(): a digest (row count and md5 of the rows) of every table in
-- schema codity, so a test can prove that a call which raised wrote nothing:
-- compare the digest before and after.
--
-- From psql: psql "$URL" -v ON_ERROR_STOP=1 -f sql/tests/_prelude.sql -f sql/tests/claim.sql

CREATE FUNCTION pg_temp.codity_state() RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_state jsonb := '{}';
    v_table text;
    v_digest text;
BEGIN
    FOR v_table IN
        SELECT c.relname FROM pg_catalog.pg_class c
        WHERE c.relnamespace = 'codity'::regnamespace AND c.relkind = 'r' ORDER BY c.relname
    LOOP
        EXECUTE format('SELECT count(*) || '':'' || md5(coalesce(string_agg(t::text, '','' ORDER BY t::text), '''')) FROM codity.%I t', v_table)
            INTO v_digest;
        v_state := v_state || jsonb_build_object(v_table, v_digest);
    END LOOP;
    RETURN v_state;
END;
$$;
