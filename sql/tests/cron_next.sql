-- Tests for codity.cron_next and codity.cron_validate: plain SQL that raises on failure.
--
-- Expected runs were computed with cronsim (the oracle; tests/test_cron_oracle.py compares
-- thousands of random cases) and checked by hand against the wall clock shown after each.
-- Instants are written with +00 so the session's TimeZone does not matter.

-- Lists, ranges, steps, names, the day rule, whitespace, and "strictly after".
DO $$
DECLARE
    v_case record;
    v_got timestamptz;
BEGIN
    FOR v_case IN
        SELECT c.label, c.expr, c.after::timestamptz AS after, c.time_zone, c.want::timestamptz AS want
        FROM (VALUES
            ('step',                                '*/15 * * * *',       '2024-01-01 10:07:30+00',        'UTC', '2024-01-01 10:15:00+00'),
            ('list',                                '0,30 9,17 * * *',    '2024-01-01 09:10+00',           'UTC', '2024-01-01 09:30:00+00'),
            ('list, strictly after',                '0,30 9,17 * * *',    '2024-01-01 09:30+00',           'UTC', '2024-01-01 17:00:00+00'),
            ('range with step',                     '0 9-17/4 * * *',     '2024-01-01 10:00+00',           'UTC', '2024-01-01 13:00:00+00'),
            ('a/n means a-max/n',                   '5/20 * * * *',       '2024-01-01 10:26+00',           'UTC', '2024-01-01 10:45:00+00'),
            ('a-a/n is just a, as in cronsim 2.9',   '5-5/20 * * * *',     '2024-01-01 10:26+00',           'UTC', '2024-01-01 11:05:00+00'),
            ('a/n runs from a to the max',          '5/20 * * * *',       '2024-01-01 10:26+00',           'UTC', '2024-01-01 10:45:00+00'),
            ('month names, any case',               '0 0 1 jan,Jul *',    '2024-02-01 00:00+00',           'UTC', '2024-07-01 00:00:00+00'),
            ('day names, any case',                 '0 12 * * mon-FRI',   '2024-01-06 00:00+00',           'UTC', '2024-01-08 12:00:00+00'),
            ('7 is Sunday',                         '0 0 * * 7',          '2024-01-01 00:00+00',           'UTC', '2024-01-07 00:00:00+00'),
            ('0 is Sunday',                         '0 0 * * 0',          '2024-01-01 00:00+00',           'UTC', '2024-01-07 00:00:00+00'),
            ('dom OR dow when both restricted',     '0 0 13 * FRI',       '2024-01-01 00:00+00',           'UTC', '2024-01-05 00:00:00+00'),
            ('dom alone',                           '0 0 13 * *',         '2024-01-01 00:00+00',           'UTC', '2024-01-13 00:00:00+00'),
            ('dom AND dow when dom starts with *',  '0 0 */10 * MON',     '2024-01-02 00:00+00',           'UTC', '2024-03-11 00:00:00+00'),
            ('tabs and runs of spaces',             E' 0\t 12  *   * * ', '2024-01-01 00:00+00',           'UTC', '2024-01-01 12:00:00+00'),
            ('Feb 29 skips 2100',                   '0 0 29 2 *',         '2097-01-01 00:00+00',           'UTC', '2104-02-29 00:00:00+00'),
            ('a fraction of a second before',       '*/15 * * * *',       '2024-01-01 10:14:59.999999+00', 'UTC', '2024-01-01 10:15:00+00'),
            ('exactly on a run',                    '*/15 * * * *',       '2024-01-01 10:15:00+00',        'UTC', '2024-01-01 10:30:00+00'),
            ('year end',                            '59 23 31 12 *',      '2024-06-01 00:00+00',           'UTC', '2024-12-31 23:59:00+00'),
            ('half-hour zone',                      '0 9 * * *',          '2024-01-01 00:00+00',  'Asia/Kolkata', '2024-01-01 03:30:00+00'),  -- 09:00 IST
            ('zone name with digits',               '0 9 * * *',          '2024-01-01 00:00+00',     'Etc/GMT+5', '2024-01-01 14:00:00+00')   -- 09:00 -05
        ) AS c(label, expr, after, time_zone, want)
    LOOP
        v_got := codity.cron_next(v_case.expr, v_case.after, v_case.time_zone);
        ASSERT v_got = v_case.want, pg_catalog.format('%s: cron_next(%L, %L, %L) = %s, want %s',
            v_case.label, v_case.expr, v_case.after, v_case.time_zone, v_got, v_case.want);
    END LOOP;
