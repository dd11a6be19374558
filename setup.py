"""Packages found, not listed: the sources of package ``codity`` live in py/ (DESIGN.md's
layout), and its SQL in sql/ ships inside it as ``codity.sql``."""

from setuptools import find_packages, setup

setup(
    package_dir={"codity": "py", "codity.sql": "sql"},
    packages=["codity", *(f"codity.{name}" for name in find_packages("py")), "codity.sql"],
)
