#!/usr/bin/env bash
# Makes sure PostgreSQL's server programs (initdb, pg_ctl, postgres) are installed, for the tests in
# which several sweep drivers share one study in a PostgreSQL database. The tests start their own
# cluster in a temporary folder; this script starts nothing. Idempotent: returns at once when the
# programs are there (Debian keeps them in /usr/lib/postgresql/<version>/bin).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"

have_postgres() {
    local bin
    for bin in /usr/lib/postgresql/*/bin; do
        if [ -x "$bin/initdb" ] && [ -x "$bin/pg_ctl" ] && [ -x "$bin/postgres" ]; then
            return 0
        fi
    done
    command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1
}

if have_postgres; then
    exit 0
fi
# postgresql-common's post-install creates and starts a system cluster on port 5432; the tests
# do not use it (they start theirs on a free port).
apt_install "PostgreSQL (initdb, pg_ctl)" postgresql
have_postgres
echo "ensure-postgres: PostgreSQL installed."
