"""The migrated schema is what the rest of the suite assumes."""

import psycopg


def test_migrated_database_has_default_project(tx: psycopg.Connection) -> None:
    row = tx.execute("SELECT slug FROM codity.projects WHERE is_default").fetchone()
    assert row == ("default",)
