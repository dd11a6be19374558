"""Codity's SQL, shipped inside the package as ``codity.sql`` (migrations/, functions/,
tests/): ``codity.db.migrate.sql_dir`` finds it through this package.

A regular package, not a namespace one: an ordinary editable install (``pip install -e .``)
maps ``codity.sql`` to this folder, and its import hook finds a package here only by this
file.
"""