END;
$$;

-- DST. Europe/London 2024: 31 Mar 01:00 GMT -> 02:00 BST (01:xx does not exist);
-- 27 Oct 02:00 BST -> 01:00 GMT (01:xx happens twice). America/New_York 2024:
-- 10 Mar 02:00 EST -> 03:00 EDT; 3 Nov 02:00 EDT -> 01:00 EST.
-- Fixed-time jobs (minute and hour not starting with *) run at the end of a gap and once
-- in a repeat; interval jobs skip the gap and run in both passes of a repeat.
DO $$
DECLARE
    v_case record;
    v_got timestamptz;
BEGIN
    FOR v_case IN
        SELECT c.label, c.expr, c.after::timestamptz AS after, c.time_zone, c.want::timestamptz AS want
        FROM (VALUES
            ('London gap: fixed time moves to the gap end', '30 1 * * *',   '2024-03-31 00:00+00', 'Europe/London', '2024-03-31 01:00:00+00'),  -- 02:00 BST
            ('London gap: the next day is normal',          '30 1 * * *',   '2024-03-31 01:00+00', 'Europe/London', '2024-04-01 00:30:00+00'),  -- 01:30 BST
            ('London gap: interval job skips the day',      '*/30 1 * * *', '2024-03-30 23:00+00', 'Europe/London', '2024-04-01 00:00:00+00'),  -- 01:00 BST
            ('London gap: hourly job',                      '0 * * * *',    '2024-03-31 00:30+00', 'Europe/London', '2024-03-31 01:00:00+00'),  -- 02:00 BST
            ('London repeat: fixed time, first pass',       '30 1 * * *',   '2024-10-27 00:00+00', 'Europe/London', '2024-10-27 00:30:00+00'),  -- 01:30 BST
            ('London repeat: fixed time runs once',         '30 1 * * *',   '2024-10-27 00:30+00', 'Europe/London', '2024-10-28 01:30:00+00'),  -- 01:30 GMT
            ('London repeat: asked in the second pass',     '30 1 * * *',   '2024-10-27 01:10+00', 'Europe/London', '2024-10-28 01:30:00+00'),  -- not 01:30 BST, in the past
            ('London repeat: interval, 1st',                '*/30 1 * * *', '2024-10-27 00:00+00', 'Europe/London', '2024-10-27 00:30:00+00'),  -- 01:30 BST
            ('London repeat: interval, 2nd',                '*/30 1 * * *', '2024-10-27 00:30+00', 'Europe/London', '2024-10-27 01:00:00+00'),  -- 01:00 GMT
            ('London repeat: interval, 3rd',                '*/30 1 * * *', '2024-10-27 01:00+00', 'Europe/London', '2024-10-27 01:30:00+00'),  -- 01:30 GMT
            ('London repeat: interval, then next day',      '*/30 1 * * *', '2024-10-27 01:30+00', 'Europe/London', '2024-10-28 01:00:00+00'),  -- 01:00 GMT
            ('NY gap: fixed time moves to the gap end',     '30 2 * * *',   '2024-03-10 05:00+00', 'America/New_York', '2024-03-10 07:00:00+00'),  -- 03:00 EDT
            ('NY gap: then the next day',                   '30 2 * * *',   '2024-03-10 07:00+00', 'America/New_York', '2024-03-11 06:30:00+00'),  -- 02:30 EDT
            ('NY gap: two gap times run once',              '0,30 2 * * *', '2024-03-10 05:00+00', 'America/New_York', '2024-03-10 07:00:00+00'),  -- 03:00 EDT
            ('NY gap: ... and not again',                   '0,30 2 * * *', '2024-03-10 07:00+00', 'America/New_York', '2024-03-11 06:00:00+00'),  -- 02:00 EDT
            ('NY gap: interval job skips the day',          '*/20 2 * * *', '2024-03-10 05:00+00', 'America/New_York', '2024-03-11 06:00:00+00'),  -- 02:00 EDT
            ('NY repeat: fixed time, first pass',           '30 1 * * *',   '2024-11-03 04:00+00', 'America/New_York', '2024-11-03 05:30:00+00'),  -- 01:30 EDT
            ('NY repeat: fixed time runs once',             '30 1 * * *',   '2024-11-03 05:30+00', 'America/New_York', '2024-11-04 06:30:00+00'),  -- 01:30 EST
            ('NY repeat: asked in the second pass',         '30 1 * * *',   '2024-11-03 06:10+00', 'America/New_York', '2024-11-04 06:30:00+00'),  -- 01:30 EST
            ('NY repeat: hourly runs in both passes',       '15 * * * *',   '2024-11-03 05:20+00', 'America/New_York', '2024-11-03 06:15:00+00'),  -- 01:15 EST
            ('NY weekday job across the change',            '0 9 * * MON-FRI', '2024-11-01 14:00+00', 'America/New_York', '2024-11-04 14:00:00+00'),  -- 09:00 EST
            -- cronsim's hour-sized step over Lord Howe's 30-minute gap skips 02:40 (+11); kept.
            ('Lord Howe: cronsim step artefact',            '40 * * * *',   '2024-10-05 15:10+00', 'Australia/Lord_Howe', '2024-10-05 16:40:00+00'),  -- 03:40 +11
            -- Chatham 2024-04-07 03:45 +13:45 -> 02:45 +12:45: cronsim cycles through the past
            -- here; we scan the wall clock to 03:00 +12:45.
            ('Chatham fall-back: past the cronsim cycle',   '* 3 * * *',    '2024-04-06 13:59+00', 'Pacific/Chatham', '2024-04-06 14:15:00+00'),  -- 03:00 +12:45
            ('Chatham fall-back: second pass, hour 2',      '* 3 * * *',    '2024-04-06 14:08+00', 'Pacific/Chatham', '2024-04-06 14:15:00+00'),  -- 03:00 +12:45
            ('Chatham fall-back: first pass is normal',     '* 3 * * *',    '2024-04-06 13:30+00', 'Pacific/Chatham', '2024-04-06 13:31:00+00'),  -- 03:16 +13:45
            -- 2021-04-04: cronsim's next() never returns here; 03:59 +13:45 does not exist.
            ('Chatham fall-back: where cronsim never returns', '59 */3 * * *', '2021-04-03 11:20+00', 'Pacific/Chatham', '2021-04-03 15:14:00+00')  -- 03:59 +12:45
        ) AS c(label, expr, after, time_zone, want)
    LOOP
        v_got := codity.cron_next(v_case.expr, v_case.after, v_case.time_zone);
        ASSERT v_got = v_case.want, pg_catalog.format('%s: cron_next(%L, %L, %L) = %s, want %s',
            v_case.label, v_case.expr, v_case.after, v_case.time_zone, v_got, v_case.want);
    END LOOP;
