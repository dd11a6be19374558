#!/usr/bin/env bash
# Make .venv/ with Codity installed (strict editable, with its test and dev tools), so that
# ./codity and ./test work on a fresh machine with nothing set up by hand. Re-installs
# only when pyproject.toml changes. Sourced by ./codity and ./test.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
stamp="$venv/.codity-installed"

python="${CODITY_PYTHON:-}"
if [ -z "$python" ]; then
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
           "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            python="$candidate"
            break
        fi
    done
fi
if [ -z "$python" ]; then
    echo "codity: Python 3.11 or newer is needed (set CODITY_PYTHON to its path)" >&2
    exit 1
fi

# Reinstall when the project's metadata changes, or a file is added or removed under py/ or
# sql/: the install is a strict editable one (a tree of links to the sources, which mypy and
# editors read like any installed package), so a new module needs a new link.
want="$( (cat "$root/pyproject.toml" "$root/setup.py"
          cd "$root" && find py sql -type f \( -name '*.py' -o -name '*.sql' -o -name '*.js' -o -name '*.html' -o -name '*.css' -o -name '*.svg' -o -name 'py.typed' \) \
              -not -path '*/__pycache__/*' | LC_ALL=C sort) | sha256sum | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ]; then
    echo "codity: creating $venv" >&2
    "$python" -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "codity: installing dependencies into $venv (first run only)" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        --config-settings editable_mode=strict -e "$root[dev]" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    echo "$want" > "$stamp"
fi
