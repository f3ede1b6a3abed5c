#!/usr/bin/env bash
# Idempotent machine setup: Debian packages, cargo-pgrx 0.18.1, pgrx pointed at the
# system PostgreSQL 15. A second run only checks and returns.
set -euo pipefail

PKGS=(build-essential pkg-config libssl-dev clang libclang-dev sudo
      postgresql-15 postgresql-server-dev-15 postgresql-contrib python3-venv curl
      postgresql-15-cron postgresql-15-pgq3 pgqd jq
      bison flex unzip bzip2 zlib1g-dev liblz4-dev libzstd-dev)
# bison, flex: building PostgreSQL 17 and 18 from source (scripts/pg.sh); unzip: its 18 wheel.
# zlib1g-dev, liblz4-dev, libzstd-dev: present before scripts/pg.sh configures 17, whose
# flags follow the headers there (and its stamp with them); the Citus build installs the
# last two anyway, and a 17 built before them was built again on the next run.
PGRX_VERSION=0.18.1
# PG_CONFIG selects another PostgreSQL 15 installation (default: Debian's).
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    apt-get update -qq
    # postgresql-15 listed explicitly so the server and -dev stay on one minor version.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${PKGS[@]}" >/dev/null
    # A running Debian cluster would still be the old minor: restart it if present.
    pg_ctlcluster --skip-systemctl-redirect 15 main status >/dev/null 2>&1 &&
        pg_ctlcluster --skip-systemctl-redirect 15 main restart || true
fi

if ! cargo pgrx --version 2>/dev/null | grep -q "$PGRX_VERSION"; then
    echo "setup: installing cargo-pgrx $PGRX_VERSION (about 3 minutes)"
    cargo install cargo-pgrx --version "$PGRX_VERSION" --locked
fi

# Re-running init forces a rebuild of pgrx-pg-sys: only when the pg15 line is missing.
if ! grep -q '^pg15 = ' "${PGRX_HOME:-$HOME/.pgrx}/config.toml" 2>/dev/null; then
    cargo pgrx init --pg15 "$PG_CONFIG"
fi
echo "setup: ok"
