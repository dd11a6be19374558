"""Codity: a job scheduler whose queue and system of record is PostgreSQL.

The engine lives in the database (schema ``codity``, sql/); this package holds the
thin Python around it: the embedded server, migrations, the CLI, workers and the web app.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"

if __name__ == "py":  # pragma: no cover - only in a checkout, under `python -m pytest`
    # Imported as the top-level module `py`, not as `codity`: `python -m` puts the checkout
    # first on sys.path, where this folder hides the `py` shim module that pytest imports.
    # Stand in for that shim (pytest's own two lines), so `python -m pytest` works too.
    import sys

    import _pytest._py.error as error
    import _pytest._py.path as path

    sys.modules["py.error"] = error
    sys.modules["py.path"] = path
