"""codity.cron_next agrees with cronsim, the oracle, on random expressions, zones and instants.

Every case is (expression, time zone, instant). The oracle's answer is the first run that
cronsim yields strictly after the instant, or CD012 when cronsim rejects the expression or
finds no run in its 50-year window. cronsim can yield runs at or before its start in the
second pass of a repeated hour (we skip them), and on Pacific/Chatham's fall-back day it
can cycle, through past runs or inside one next() that never returns; there the oracle,
like cron_next, scans the wall clock for the first matching minute.
sql/functions/cron_next.sql explains both.

Cases go to PostgreSQL in batches, as arrays unnested into one query, so thousands of cases
cost a few round trips.

Zones: UTC, Europe/London, America/New_York, Australia/Lord_Howe (a 30-minute shift),
Asia/Kolkata (no DST, +05:30) and Pacific/Chatham (+12:45/+13:45, changing at :45). Besides
uniformly drawn instants, DST transition days are targeted: instants within a day and a
half of the transitions from 2012 to 2037 (half of them within three hours), with hours
drawn near the change.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import psycopg
import pytest
from cronsim import CronSim, CronSimError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TIME_ZONES = (
    "UTC",
    "Europe/London",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "Pacific/Chatham",
)
DST_ZONES = ("Europe/London", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham")
MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
SEPARATORS = (" ", " ", " ", "  ", "\t", " \t ")

# A pick(lo, hi) returns an int in [lo, hi]: random.Random.randint in the seeded tests,
# a hypothesis draw in the property test, so one generator serves both (and shrinks).
Pick = Callable[[int, int], int]
Outcome = datetime | str  # the next run in UTC, or the SQLSTATE raised

TRY_FUNCTION = """
CREATE FUNCTION pg_temp.cron_next_or_error(
    p_expr text, p_after timestamptz, p_time_zone text,
    OUT o_next timestamptz, OUT o_sqlstate text)
LANGUAGE plpgsql AS $$
BEGIN
    o_next := codity.cron_next(p_expr, p_after, p_time_zone);
EXCEPTION WHEN OTHERS THEN
    o_sqlstate := SQLSTATE;