END;
$$;

-- Bad input: the SQLSTATE, a MESSAGE naming the field and token, a DETAIL and a HINT, from
-- both cron_next and cron_validate.
DO $$
DECLARE
    v_case record;
    v_function text;
    v_state text;
    v_message text;
    v_detail text;
    v_hint text;
BEGIN
    FOR v_case IN
        SELECT c.expr, c.after::timestamptz AS after, c.time_zone, c.state, c.message
        FROM (VALUES
            ('* * * *',             '2024-01-01+00', 'UTC',           'CD012', 'expected 5 fields, got 4'),
            ('',                    '2024-01-01+00', 'UTC',           'CD012', 'expected 5 fields, got 0'),
            ('0 * * * * *',         '2024-01-01+00', 'UTC',           'CD012', 'expected 5 fields, got 6'),
            ('60 * * * *',          '2024-01-01+00', 'UTC',           'CD012', 'bad minute field token "60"'),
            ('* 24 * * *',          '2024-01-01+00', 'UTC',           'CD012', 'bad hour field token "24"'),
            ('* * 0 * *',           '2024-01-01+00', 'UTC',           'CD012', 'bad day-of-month field token "0"'),
            ('* * 32 * *',          '2024-01-01+00', 'UTC',           'CD012', 'bad day-of-month field token "32"'),
            ('* * * 13 *',          '2024-01-01+00', 'UTC',           'CD012', 'bad month field token "13"'),
            ('* * * * 8',           '2024-01-01+00', 'UTC',           'CD012', 'bad day-of-week field token "8"'),
            ('*/0 * * * *',         '2024-01-01+00', 'UTC',           'CD012', 'bad minute field token "*/0"'),
            ('1-59/x * * * *',      '2024-01-01+00', 'UTC',           'CD012', 'bad minute field token "1-59/X"'),
            ('5-1 * * * *',         '2024-01-01+00', 'UTC',           'CD012', 'bad minute field token "5-1"'),
            ('* * * * FRI-MON',     '2024-01-01+00', 'UTC',           'CD012', 'bad day-of-week field token "FRI-MON"'),
            ('* * * foo *',         '2024-01-01+00', 'UTC',           'CD012', 'bad month field token "FOO"'),
            ('* * * * JAN',         '2024-01-01+00', 'UTC',           'CD012', 'bad day-of-week field token "JAN"'),
            ('* * * * mon,tuesday', '2024-01-01+00', 'UTC',           'CD012', 'bad day-of-week field token "TUESDAY"'),
            ('1,,2 * * * *',        '2024-01-01+00', 'UTC',           'CD012', 'bad minute field token ""'),
            ('** * * * *',          '2024-01-01+00', 'UTC',           'CD012', 'bad minute field token "**"'),
            ('* * L * *',           '2024-01-01+00', 'UTC',           'CD012', 'bad day-of-month field token "L"'),
            ('* * * * 5#2',         '2024-01-01+00', 'UTC',           'CD012', 'bad day-of-week field token "5#2"'),
            ('0 0 30 2 *',          '2024-01-01+00', 'UTC',           'CD012', 'never fires'),
            ('0 0 31 4,6,9,11 *',   '2024-01-01+00', 'UTC',           'CD012', 'never fires'),
            ('0 0 * * *',           '2024-01-01+00', 'Mars/Olympus',  'CD013', 'unknown time zone "Mars/Olympus"'),
            ('0 0 * * *',           '2024-01-01+00', 'europe/london', 'CD013', 'unknown time zone "europe/london"'),
            ('0 0 * * *',           '2024-01-01+00', 'PST',           'CD013', 'unknown time zone "PST"'),
            ('0 0 * * *',           '2024-01-01+00', 'ABC5',          'CD013', 'unknown time zone "ABC5"'),
            ('0 0 * * *',           '2024-01-01+00', '+05',           'CD013', 'unknown time zone "+05"'),
            ('0 0 * * *',           '2024-01-01+00', 'EST5EDT,M3.2.0/2,M11.1.0/2', 'CD013', 'unknown time zone "EST5EDT,M3.2.0/2,M11.1.0/2"'),
            ('0 0 * * *',           '2024-01-01+00', 'Etc/GMT+15',    'CD013', 'unknown time zone "Etc/GMT+15"'),
            ('0 0 * * *',           '2024-01-01+00', '',              'CD013', 'unknown time zone ""'),
            (NULL,                  '2024-01-01+00', 'UTC',           'CD010', 'must not be NULL'),
            ('0 0 * * *',           '2024-01-01+00', NULL,            'CD010', 'must not be NULL'),
            ('0 0 * * *',           NULL,            'UTC',           'CD010', 'must not be NULL'),
            ('0 0 * * *',           'infinity',      'UTC',           'CD010', 'must be a finite timestamp')
        ) AS c(expr, after, time_zone, state, message)
    LOOP
        FOREACH v_function IN ARRAY ARRAY['cron_next', 'cron_validate'] LOOP
            CONTINUE WHEN v_function = 'cron_validate' AND (v_case.after IS NULL OR NOT pg_catalog.isfinite(v_case.after));
            v_state := NULL;
            BEGIN
                IF v_function = 'cron_next' THEN
                    PERFORM codity.cron_next(v_case.expr, v_case.after, v_case.time_zone);
                ELSE
                    PERFORM codity.cron_validate(v_case.expr, v_case.time_zone);
                END IF;
            EXCEPTION WHEN OTHERS THEN
                GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT,
                                        v_detail = PG_EXCEPTION_DETAIL, v_hint = PG_EXCEPTION_HINT;
            END;
            ASSERT v_state = v_case.state, pg_catalog.format('%s(%L, %L, %L) raised %s (%s), want %s',
                v_function, v_case.expr, v_case.after, v_case.time_zone, v_state, v_message, v_case.state);
            ASSERT pg_catalog.strpos(v_message, v_case.message) > 0, pg_catalog.format(
                '%s(%L): message %L does not contain %L', v_function, v_case.expr, v_message, v_case.message);
            ASSERT v_detail <> '' AND v_hint <> '', pg_catalog.format(
                '%s(%L, %L): DETAIL %L and HINT %L must both be set', v_function, v_case.expr,
                v_case.time_zone, v_detail, v_hint);
        END LOOP;
    END LOOP;
