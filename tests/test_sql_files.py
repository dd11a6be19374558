"""Every sql/tests/*.sql file is one test, run whole in a transaction that is rolled back.

The files are plain SQL that raise on failure (DO blocks with ASSERT), so psql can run them
too: ``psql "$URL" -v ON_ERROR_STOP=1 -f sql/tests/_prelude.sql -f sql/tests/claim.sql``
(the prelude defines helpers every file uses). Here the prelude and a file are sent in one
call, inside the rolled-back transaction of the ``tx`` fixture (on the session's shared
database, so every file starts from the freshly migrated state), so a file sees its own
writes, and time moves only through the functions' ``p_now`` arguments.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from codity.db.migrate import sql_dir

PRELUDE = sql_dir() / "tests" / "_prelude.sql"
SQL_TESTS = sorted(
    (p for p in (sql_dir() / "tests").glob("*.sql") if not p.name.startswith("_")),
    key=lambda p: p.name,
)


def _failure(path: Path, exc: psycopg.Error) -> str:
    diag = exc.diag
    lines = [f"{path.name}: {diag.sqlstate} {diag.message_primary or exc}"]
    lines += [
        f"  {label}: {text}"
        for label, text in (
            ("detail", diag.message_detail),
            ("hint", diag.message_hint),
            ("where", diag.context),
        )
        if text
    ]
    return "\n".join(lines)


def test_sql_test_files_are_collected() -> None:
    assert SQL_TESTS, f"no SQL tests found in {sql_dir() / 'tests'}"


@pytest.mark.parametrize("path", SQL_TESTS, ids=[p.name for p in SQL_TESTS])
def test_sql_file_passes(tx: psycopg.Connection, path: Path) -> None:
    failure: str | None = None
    try:
        tx.execute(PRELUDE.read_bytes() + b"\n" + path.read_bytes())
    except psycopg.Error as exc:
        failure = _failure(path, exc)
    if failure is not None:
        pytest.fail(failure, pytrace=False)
