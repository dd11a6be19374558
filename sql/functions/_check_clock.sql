-- codity._check_clock: only tests move time.
--
-- Every public function takes p_now (DEFAULT now()) so that tests move time instead of
-- sleeping (River's habit). Left open, it let any caller shift a lease, a heartbeat, a
-- run_at or a cron boundary: heartbeat(..., p_now => now() + interval '1 year') kept a job
-- leased for a year, beyond the reach of sweep and reap. So a p_now other than now() is
-- honoured only for a superuser or a member of codity_clock (migration 0004); any other
-- caller gets CD022 and nothing is written. Time always comes from the database.
--
-- Who is calling: inside a SECURITY DEFINER function current_user is the owner, but the
-- `role` setting still holds what the session SET ROLE to (or 'none'), and session_user the
-- login. Both can only name roles the session may become, so neither can be forged.
-- Called first by every public function that takes p_now. Reads nothing; locks nothing.
--
-- SECURITY INVOKER without SET: called only from definer functions, it runs as their
-- owner under their pinned search_path (pg_temp last); granted to nobody.

CREATE OR REPLACE FUNCTION codity._check_clock(p_now timestamptz)
RETURNS void
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
AS $$
DECLARE
    v_caller text;
BEGIN
    IF p_now = pg_catalog.now() THEN
        RETURN;
    END IF;
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'p_now must not be NULL' USING ERRCODE = 'CD010',
              HINT = 'Leave p_now out: time comes from the database.';
    END IF;
    v_caller := pg_catalog.current_setting('role');
    IF v_caller = 'none' THEN
        v_caller := session_user;
    END IF;
    IF NOT pg_catalog.pg_has_role(v_caller, 'codity_clock', 'MEMBER') THEN
        RAISE EXCEPTION 'only tests may move the clock: % may not pass p_now', v_caller
            USING ERRCODE = 'CD022',
                  DETAIL = pg_catalog.format('p_now was %s; the database''s time is %s.',
                                             p_now, pg_catalog.now()),
                  HINT = 'Leave p_now out. Moving time needs a superuser or a member of codity_clock.';
    END IF;
END;
$$;

COMMENT ON FUNCTION codity._check_clock(timestamptz) IS
'Private: raise CD022 unless p_now is now() or the caller is a superuser or member of codity_clock.';

REVOKE ALL ON FUNCTION codity._check_clock(timestamptz) FROM PUBLIC;
