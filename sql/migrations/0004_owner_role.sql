-- Codity schema, version 4: a NOLOGIN owner for everything in schema codity, and a role
-- that may move the functions' clock.
--
-- Every SECURITY DEFINER function runs as its owner. Until now that was whoever ran the
-- migration, a superuser in the embedded setup, so one slip in one function (the pg_temp
-- search_path hole fixed with this version) handed the caller superuser. codity_owner owns
-- the schema and every object in it, has no LOGIN, no SUPERUSER, no CREATEROLE, and is a
-- member of nothing: the worst a definer function can be tricked into is what codity_owner
-- may do, which is codity's own tables.
--
-- Ownership itself is handed over by `codity migrate` after the migrations have run (and
-- again on every run, so an object a later migration creates as the migrating login is
-- adopted too; see codity.db.migrate), and the function files are then applied as
-- codity_owner. This file only creates the roles.
--
-- codity_clock: the functions take p_now so that tests move time instead of sleeping; a
-- p_now other than now() is honoured only for a superuser or a member of codity_clock
-- (codity._check_clock). No production role is, or should be, a member.
-- Append-only: never edit this file once merged; add a new migration instead.
-- depends: 0003_api_tenancy

DO $roles$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'codity_owner') THEN
        CREATE ROLE codity_owner NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'codity_clock') THEN
        CREATE ROLE codity_clock NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS;
    END IF;
    -- A migrating login that is not a superuser must be able to act as the owner to hand
    -- objects over and to replace the functions (CREATEROLE lets it grant this to itself).
    IF NOT (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user)
       AND NOT pg_catalog.pg_has_role(current_user, 'codity_owner', 'MEMBER') THEN
        EXECUTE pg_catalog.format('GRANT codity_owner TO %I', current_user);
    END IF;
END
$roles$;

-- The session helpers of migration 0003 run inside row-level security policies; pin
-- pg_temp last like every other function (they are SECURITY INVOKER: no escalation, but a
-- caller's temporary objects must not change what they mean).
ALTER FUNCTION codity.current_project_id() SET search_path = pg_catalog, codity, pg_temp;
ALTER FUNCTION codity.current_org_id() SET search_path = pg_catalog, codity, pg_temp;
