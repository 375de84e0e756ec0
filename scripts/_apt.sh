# Sourced by the ensure-*.sh scripts: installs Debian packages with apt-get, as root or through sudo,
# quietly and without recommended extras. `apt_install WHAT PACKAGE...`; WHAT names them in errors.

apt_install() {
    local what=$1
    shift
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$what is missing and apt-get is not available; install $* with this system's package manager." >&2
        return 1
    fi
    local sudo_prefix=()
    if [ "$(id -u)" -ne 0 ]; then
        sudo_prefix=(sudo)
    fi
    export DEBIAN_FRONTEND=noninteractive
    # Several ensure-*.sh scripts may run side by side (scripts/test.sh): each waits its turn for
    # apt's lock instead of failing on it.
    local wait_for_lock=(-o DPkg::Lock::Timeout=600)
    # apt's timeout covers dpkg's lock, not the package lists' lock that `update` takes: while
    # another script updates the lists, this one waits (up to ten minutes) and tries again.
    local deadline=$((SECONDS + 600)) error
    until error=$("${sudo_prefix[@]}" apt-get "${wait_for_lock[@]}" update -qq 2>&1 >/dev/null); do
        if [[ "$error" != *"Could not get lock"* ]] || ((SECONDS >= deadline)); then
            echo "$error" >&2
            return 1
        fi
        sleep 2
    done
    "${sudo_prefix[@]}" apt-get "${wait_for_lock[@]}" install -y -qq --no-install-recommends "$@" >/dev/null
}
