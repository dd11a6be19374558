"""Codity: a job scheduler whose queue and system of record is PostgreSQL.

The engine lives in the database (schema ``codity``, sql/); this package holds the
thin Python around it: the embedded server, migrations, the CLI, workers and the web app.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
