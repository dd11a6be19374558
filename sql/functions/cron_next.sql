-- codity.cron_next: the first instant strictly after p_after whose wall clock in p_time_zone
-- matches a five-field cron expression; codity.cron_validate: the same checks, nothing computed.
--
-- Callers: codity.create_schedule (cron_validate, then cron_next for the first run) and
-- codity.materialize_cron (cron_next once per due schedule, up to p_limit per tick, so the
-- function must stay cheap). Pure functions: no table is read or written, nothing is locked.
--
-- Why it is shaped so. The semantics are those of the cronsim Python library (the oracle that
-- tests/test_cron_oracle.py compares us with), and this file is a port of its search, not a
-- fresh design: cronsim's DST behaviour comes out of *how* it walks, so only walking the same
-- way agrees with it everywhere. The walk skips by field -- next matching month, then day,
-- then hour, then minute -- and restarts from the top after every move, so a call costs a
-- few dozen steps, never a minute-by-minute scan. Two modes, chosen as cronsim chooses them:
--
--   Wall-clock mode: the minute AND hour fields both do not start with '*' ("30 2 * * *",
--   "0 9-17 * * MON-FRI"), Debian cron's rule for jobs at fixed times. The search runs on the
--   naive local clock, and the matching local time L becomes an instant so:
--     * L falls in a spring-forward gap (does not exist): the job runs at the first local
--       minute after L that exists, i.e. the end of the gap -- "30 2 * * *" in New York on
--       2024-03-10 runs at 03:00 EDT; several gap times collapse into that one run.
--     * L occurs twice (fall back): the job runs once, at the first occurrence (daylight
--       time, Python's fold=0) -- "30 1 * * *" in New York on 2024-11-03 runs at 01:30 EDT.
--   Elapsed-time mode: otherwise ("*/15 * * * *", "0 * * * *", "5 */2 * * *"). The search
--   steps through real instants (cronsim's tick), reading the local wall clock at each:
--     * local times in a gap do not exist, so nothing runs there (skipped, not moved);
--     * a repeated local time matches twice -- "*/30 1 * * *" runs at 01:00 and 01:30 EDT and
--       again at 01:00 and 01:30 EST.
--   In UTC and in zones without transitions the two modes give the same answers.
--
-- Stepping artefacts kept on purpose: cronsim jumps in whole hours and, for a single-minute
-- field, straight to that minute in elapsed time. Where a transition is not a whole hour or
-- not on the hour (Australia/Lord_Howe shifts 30 minutes; Pacific/Chatham changes at :45)
-- this can skip an existing local time or land on :30 -- "40 * * * *" in Lord Howe on
-- 2024-10-06 runs at 01:40 and then 03:40, not 02:40; "* 3 * * *" on 2024-04-07 starts at
-- 03:30. We reproduce these exactly (the fold, imaginary-time and hour-phase bookkeeping
-- below) so that the oracle agrees everywhere; they never occur in whole-hour zones.
--
-- Two deliberate differences, both where cronsim answers with an instant at or before its
-- start:
--   * Wall-clock mode, started in the second pass of a repeated hour: "30 1 * * *" asked at
--     01:10 EST returns 01:30 EDT, an hour in the past. We return the first of cronsim's runs
--     strictly after p_after (here the next day's 01:30), as our contract says.
--   * Elapsed-time mode on Pacific/Chatham's fall-back day (03:45 +13:45 -> 02:45 +12:45),
--     hour field with 3 but not 2, started in 02:45-02:59 +12:45 or just before the change:
--     cronsim's "back to :00 of this hour" from 02:5x +12:45 lands on 02:00 before the
--     change, an hour later is 03:00 of the first pass, and cronsim either yields runs in the
--     past forever ("* 3 * * *") or never returns at all ("59 */3 * * *": 03:00 +13:45 plus
--     59 minutes is 02:59 +12:45, hour 2 again). Porting that would raise after the move cap
--     below (and roll back codity.materialize_cron for an hour). So when the walk returns a
--     run that is not after p_after, or its hour step goes back to a :00 it already went back
--     to (the only way it can cycle), we scan the wall clock minute by minute instead (at
--     most a day; here it finds 03:00 +12:45 within 75 minutes).
--
-- Grammar (cronsim's, minus its extensions): 5 fields separated by any whitespace; each field
-- a comma list of '*', n, a-b, */s, a-b/s, a/s (= a-max/s); JAN-DEC and SUN-SAT in any case;
-- day-of-week 0-7, 7 = Sunday. Rejected: a 6th (seconds) field and cronsim's L, W and #
-- modifiers. 'a-a/s' is the one value a (cronsim 2.8 read it as a/s; 2.9 and codity do not). Day rule
-- (Vixie): if day-of-month or day-of-week starts with '*' a day must match both, otherwise
-- either. An expression whose day-of-month never occurs in its months ("0 0 30 2 *") is
-- rejected up front, as cronsim does; the search gives up after 50 years, raising CD012
-- "never fires" (cronsim's bound; a shorter one would break rare but real schedules:
-- "0 0 29 2 *" asked in 2097 next runs in 2104).
--
-- Errors (MESSAGE, DETAIL, HINT): CD010 NULL or infinite argument; CD012 invalid expression,
-- naming the field and the bad token; CD013 unknown time zone. cron_validate checks the zone
-- against pg_catalog.pg_timezone_names itself (about 20 ms: it reads every zone file), which
-- is fine once per write; cron_next, called in loops, uses codity._cron_check_time_zone,
-- which accepts exactly the same names in microseconds (see there).
--
-- Security: cron_next and cron_validate are SECURITY DEFINER (with SET search_path, like
-- every definer here) only so that the roles granted them can reach the private _cron_*
-- helpers, which are granted to nobody; they read and write no table, so the owner's rights
-- expose nothing. The helpers are SECURITY INVOKER without SET search_path (every name is
-- qualified; a SET clause would only add per-call cost).
--
-- Masks: a field is a bigint with bit n set when value n matches (minute 0-59 fits in 60
-- bits). OUT parameters are o_*.


-- codity._cron_parse_field: one field of the expression as a bit mask, or CD012.
CREATE OR REPLACE FUNCTION codity._cron_parse_field(
    p_field text,
    p_field_name text,
    p_min integer,
    p_max integer,
    p_expr text
)
RETURNS bigint
LANGUAGE plpgsql
IMMUTABLE
SECURITY INVOKER
AS $$
DECLARE
    v_names text[] := CASE p_field_name
        WHEN 'month' THEN ARRAY['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP', 'OCT', 'NOV', 'DEC']
        WHEN 'day-of-week' THEN ARRAY['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT']
    END;
    -- Month names count from 1 (JAN = 1), day names from 0 (SUN = 0).
    v_name_base integer := CASE p_field_name WHEN 'month' THEN 1 ELSE 0 END;
    v_mask bigint := 0;
    v_term text;
    v_base text;
    v_step_text text;
    v_step integer;
    v_parts text[];
    v_value text;
    v_bounds integer[];
    v_lo integer;
    v_hi integer;
    v_reason text;
BEGIN
    FOREACH v_term IN ARRAY pg_catalog.string_to_array(p_field, ',') LOOP
        v_reason := NULL;

        -- Split "base/step" at the first '/'.
        IF pg_catalog.strpos(v_term, '/') > 0 THEN
            v_base := pg_catalog.split_part(v_term, '/', 1);
            v_step_text := pg_catalog.substr(v_term, pg_catalog.strpos(v_term, '/') + 1);
            IF v_step_text !~ '^[0-9]+$' THEN
                v_reason := 'the step after / must be a positive whole number';
            ELSE
                -- A step past the field's width picks only the first value; cap it so it fits.
                v_step := LEAST(v_step_text::numeric, 100)::integer;
                IF v_step = 0 THEN
                    v_reason := 'the step after / must not be 0';
                END IF;
            END IF;
        ELSE
            v_base := v_term;
            v_step := NULL;
        END IF;

        -- The base: '*', 'a-b' or 'a' (numbers, or names in month and day-of-week).
        IF v_reason IS NULL THEN
            IF v_base = '*' THEN
                v_lo := p_min;
                v_hi := p_max;
            ELSE
                v_parts := CASE WHEN pg_catalog.strpos(v_base, '-') > 0
                    THEN ARRAY[pg_catalog.split_part(v_base, '-', 1),
                               pg_catalog.substr(v_base, pg_catalog.strpos(v_base, '-') + 1)]
                    ELSE ARRAY[v_base] END;
                v_bounds := ARRAY[]::integer[];
                FOREACH v_value IN ARRAY v_parts LOOP
                    IF v_value = ANY (v_names) THEN
                        v_bounds := v_bounds || (pg_catalog.array_position(v_names, v_value) - 1 + v_name_base);
                    ELSIF v_value ~ '^[0-9]+$' THEN
                        IF v_value::numeric NOT BETWEEN p_min AND p_max THEN
                            v_reason := pg_catalog.format('%s is outside %s-%s', v_value, p_min, p_max);
                            EXIT;
                        END IF;
                        v_bounds := v_bounds || v_value::integer;
                    ELSIF v_value = '' THEN
                        v_reason := 'a value is missing';
                        EXIT;
                    ELSIF v_value ~ '[#?]|^[0-9]*LW?$|^[0-9]+W$' THEN
                        v_reason := 'the L, W, # and ? modifiers are not supported';
                        EXIT;
                    ELSIF v_names IS NOT NULL THEN
                        v_reason := pg_catalog.format('"%s" is neither a number from %s-%s nor a name %s-%s',
                            v_value, p_min, p_max, v_names[1], v_names[pg_catalog.array_length(v_names, 1)]);
                        EXIT;
                    ELSE
                        v_reason := pg_catalog.format('"%s" is not a number from %s-%s', v_value, p_min, p_max);
                        EXIT;
                    END IF;
                END LOOP;
                IF v_reason IS NULL THEN
                    v_lo := v_bounds[1];
                    v_hi := v_bounds[pg_catalog.array_length(v_bounds, 1)];
                    IF v_hi < v_lo THEN
                        v_reason := pg_catalog.format('the range %s-%s is reversed (write it low-high)', v_lo, v_hi);
                    ELSIF v_step IS NOT NULL AND pg_catalog.cardinality(v_parts) = 1 THEN
                        -- A single start value with a step ("5/15") runs to the field's max;
                        -- a range that starts and ends on one value ("10-10/2") is that value.
                        v_hi := p_max;
                    END IF;
                END IF;
            END IF;
        END IF;

        IF v_reason IS NOT NULL THEN
            RAISE EXCEPTION 'invalid cron expression: bad % field token "%"', p_field_name, v_term
                USING ERRCODE = 'CD012',
                      DETAIL = pg_catalog.format('In "%s": %s.', p_expr, v_reason),
                      HINT = pg_catalog.format('The %s field takes *, n, a-b, */s, a-b/s, a/s and comma lists of '
                          'them, with values %s-%s%s.', p_field_name, p_min, p_max,
                          CASE p_field_name WHEN 'month' THEN ' or JAN-DEC'
                                            WHEN 'day-of-week' THEN ' (0 and 7 are Sunday) or SUN-SAT'
                                            ELSE '' END);
        END IF;

        FOR v_value IN SELECT g::text FROM pg_catalog.generate_series(v_lo, v_hi, COALESCE(v_step, 1)) AS g LOOP
            v_mask := v_mask | (1::bigint << v_value::integer);
        END LOOP;
    END LOOP;
    RETURN v_mask;
END;
$$;

COMMENT ON FUNCTION codity._cron_parse_field(text, text, integer, integer, text) IS
'Private: one upper-cased cron field as a bit mask (bit n = value n); raises CD012 naming the bad token.

Called by codity._cron_parse only.
Example: SELECT codity._cron_parse_field(''*/15'', ''minute'', 0, 59, ''*/15 * * * *'');';

REVOKE ALL ON FUNCTION codity._cron_parse_field(text, text, integer, integer, text) FROM PUBLIC;


-- codity._cron_parse: the whole expression as five masks plus the two mode flags.
CREATE OR REPLACE FUNCTION codity._cron_parse(
    p_expr text,
    OUT o_minutes bigint,
    OUT o_hours bigint,
    OUT o_days bigint,
    OUT o_months bigint,
    OUT o_weekdays bigint,
    OUT o_is_day_and boolean,
    OUT o_is_wall_clock boolean
)
RETURNS record
LANGUAGE plpgsql
IMMUTABLE
SECURITY INVOKER
AS $$
DECLARE
    v_fields text[];
    v_count integer;
    v_month integer;
    v_first_day integer;
    v_longest integer := 0;
BEGIN
    IF p_expr IS NULL THEN
        RAISE EXCEPTION 'cron expression must not be NULL'
            USING ERRCODE = 'CD010',
                  DETAIL = 'p_expr was NULL.',
                  HINT = 'Pass five fields: minute hour day-of-month month day-of-week, e.g. ''0 2 * * *''.';
    END IF;
    v_fields := pg_catalog.regexp_split_to_array(
        pg_catalog.regexp_replace(pg_catalog.upper(p_expr), '^[[:space:]]+|[[:space:]]+$', '', 'g'),
        '[[:space:]]+');
    v_count := CASE WHEN v_fields = ARRAY[''] THEN 0 ELSE pg_catalog.array_length(v_fields, 1) END;
    IF v_count <> 5 THEN
        RAISE EXCEPTION 'invalid cron expression: expected 5 fields, got %', v_count
            USING ERRCODE = 'CD012',
                  DETAIL = pg_catalog.format('The expression was "%s".', p_expr),
                  HINT = 'Write minute hour day-of-month month day-of-week, e.g. ''*/15 9-17 * * MON-FRI''; '
                         'a seconds field is not supported.';
    END IF;

    o_minutes := codity._cron_parse_field(v_fields[1], 'minute', 0, 59, p_expr);
    o_hours := codity._cron_parse_field(v_fields[2], 'hour', 0, 23, p_expr);
    o_days := codity._cron_parse_field(v_fields[3], 'day-of-month', 1, 31, p_expr);
    o_months := codity._cron_parse_field(v_fields[4], 'month', 1, 12, p_expr);
    o_weekdays := codity._cron_parse_field(v_fields[5], 'day-of-week', 0, 7, p_expr);
    -- 7 is Sunday too: fold bit 7 onto bit 0 so matching only looks at 0-6.
    o_weekdays := (o_weekdays | ((o_weekdays >> 7) & 1)) & 127;
    o_is_day_and := pg_catalog.left(v_fields[3], 1) = '*' OR pg_catalog.left(v_fields[5], 1) = '*';
    o_is_wall_clock := pg_catalog.left(v_fields[1], 1) <> '*' AND pg_catalog.left(v_fields[2], 1) <> '*';

    -- cronsim's up-front check: with the AND rule, a day-of-month after the longest selected
    -- month can never fire ("0 0 30 2 *"). Feb counts 29 days.
    IF o_is_day_and THEN
        v_first_day := 1;
        WHILE (o_days >> v_first_day) & 1 = 0 LOOP
            v_first_day := v_first_day + 1;
        END LOOP;
        FOR v_month IN 1..12 LOOP
            IF (o_months >> v_month) & 1 = 1 THEN
                v_longest := GREATEST(v_longest,
                    (ARRAY[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])[v_month]);
            END IF;
        END LOOP;
        IF v_first_day > v_longest THEN
            RAISE EXCEPTION 'invalid cron expression: "%" never fires', p_expr
                USING ERRCODE = 'CD012',
                      DETAIL = pg_catalog.format('No selected month has a day %s (day-of-month field "%s", '
                          'month field "%s").', v_first_day, v_fields[3], v_fields[4]),
                      HINT = 'Choose a day-of-month that one of the selected months has, or add a month that has it.';
        END IF;
    END IF;
END;
$$;

COMMENT ON FUNCTION codity._cron_parse(text) IS
'Private: parse a five-field cron expression into bit masks and mode flags; raises CD010, CD012.

o_is_day_and: day-of-month or day-of-week starts with * (both must match); o_is_wall_clock:
neither minute nor hour starts with * (fixed-time job, searched on the local clock).
Example: SELECT * FROM codity._cron_parse(''0 9 * * MON-FRI'');';

REVOKE ALL ON FUNCTION codity._cron_parse(text) FROM PUBLIC;


-- codity._cron_check_time_zone: CD013 unless p_time_zone is a name in pg_timezone_names.
--
-- Querying pg_timezone_names reads all ~600 zone files (about 20 ms), too slow for a call per
-- schedule per tick. Instead we let PostgreSQL resolve the name as the TimeZone setting:
-- that accepts zone files (matched case-insensitively, reported back in their file's case)
-- and POSIX strings such as 'ABC5' or 'EST5EDT,M3.2.0/2,M11.1.0', but not abbreviations such
-- as 'PST'. A POSIX string has a digit, and a '/' only after a ','. So a name that resolves,
-- comes back spelled exactly as given, and has no digit or is path-like ('Etc/GMT+5') is a
-- zone file, i.e. is in pg_timezone_names; only the rest ('EST5EDT', 'GMT0') take the query.
-- The SET clause confines the change to this call. sql/tests/cron_next.sql checks that every
-- name in pg_timezone_names passes.
CREATE OR REPLACE FUNCTION codity._cron_check_time_zone(p_time_zone text)
RETURNS void
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
SET TimeZone = 'UTC'
AS $$
DECLARE
    v_resolved text;
BEGIN
    IF p_time_zone IS NULL THEN
        RAISE EXCEPTION 'time zone must not be NULL'
            USING ERRCODE = 'CD010',
                  DETAIL = 'p_time_zone was NULL.',
                  HINT = 'Pass an IANA name such as ''UTC'' or ''Europe/London''.';
    END IF;
    BEGIN
        v_resolved := pg_catalog.set_config('TimeZone', p_time_zone, true);
    EXCEPTION WHEN invalid_parameter_value THEN
        v_resolved := NULL;
    END;
    IF v_resolved IS DISTINCT FROM p_time_zone
       OR (p_time_zone ~ '[^A-Za-z_/-]' AND p_time_zone !~ '^[A-Za-z_+-]+(/[A-Za-z0-9_+-]+)+$'
           AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names AS n WHERE n.name = p_time_zone)) THEN
        RAISE EXCEPTION 'unknown time zone "%"', p_time_zone
            USING ERRCODE = 'CD013',
                  DETAIL = 'The name is not in pg_catalog.pg_timezone_names (names are case-sensitive; '
                           'abbreviations such as PST and POSIX strings are not accepted).',
                  HINT = 'Use an IANA name such as ''Europe/London''; SELECT name FROM pg_catalog.pg_timezone_names '
                         'lists them.';
    END IF;
END;
$$;

COMMENT ON FUNCTION codity._cron_check_time_zone(text) IS
'Private: raise CD013 unless the name is in pg_catalog.pg_timezone_names, in microseconds for the usual names.

Resolves the name as the TimeZone setting (confined to the call) and compares the spelling;
names with digits and no / (EST5EDT, GMT0, POSIX strings) fall back to pg_timezone_names.
Example: SELECT codity._cron_check_time_zone(''Europe/London'');';

REVOKE ALL ON FUNCTION codity._cron_check_time_zone(text) FROM PUBLIC;


-- codity._cron_local_to_instant: a local wall-clock reading as an instant, the way Python's
-- zoneinfo reads a datetime with that fold: unique times map to their instant; a repeated
-- time maps to its first occurrence with fold 0 and its second with fold 1; a time inside a
-- gap is read with the offset from before the transition with fold 0 (so 02:30 in New York's
-- gap is 03:30 EDT) and the offset after it with fold 1. The two offsets are sampled 15 hours
-- before and 13 hours after the reading taken as UTC, which covers every offset from -12 to
-- +14 hours; it assumes at most one transition in those 28 hours (true of the tz database
-- since 1970).
CREATE OR REPLACE FUNCTION codity._cron_local_to_instant(p_local timestamp, p_time_zone text, p_fold integer)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
SECURITY INVOKER
AS $$
DECLARE
    v_as_utc timestamptz := p_local AT TIME ZONE 'UTC';
    v_offset_before interval := ((v_as_utc - interval '15 hours') AT TIME ZONE p_time_zone)
                                - ((v_as_utc - interval '15 hours') AT TIME ZONE 'UTC');
    v_offset_after interval := ((v_as_utc + interval '13 hours') AT TIME ZONE p_time_zone)
                               - ((v_as_utc + interval '13 hours') AT TIME ZONE 'UTC');
    v_before timestamptz;
    v_after timestamptz;
    v_before_ok boolean;
    v_after_ok boolean;
BEGIN
    IF v_offset_before = v_offset_after THEN
        RETURN v_as_utc - v_offset_before;
    END IF;
    v_before := v_as_utc - v_offset_before;
    v_after := v_as_utc - v_offset_after;
    v_before_ok := (v_before AT TIME ZONE p_time_zone) = p_local;
    v_after_ok := (v_after AT TIME ZONE p_time_zone) = p_local;
    IF v_before_ok AND v_after_ok THEN
        RETURN CASE WHEN p_fold = 0 THEN LEAST(v_before, v_after) ELSE GREATEST(v_before, v_after) END;
    ELSIF v_before_ok THEN
        RETURN v_before;
    ELSIF v_after_ok THEN
        RETURN v_after;
    END IF;
    RETURN CASE WHEN p_fold = 0 THEN v_before ELSE v_after END;
END;
$$;

COMMENT ON FUNCTION codity._cron_local_to_instant(timestamp, text, integer) IS
'Private: a local wall-clock time as an instant, resolving gaps and repeats like Python zoneinfo''s fold.

fold 0: first occurrence of a repeated time, pre-transition offset inside a gap; fold 1: the other.
Example: SELECT codity._cron_local_to_instant(''2024-11-03 01:30'', ''America/New_York'', 1);';

REVOKE ALL ON FUNCTION codity._cron_local_to_instant(timestamp, text, integer) FROM PUBLIC;


-- codity.cron_next: see the header of this file.
CREATE OR REPLACE FUNCTION codity.cron_next(
    p_expr text,
    p_after timestamptz,
    p_time_zone text DEFAULT 'UTC'
)
RETURNS timestamptz
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
DECLARE
    v_spec record;
    -- The walk's clock: p_time_zone in elapsed-time mode, 'UTC' (a naive local clock) in
    -- wall-clock mode. The state is cronsim's datetime: its wall reading, its fold (NULL =
    -- as the instant implies) and its instant; a reading made by replacing fields can be
    -- imaginary, which is why all three are kept.
    v_walk_zone text;
    v_local timestamp;
    v_fold integer;
    v_instant timestamptz;
    v_result timestamptz;
    v_start_year integer;
    v_year integer;
    v_month integer;
    v_day integer;
    v_hour integer;
    v_minute integer;
    v_second integer;
    v_weekday integer;
    v_month_days integer;
    v_steps integer;
    v_target timestamptz;
    v_found boolean;
    -- Moves of the search. 50 years need a few thousand; the cap only stops a walk that
    -- cannot settle (a bug, or a zone breaking _cron_local_to_instant's assumption).
    v_moves integer := 0;
    -- Where the last hour step went back to (to catch cronsim's Chatham cycle), and where
    -- the wall-clock scan that replaces it starts.
    v_hour_start timestamptz;
    v_is_cycling boolean;
    v_scan_from timestamptz := p_after;
BEGIN
    IF p_after IS NULL THEN
        RAISE EXCEPTION 'p_after must not be NULL'
            USING ERRCODE = 'CD010',
                  DETAIL = 'cron_next needs the instant to search after.',
                  HINT = 'Pass now() or the previous run time.';
    END IF;
    IF pg_catalog.isfinite(p_after) IS NOT TRUE THEN
        RAISE EXCEPTION 'p_after must be a finite timestamp, got %', p_after
            USING ERRCODE = 'CD010',
                  DETAIL = 'There is no run after or before infinity.',
                  HINT = 'Pass now() or the previous run time.';
    END IF;
    SELECT * INTO v_spec FROM codity._cron_parse(p_expr);
    PERFORM codity._cron_check_time_zone(p_time_zone);

    -- cronsim drops the microseconds of the start, then ticks one second before each search.
    IF v_spec.o_is_wall_clock THEN
        v_walk_zone := 'UTC';
        v_local := pg_catalog.date_trunc('second', p_after AT TIME ZONE p_time_zone);
        v_instant := v_local AT TIME ZONE 'UTC';
    ELSE
        v_walk_zone := p_time_zone;
        v_instant := pg_catalog.date_trunc('second', p_after);
        v_local := v_instant AT TIME ZONE v_walk_zone;
    END IF;
    v_fold := NULL;

    -- One pass per cronsim __next__; repeat only while a run is not strictly after p_after.
    LOOP
        v_instant := v_instant + interval '1 second';
        v_local := v_instant AT TIME ZONE v_walk_zone;
        v_fold := NULL;
        v_start_year := pg_catalog.date_part('year', v_local)::integer;
        v_hour_start := NULL;
        v_is_cycling := false;

        <<search>>
        LOOP
            v_moves := v_moves + 1;
            IF v_moves > 100000 THEN
                RAISE EXCEPTION 'invalid cron expression: "%" never fires', p_expr
                    USING ERRCODE = 'CD012',
                          DETAIL = pg_catalog.format('The search for a run in %s after %s did not settle in %s moves.',
                              p_time_zone, p_after, v_moves - 1),
                          HINT = 'Report the expression, zone and instant: this should not happen.';
            END IF;

            -- Month: if it does not match, midnight on the 1st of the next month that does.
            v_year := pg_catalog.date_part('year', v_local)::integer;
            v_month := pg_catalog.date_part('month', v_local)::integer;
            IF (v_spec.o_months >> v_month) & 1 = 0 THEN
                LOOP
                    v_month := v_month % 12 + 1;
                    IF v_month = 1 THEN
                        v_year := v_year + 1;
                    END IF;
                    EXIT WHEN (v_spec.o_months >> v_month) & 1 = 1;
                END LOOP;
                v_local := pg_catalog.make_timestamp(v_year, v_month, 1, 0, 0, 0);
                v_fold := 0;
                v_instant := codity._cron_local_to_instant(v_local, v_walk_zone, 0);
            END IF;
            IF v_year > v_start_year + 50 THEN
                RAISE EXCEPTION 'invalid cron expression: "%" never fires', p_expr
                    USING ERRCODE = 'CD012',
                          DETAIL = pg_catalog.format('No local time in %s matches it within 50 years after %s.',
                              p_time_zone, p_after),
                          HINT = 'Check the day-of-month, month and day-of-week fields against each other.';
            END IF;

            -- Day: the next matching day of this month (its midnight), else the 1st of the next.
            v_day := pg_catalog.date_part('day', v_local)::integer;
            v_weekday := pg_catalog.date_part('dow', v_local)::integer;
            v_found := CASE WHEN v_spec.o_is_day_and
                THEN (v_spec.o_days >> v_day) & 1 = 1 AND (v_spec.o_weekdays >> v_weekday) & 1 = 1
                ELSE (v_spec.o_days >> v_day) & 1 = 1 OR (v_spec.o_weekdays >> v_weekday) & 1 = 1 END;
            IF NOT v_found THEN
                v_month_days := pg_catalog.date_part('day',
                    pg_catalog.date_trunc('month', v_local) + interval '1 month - 1 day')::integer;
                WHILE v_day < v_month_days LOOP
                    v_day := v_day + 1;
                    v_weekday := (v_weekday + 1) % 7;
                    v_found := CASE WHEN v_spec.o_is_day_and
                        THEN (v_spec.o_days >> v_day) & 1 = 1 AND (v_spec.o_weekdays >> v_weekday) & 1 = 1
                        ELSE (v_spec.o_days >> v_day) & 1 = 1 OR (v_spec.o_weekdays >> v_weekday) & 1 = 1 END;
                    EXIT WHEN v_found;
                END LOOP;
                IF v_found THEN
                    v_local := pg_catalog.make_timestamp(v_year, v_month, v_day, 0, 0, 0);
                ELSE
                    v_local := pg_catalog.date_trunc('month', v_local) + interval '1 month';
                END IF;
                v_fold := 0;
                v_instant := codity._cron_local_to_instant(v_local, v_walk_zone, 0);
                CONTINUE search;
            END IF;

            -- Hour: back to :00 of this hour, then forward an hour at a time until the hour
            -- matches or midnight. When the zone's offset is the same at both ends the clock ran
            -- straight, so the answer is computed; otherwise it is stepped like cronsim.
            v_hour := pg_catalog.date_part('hour', v_local)::integer;
            IF (v_spec.o_hours >> v_hour) & 1 = 0 THEN
                IF v_fold IS NULL THEN
                    v_fold := CASE WHEN codity._cron_local_to_instant(v_local, v_walk_zone, 0) <> v_instant
                                   THEN 1 ELSE 0 END;
                END IF;
                v_local := pg_catalog.date_trunc('hour', v_local);
                v_instant := codity._cron_local_to_instant(v_local, v_walk_zone, v_fold);
                -- Every other move goes forward, so a walk that makes progress goes back to a
                -- later :00 each time; going back to the same one again is cronsim's cycle.
                IF v_instant <= v_hour_start THEN
                    v_is_cycling := true;
                    EXIT search;
                END IF;
                v_hour_start := v_instant;
                v_steps := 1;
                WHILE (v_hour + v_steps) % 24 <> 0 AND (v_spec.o_hours >> ((v_hour + v_steps) % 24)) & 1 = 0 LOOP
                    v_steps := v_steps + 1;
                END LOOP;
                v_target := v_instant + pg_catalog.make_interval(hours => v_steps);
                IF (v_instant AT TIME ZONE v_walk_zone) = v_local
                   AND (v_target AT TIME ZONE v_walk_zone) = v_local + pg_catalog.make_interval(hours => v_steps) THEN
                    v_instant := v_target;
                    v_local := v_instant AT TIME ZONE v_walk_zone;
                ELSE
                    LOOP
                        v_instant := v_instant + interval '1 hour';
                        v_local := v_instant AT TIME ZONE v_walk_zone;
                        v_hour := pg_catalog.date_part('hour', v_local)::integer;
                        EXIT WHEN v_hour = 0 OR (v_spec.o_hours >> v_hour) & 1 = 1;
                    END LOOP;
                END IF;
                v_fold := NULL;
                CONTINUE search;
            END IF;

            -- Minute: back to :00 seconds; a single allowed minute is jumped to in elapsed time,
            -- then forward a minute at a time until the minute matches or is :00 (computed when
            -- the offset did not change, as for hours).
            v_minute := pg_catalog.date_part('minute', v_local)::integer;
            IF (v_spec.o_minutes >> v_minute) & 1 = 0 THEN
                IF v_fold IS NULL THEN
                    v_fold := CASE WHEN codity._cron_local_to_instant(v_local, v_walk_zone, 0) <> v_instant
                                   THEN 1 ELSE 0 END;
                END IF;
                v_local := pg_catalog.date_trunc('minute', v_local);
                v_instant := codity._cron_local_to_instant(v_local, v_walk_zone, v_fold);
                IF v_spec.o_minutes & (v_spec.o_minutes - 1) = 0 THEN
                    v_steps := 0;
                    WHILE (v_spec.o_minutes >> v_steps) & 1 = 0 LOOP
                        v_steps := v_steps + 1;
                    END LOOP;
                    v_instant := v_instant + pg_catalog.make_interval(mins => (v_steps - v_minute + 60) % 60);
                    v_local := v_instant AT TIME ZONE v_walk_zone;
                    v_fold := NULL;
                    v_minute := pg_catalog.date_part('minute', v_local)::integer;
                END IF;
                IF (v_spec.o_minutes >> v_minute) & 1 = 0 THEN
                    v_steps := 1;
                    WHILE (v_minute + v_steps) % 60 <> 0
                          AND (v_spec.o_minutes >> ((v_minute + v_steps) % 60)) & 1 = 0 LOOP
                        v_steps := v_steps + 1;
                    END LOOP;
                    v_target := v_instant + pg_catalog.make_interval(mins => v_steps);
                    IF (v_instant AT TIME ZONE v_walk_zone) = v_local
                       AND (v_target AT TIME ZONE v_walk_zone) = v_local + pg_catalog.make_interval(mins => v_steps) THEN
                        v_instant := v_target;
                        v_local := v_instant AT TIME ZONE v_walk_zone;
                    ELSE
                        LOOP
                            v_instant := v_instant + interval '1 minute';
                            v_local := v_instant AT TIME ZONE v_walk_zone;
                            v_minute := pg_catalog.date_part('minute', v_local)::integer;
                            EXIT WHEN v_minute = 0 OR (v_spec.o_minutes >> v_minute) & 1 = 1;
                        END LOOP;
                    END IF;
                END IF;
                v_fold := NULL;
                CONTINUE search;
            END IF;

            -- Second: runs are on second 0; jump to the next one in elapsed time.
            v_second := pg_catalog.date_part('second', v_local)::integer;
            IF v_second <> 0 THEN
                v_instant := v_instant + pg_catalog.make_interval(secs => 60 - v_second);
                v_local := v_instant AT TIME ZONE v_walk_zone;
                WHILE pg_catalog.date_part('second', v_local) <> 0 LOOP
                    v_instant := v_instant + interval '1 second';
                    v_local := v_instant AT TIME ZONE v_walk_zone;
                END LOOP;
                v_fold := NULL;
                CONTINUE search;
            END IF;

            EXIT search;
        END LOOP;

        IF v_spec.o_is_wall_clock THEN
            -- A local time in a gap moves to the first local minute after it that exists;
            -- a repeated one is its first occurrence (fold 0). The walk continues from there.
            WHILE (codity._cron_local_to_instant(v_local, p_time_zone, 0) AT TIME ZONE p_time_zone) <> v_local LOOP
                v_local := v_local + interval '1 minute';
            END LOOP;
            v_instant := v_local AT TIME ZONE 'UTC';
            v_result := codity._cron_local_to_instant(v_local, p_time_zone, 0);
        ELSE
            v_result := CASE WHEN v_is_cycling THEN NULL ELSE v_instant END;
            IF v_result IS NULL OR v_result <= p_after THEN
                -- cronsim cycles here (Chatham, see the header): take the contract literally
                -- and scan the wall clock a minute at a time.
                v_instant := (pg_catalog.date_trunc('minute', v_scan_from AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')
                             + interval '1 minute';
                FOR v_steps IN 1..1440 LOOP
                    v_local := v_instant AT TIME ZONE p_time_zone;
                    v_day := pg_catalog.date_part('day', v_local)::integer;
                    v_weekday := pg_catalog.date_part('dow', v_local)::integer;
                    v_found := (v_spec.o_months >> pg_catalog.date_part('month', v_local)::integer) & 1 = 1
                        AND (v_spec.o_hours >> pg_catalog.date_part('hour', v_local)::integer) & 1 = 1
                        AND (v_spec.o_minutes >> pg_catalog.date_part('minute', v_local)::integer) & 1 = 1
                        AND CASE WHEN v_spec.o_is_day_and
                                 THEN (v_spec.o_days >> v_day) & 1 = 1 AND (v_spec.o_weekdays >> v_weekday) & 1 = 1
                                 ELSE (v_spec.o_days >> v_day) & 1 = 1 OR (v_spec.o_weekdays >> v_weekday) & 1 = 1 END;
                    IF v_found THEN
                        RETURN v_instant;
                    END IF;
                    v_instant := v_instant + interval '1 minute';
                END LOOP;
                -- None within a day: walk on from there (the move cap ends a hopeless case).
                v_scan_from := v_instant;
                v_local := v_instant AT TIME ZONE v_walk_zone;
            END IF;
        END IF;
        IF v_result > p_after THEN
            RETURN v_result;
        END IF;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION codity.cron_next(text, timestamptz, text) IS
'The first instant strictly after p_after whose wall-clock time in p_time_zone matches a five-field cron expression.

Fields: minute hour day-of-month month day-of-week, each *, n, a-b, */s, a-b/s, a/s or a comma
list of them; JAN-DEC, SUN-SAT, 0 and 7 = Sunday. If both day fields are restricted a day matches
either. DST follows cronsim: a fixed-time job (minute and hour not starting with *) whose time
falls in a spring-forward gap runs when the gap ends, and once, at the first occurrence, in a
repeated hour; an interval job skips gap times and runs in both passes of a repeated hour.
Raises CD010 (NULL argument), CD012 (invalid expression, or one that never fires), CD013
(unknown time zone).
Example: SELECT codity.cron_next(''*/15 9-17 * * MON-FRI'', now(), ''Europe/London'');';

REVOKE ALL ON FUNCTION codity.cron_next(text, timestamptz, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.cron_next(text, timestamptz, text) TO codity_app, codity_readonly;


-- codity.cron_validate: the checks of cron_next without the search; callers run it before
-- writing a schedule so a bad expression or zone never reaches a table.
CREATE OR REPLACE FUNCTION codity.cron_validate(p_expr text, p_time_zone text DEFAULT 'UTC')
RETURNS void
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, codity, pg_temp
AS $$
BEGIN
    PERFORM codity._cron_parse(p_expr);
    IF p_time_zone IS NULL THEN
        RAISE EXCEPTION 'time zone must not be NULL'
            USING ERRCODE = 'CD010',
                  DETAIL = 'p_time_zone was NULL.',
                  HINT = 'Pass an IANA name such as ''UTC'' or ''Europe/London''.';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_timezone_names AS n WHERE n.name = p_time_zone) THEN
        RAISE EXCEPTION 'unknown time zone "%"', p_time_zone
            USING ERRCODE = 'CD013',
                  DETAIL = 'The name is not in pg_catalog.pg_timezone_names (names are case-sensitive; '
                           'abbreviations such as PST and POSIX strings are not accepted).',
                  HINT = 'Use an IANA name such as ''Europe/London''; SELECT name FROM pg_catalog.pg_timezone_names '
                         'lists them.';
    END IF;
END;
$$;

COMMENT ON FUNCTION codity.cron_validate(text, text) IS
'Raise CD010, CD012 or CD013 unless the cron expression and time zone are usable by codity.cron_next.

Checks the field count, every token, expressions that can never fire (day 30 in February) and
the zone against pg_catalog.pg_timezone_names; returns nothing and writes nothing.
Example: SELECT codity.cron_validate(''0 2 * * *'', ''Europe/London'');';

REVOKE ALL ON FUNCTION codity.cron_validate(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION codity.cron_validate(text, text) TO codity_app, codity_readonly;