END;
$$;

-- Valid input passes cron_validate, which returns nothing.
DO $$
BEGIN
    PERFORM codity.cron_validate('*/15 9-17 * * MON-FRI', 'Europe/London');
    PERFORM codity.cron_validate(E'0\t0  29 FEB *');
    PERFORM codity.cron_validate('0 0 * * *', 'Pacific/Chatham');
END;
$$;

-- cron_next's fast zone check accepts exactly pg_timezone_names: every listed name passes,
-- and a name not listed but resolvable by PostgreSQL (a case variant) does not.
DO $$
DECLARE
    v_name text;
    v_rejected text[] := ARRAY[]::text[];
BEGIN
    FOR v_name IN SELECT n.name FROM pg_catalog.pg_timezone_names AS n LOOP
        BEGIN
            PERFORM codity._cron_check_time_zone(v_name);
        EXCEPTION WHEN SQLSTATE 'CD013' THEN
            v_rejected := v_rejected || v_name;
        END;
    END LOOP;
    ASSERT v_rejected = ARRAY[]::text[], pg_catalog.format('listed zones rejected: %s', v_rejected);
END;
$$;

-- The zone check leaves the session's TimeZone as it was.
DO $$
DECLARE
    v_before text := pg_catalog.current_setting('TimeZone');