END
$$
"""
BATCH = """
SELECT r.o_next, r.o_sqlstate
FROM unnest(%s::text[], %s::timestamptz[], %s::text[]) WITH ORDINALITY AS c(expr, after, tz, n)
CROSS JOIN LATERAL pg_temp.cron_next_or_error(c.expr, c.after, c.tz) AS r
ORDER BY c.n
"""


@dataclass(frozen=True)
class Field:
    lo: int
    hi: int
    names: tuple[str, ...] = ()
    name_base: int = 0


MINUTE = Field(0, 59)
HOUR = Field(0, 23)
DAY = Field(1, 31)
MONTH = Field(1, 12, MONTH_NAMES, 1)
WEEKDAY = Field(0, 7, DAY_NAMES, 0)


@dataclass(frozen=True)
class Case:
    expr: str
    time_zone: str
    after: datetime  # aware, UTC


def _value(pick: Pick, field: Field, lo: int, hi: int) -> str:
    value = pick(lo, hi)
    index = value - field.name_base
    if field.names and 0 <= index < len(field.names) and pick(0, 2) == 0:
        # Names in any case: "mon", "Mon", "MON".
        return "".join(ch.lower() if pick(0, 1) else ch for ch in field.names[index])
    return str(value)


def _term(pick: Pick, field: Field, near: tuple[int, int] | None) -> str:
    lo, hi = near if near is not None else (field.lo, field.hi)
    kind = pick(0, 9)
    if kind == 0:
        return "*"
    if kind <= 3:
        return _value(pick, field, lo, hi)
    if kind <= 5:
        a, b = sorted((pick(lo, hi), pick(lo, hi)))
        return f"{_value(pick, field, a, a)}-{_value(pick, field, b, b)}"
    if kind == 6:
        return f"*/{pick(1, field.hi + 2)}"
    if kind <= 8:
        a, b = sorted((pick(lo, hi), pick(lo, hi)))
        return f"{a}-{b}/{pick(1, 12)}"
    return f"{_value(pick, field, lo, hi)}/{pick(1, 15)}"


def _field(pick: Pick, field: Field, near: tuple[int, int] | None = None) -> str:
    if pick(0, 2) == 0:
        return "*"
    count = 1 if pick(0, 2) else pick(2, 3)
    return ",".join(_term(pick, field, near) for _ in range(count))


def _expression(pick: Pick, *, dst_hours: bool = False) -> str:
    # dst_hours: hours near the local time of a change (00:00-04:00 in these zones), minutes
    # often fixed so the wall-clock mode is exercised as much as the elapsed-time one.
    minute = _value(pick, MINUTE, 0, 59) if dst_hours and pick(0, 1) else _field(pick, MINUTE)
    hour = _field(pick, HOUR, (0, 4)) if dst_hours and pick(0, 3) else _field(pick, HOUR)
    day = "*" if dst_hours and pick(0, 1) else _field(pick, DAY)
    month = "*" if dst_hours and pick(0, 1) else _field(pick, MONTH)
    weekday = "*" if dst_hours and pick(0, 1) else _field(pick, WEEKDAY)
    fields = (minute, hour, day, month, weekday)
    separators = [SEPARATORS[pick(0, len(SEPARATORS) - 1)] for _ in range(4)]
    text = fields[0] + "".join(sep + f for sep, f in zip(separators, fields[1:], strict=True))
    return text if pick(0, 9) else f" {text}\t"


def _instant(pick: Pick, start: datetime, span_seconds: int) -> datetime:
    instant = start + timedelta(seconds=pick(0, span_seconds))
    shape = pick(0, 3)
    if shape == 0:
        return instant.replace(second=0)
    if shape == 1:
        return instant + timedelta(microseconds=pick(0, 999_999))
    return instant


@functools.cache
def _transitions(time_zone: str) -> tuple[datetime, ...]:
    """Every UTC instant from 2012 to 2037 at which the zone's offset changes."""
    zone = ZoneInfo(time_zone)
    found = []
    day = datetime(2012, 1, 1, tzinfo=UTC)
    offset = day.astimezone(zone).utcoffset()
    while day.year < 2038:
        following = day + timedelta(days=1)
        if following.astimezone(zone).utcoffset() != offset:
            lo, hi = day, following
            while hi - lo > timedelta(seconds=1):
                mid = lo + timedelta(seconds=(hi - lo) // timedelta(seconds=1) // 2)
                if mid.astimezone(zone).utcoffset() == offset:
                    lo = mid
                else:
                    hi = mid
            found.append(hi)
            offset = following.astimezone(zone).utcoffset()
        day = following
    return tuple(found)


def _random_case(pick: Pick) -> Case:
    time_zone = TIME_ZONES[pick(0, len(TIME_ZONES) - 1)]
    start = datetime(2010, 1, 1, tzinfo=UTC)
    after = _instant(pick, start, 30 * 365 * 86_400)
    return Case(_expression(pick), time_zone, after)


def _dst_case(pick: Pick) -> Case:
    time_zone = DST_ZONES[pick(0, len(DST_ZONES) - 1)]
    transitions = _transitions(time_zone)
    change = transitions[pick(0, len(transitions) - 1)]
    if pick(0, 1):
        after = _instant(pick, change - timedelta(hours=3), 6 * 3600)
    else:
        after = _instant(pick, change - timedelta(hours=36), 60 * 3600)
    return Case(_expression(pick, dst_hours=True), time_zone, after)


class _Cycle(Exception):
    """cronsim's search went round in circles."""


class _GuardedCronSim(CronSim):
    """cronsim whose next() gives up after 10,000 steps; real searches here take under 100.

    On Pacific/Chatham's fall-back day some expressions ("59 */3 * * *") make cronsim's
    next() loop forever; see sql/functions/cron_next.sql.
    """

    ticks = 0

    def tick(self, seconds: int = 1) -> None:
        self.ticks += 1
        if self.ticks > 10_000:
            raise _Cycle
        super().tick(seconds)

    def __next__(self) -> datetime:
        self.ticks = 0
        return super().__next__()


def _scan(case: Case, sim: CronSim) -> Outcome:
    """The contract read literally: the first whole minute after the instant whose wall clock
    matches cronsim's parsed fields (searched for a day)."""
    zone = ZoneInfo(case.time_zone)
    instant = case.after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    for _ in range(1440):
        local = instant.astimezone(zone)
        if (
            local.month in sim.months
            and sim.match_day(local.date())
            and local.hour in sim.hours
            and local.minute in sim.minutes
        ):
            return instant
        instant += timedelta(minutes=1)
    return "no match within a day"


def oracle(case: Case) -> Outcome:
    zone = ZoneInfo(case.time_zone)
    try:
        sim = _GuardedCronSim(case.expr, case.after.astimezone(zone))
    except CronSimError:
        return "CD012"
    runs = 0
    try:
        for run in sim:
            if run.astimezone(UTC) > case.after:
                return run.astimezone(UTC)
            runs += 1
            if runs == 200:
                # A repeated hour yields at most 60 past runs; more means cronsim cycles
                # through the past (Pacific/Chatham's fall-back day), where cron_next scans
                # the wall clock instead.
                return _scan(case, sim)
    except _Cycle:
        return _scan(case, sim)
    return "CD012"  # cronsim found nothing within 50 years


def codity(conn: psycopg.Connection[tuple[object, ...]], cases: Sequence[Case]) -> list[Outcome]:
    rows = conn.execute(
        BATCH,
        ([c.expr for c in cases], [c.after for c in cases], [c.time_zone for c in cases]),
    ).fetchall()
    outcomes: list[Outcome] = []
    for next_run, sqlstate in rows:
        if isinstance(next_run, datetime):
            outcomes.append(next_run.astimezone(UTC))
        else:
            outcomes.append(str(sqlstate))
    return outcomes


def assert_agree(conn: psycopg.Connection[tuple[object, ...]], cases: Sequence[Case]) -> None:
    ours = codity(conn, cases)
    wrong = [
        f"{c.expr!r} in {c.time_zone} after {c.after.isoformat()}: codity {got}, cronsim {want}"
        for c, got in zip(cases, ours, strict=True)
        if got != (want := oracle(c))
    ]
    assert not wrong, f"{len(wrong)} of {len(cases)} disagree:\n" + "\n".join(wrong[:25])


@pytest.fixture
def cron_conn(
    tx: psycopg.Connection[tuple[object, ...]],
) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """A rolled-back transaction (codity.cron_next writes nothing) with the error-catching
    wrapper in pg_temp."""
    tx.execute(TRY_FUNCTION)
    yield tx


def test_random_expressions_zones_and_instants_agree_with_cronsim(
    cron_conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    rng = random.Random(20240310)
    cases = [_random_case(rng.randint) for _ in range(4000)]
    for start in range(0, len(cases), 1000):
        assert_agree(cron_conn, cases[start : start + 1000])


def test_dst_transition_days_agree_with_cronsim(
    cron_conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    rng = random.Random(20241103)
    cases = [_dst_case(rng.randint) for _ in range(6000)]
    # Every transition of every zone at least once, starting just before the change.
    for time_zone in DST_ZONES:
        for change in _transitions(time_zone):
            after = change - timedelta(minutes=rng.randint(1, 90))
            cases.append(Case(_expression(rng.randint, dst_hours=True), time_zone, after))
    for start in range(0, len(cases), 1000):
        assert_agree(cron_conn, cases[start : start + 1000])


def test_chatham_fall_back_where_cronsim_cycles_gets_the_first_matching_minute(
    cron_conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    # 2024-04-07 03:45 +13:45 -> 02:45 +12:45. From 03:44 +13:45, cronsim's runs go back to
    # 03:00 +13:45 and repeat 03:00-03:44 +13:45 forever; the next matching minute is 03:00 +12:45.
    case = Case("* 3 * * *", "Pacific/Chatham", datetime(2024, 4, 6, 13, 59, tzinfo=UTC))
    sim = CronSim(case.expr, case.after.astimezone(ZoneInfo(case.time_zone)))
    assert all(next(sim).astimezone(UTC) <= case.after for _ in range(500))
    want = oracle(case)
    assert want == datetime(2024, 4, 6, 14, 15, tzinfo=UTC)
    assert codity(cron_conn, [case]) == [want]


def test_chatham_fall_back_where_cronsim_never_returns_gets_the_first_matching_minute(
    cron_conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    # From 01:05 +13:45 on 2021-04-04, cronsim's next() steps 03:00 +13:45 -> 02:59 +12:45 ->
    # 02:00 +13:45 -> 03:00 +13:45 ... forever. 03:59 +13:45 does not exist; 03:59 +12:45 does.
    case = Case("59 */3 * * *", "Pacific/Chatham", datetime(2021, 4, 3, 11, 20, tzinfo=UTC))
    with pytest.raises(_Cycle):
        next(_GuardedCronSim(case.expr, case.after.astimezone(ZoneInfo(case.time_zone))))
    want = oracle(case)
    assert want == datetime(2021, 4, 3, 15, 14, tzinfo=UTC)
    assert codity(cron_conn, [case]) == [want]


def test_transitions_are_found_for_every_dst_zone() -> None:
    # Guards the targeted test against a zone silently yielding no transition days.
    for time_zone in DST_ZONES:
        assert len(_transitions(time_zone)) >= 2 * 25, time_zone


@st.composite
def _cases(draw: st.DrawFn) -> Case:
    def pick(lo: int, hi: int) -> int:
        return draw(st.integers(lo, hi))

    return _dst_case(pick) if pick(0, 1) else _random_case(pick)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(cases=st.lists(_cases(), min_size=1, max_size=40))
def test_property_batches_agree_with_cronsim(
    cron_conn: psycopg.Connection[tuple[object, ...]], cases: list[Case]
) -> None:
    assert_agree(cron_conn, cases)


BAD_EXPRESSIONS = (
    "",
    "* * * *",
    "* * * * * * *",
    "60 * * * *",
    "* 24 * * *",
    "* * 0 * *",
    "* * 32 * *",
    "* * * 13 *",
    "* * * * 8",
    "*/0 * * * *",
    "5-1 * * * *",
    "* * * FRI *",
    "* * * * JAN",
    "* * * * FRI-MON",
    "1,,2 * * * *",
    "a * * * *",
    "-1 * * * *",
    "1- * * * *",
    "*/x * * * *",
    "** * * * *",
    "0 0 30 2 *",
    "0 0 31 4,6 *",
    "1/2/3 * * * *",
    "* * * * MONDAY",
)


def test_expressions_cronsim_rejects_raise_cd012(
    cron_conn: psycopg.Connection[tuple[object, ...]],
) -> None:
    cases = [Case(expr, "UTC", datetime(2024, 1, 1, tzinfo=UTC)) for expr in BAD_EXPRESSIONS]
    assert [oracle(c) for c in cases] == ["CD012"] * len(cases)
    assert dict(zip(BAD_EXPRESSIONS, codity(cron_conn, cases), strict=True)) == dict.fromkeys(
        BAD_EXPRESSIONS, "CD012"
    )
