#!/usr/bin/env bash
# Make .venv/ with Codity installed (editable, with its test and dev tools), so that
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

want="$(sha256sum "$root/pyproject.toml" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ]; then
    echo "codity: creating $venv" >&2
    "$python" -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "codity: installing dependencies into $venv (first run only)" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$root[dev]" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    echo "$want" > "$stamp"
fi