BEGIN
    PERFORM codity.cron_next('0 0 * * *', '2024-01-01+00', 'Pacific/Chatham');
    ASSERT pg_catalog.current_setting('TimeZone') = v_before,
        pg_catalog.format('TimeZone changed from %s to %s', v_before, pg_catalog.current_setting('TimeZone'));
END;
$$;

-- Consecutive runs: each call after the previous run walks a whole day of a 15-minute job
-- in New York across the fall-back repeat: 25 hours, 100 runs (the repeated hour runs twice).
DO $$
DECLARE
    v_run timestamptz := '2024-11-03 03:59:59+00';  -- a second before 00:00 EDT
    v_count integer := 0;
BEGIN
    LOOP
        v_run := codity.cron_next('*/15 * * * *', v_run, 'America/New_York');
        EXIT WHEN v_run >= '2024-11-04 05:00+00';  -- 00:00 EST the next day
        v_count := v_count + 1;
    END LOOP;
    ASSERT v_count = 100, pg_catalog.format('%s runs on 2024-11-03 in New York, want 100', v_count);
END;
$$;

-- The granted roles can call both functions although the private helpers they use are
-- granted to nobody.
DO $$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['codity_app', 'codity_readonly'] LOOP
        EXECUTE pg_catalog.format('SET LOCAL ROLE %I', v_role);
        ASSERT codity.cron_next('0 9 * * *', '2024-01-01 00:00+00', 'Europe/London') = '2024-01-01 09:00+00',
            pg_catalog.format('cron_next as %s', v_role);
        PERFORM codity.cron_validate('0 9 * * *', 'Europe/London');
        RESET ROLE;
    END LOOP;
END;
$$;
