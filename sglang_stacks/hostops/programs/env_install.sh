# Makes a Python environment: creates the venv when missing, installs the pins, swaps in uploaded
# packages, and marks it finished. Runs under a lock beside the folder, so two stacks installing
# one environment take turns.
#   VENV         the venv folder (absolute: the caller's HostPath expands ~/)
#   PINS         pip requirements, one per line
#   STAGING      a folder of uploaded packages to put into site-packages, or empty
#   PACKAGES     the package folders in STAGING, one per line
#   MARKER       the marker file's name; FINGERPRINT what it records; SEEN what the caller read in
#                it before asking (empty: no marker)
#   INSTALL_LOG  pip's log file's name in the folder;  LOCK_WAIT_S  how long to wait for the lock
#   WITHOUT_PIP  1: a venv it creates gets no pip when the host's python3 has pip 22.3 or later,
#                whose --python installs into it (ensurepip costs seconds of CPU per venv)
#   WHEELS       a folder of the host's that keeps the pins' wheels, or empty: the pins are installed
#                from it without reading the package index, and it is filled from the index (pip
#                wheel) when it lacks one of them
# Exit codes that hostops/environment.py explains: 10 no venv, 11 pip failed, 12 the lock stayed
# taken, 13 site-packages could not take the uploaded packages.
unset PYTHONPATH PYTHONHOME PIP_TARGET PIP_PREFIX PIP_USER
cd / || exit 2
set -u
if [ -n "$STAGING" ]; then trap 'rm -rf "$STAGING"' EXIT; fi

mkdir -p "$(dirname "$VENV")" || exit 10
exec 9>"$VENV.lock"
if command -v flock >/dev/null 2>&1; then flock -w "$LOCK_WAIT_S" 9 || exit 12; fi
# Two updates that both found the environment unfinished wait here in turn. When the one before
# this finished the very install asked for, there is nothing left to do: doing it again would swap
# the packages under the servers that update has just started, and remove the version they read.
# A marker the caller saw already equal to the fingerprint is a repair asked for, and runs.
if [ -x "$VENV/bin/python" ] && [ "${SEEN-}" != "$FINGERPRINT" ] &&
    [ "$(cat "$VENV/$MARKER" 2>/dev/null)" = "$FINGERPRINT" ]; then
    exit 0
fi
host_pip=false
if [ -n "${WITHOUT_PIP:-}" ] && python3 -c 'import sys, pip
sys.exit(tuple(int(part) for part in pip.__version__.split(".")[:2]) < (22, 3))' 2>/dev/null; then
    host_pip=true
fi
if [ ! -x "$VENV/bin/python" ]; then
    if $host_pip; then
        python3 -m venv --without-pip "$VENV" >&2 || exit 10
    else
        python3 -m venv "$VENV" >&2 || exit 10
    fi
fi
rm -f "$VENV/$MARKER"
if "$VENV/bin/python" -c 'import pip' 2>/dev/null; then
    pip=("$VENV/bin/python" -m pip)
elif $host_pip; then
    pip=(python3 -m pip --python "$VENV/bin/python")
else
    # Made without pip, and the host's python3 has none now: the venv gets its own.
    "$VENV/bin/python" -m ensurepip --default-pip >&2 || exit 10
    pip=("$VENV/bin/python" -m pip)
fi
readarray -t pins <<<"$PINS"
: >"$VENV/$INSTALL_LOG"
install() { "${pip[@]}" install --no-input --disable-pip-version-check "$@" >>"$VENV/$INSTALL_LOG" 2>&1; }
from_wheels() { install --no-index --find-links "$WHEELS" "${pins[@]}"; }
fill_wheels() {
    # Built or downloaded aside, then moved in: an install beside this one finds whole wheels only.
    local incoming
    incoming=$(mktemp -d "$WHEELS/.incoming.XXXXXX") || return
    "${pip[@]}" wheel --no-input --disable-pip-version-check -w "$incoming" "${pins[@]}" \
        >>"$VENV/$INSTALL_LOG" 2>&1 && mv -f "$incoming"/*.whl "$WHEELS/"
    rm -rf "$incoming"
}
if [ -n "${WHEELS:-}" ] && mkdir -p "$WHEELS" 2>/dev/null && { from_wheels || { fill_wheels && from_wheels; }; }; then
    : # every pin from the kept wheels
elif ! install "${pins[@]}"; then
    tail -n 15 "$VENV/$INSTALL_LOG" >&2
    exit 11
fi
if [ -n "$STAGING" ]; then
    site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || exit 13
    readarray -t packages <<<"$PACKAGES"
    for package in "${packages[@]}"; do
        # site-packages/<package> is a link to a folder of one version, replaced by one rename: a
        # process of another stack that reads the package meanwhile (a server's lazy import, a data
        # file) finds the old version or the new one, never none. Renaming the folder aside and the
        # new one in left a moment without it (a --version check met it: "No such file").
        version=$(mktemp -d "${site:?}/.$package.XXXXXX") || exit 13
        mv -T "$STAGING/$package" "$version" || exit 13 # onto the empty folder, in its place
        # Compiled now, as pip compiles what it installs: its processes start often.
        "$VENV/bin/python" -m compileall -q "$version" >/dev/null 2>&1
        ln -s "${version##*/}" "$version.link" || exit 13
        previous=""
        if [ -L "$site/$package" ]; then
            previous=$(readlink "$site/$package")
        elif [ -e "$site/$package" ]; then # a folder installed before the links: moved aside once
            previous="$package.replaced-$$"
            mv "$site/$package" "$site/$previous" || exit 13
        fi
        mv -T "$version.link" "$site/$package" || exit 13
        case "$previous" in ".$package."* | "$package.replaced-"*) rm -rf "${site:?}/$previous" ;; esac
    done
fi
printf '%s' "$FINGERPRINT" >"$VENV/$MARKER"
