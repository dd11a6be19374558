"""Every sql/tests/*.sql file is one test, run whole in a fresh database of its own.

The files are plain SQL that raise on failure (DO blocks with ASSERT), so psql can run them
too: ``psql "$URL" -v ON_ERROR_STOP=1 -f sql/tests/_prelude.sql -f sql/tests/claim.sql``
(the prelude defines helpers every file uses). Here the prelude and a file are sent in one
call; PostgreSQL runs a multi-statement query string as one implicit transaction, so a file
sees its own writes, and time moves only through the functions' ``p_now`` arguments.
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
def test_sql_file_passes(db_url: str, path: Path) -> None:
    failure: str | None = None
    with psycopg.connect(db_url, autocommit=True) as conn:
        try:
            conn.execute(PRELUDE.read_bytes() + b"\n" + path.read_bytes())
        except psycopg.Error as exc:
            failure = _failure(path, exc)
    if failure is not None:
        pytest.fail(failure, pytrace=False)
