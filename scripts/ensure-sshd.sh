#!/usr/bin/env bash
# Makes sure the OpenSSH server and client are installed, for the tests that reach a test host
# over real SSH. Idempotent: when `sshd` and `ssh` are already there it returns at once.
set -euo pipefail

have_sshd() { command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ]; }
have_ssh() { command -v ssh >/dev/null 2>&1; }

if have_sshd && have_ssh; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-sshd: sshd or ssh is missing and apt-get is not available;" \
        "install the OpenSSH server and client with this system's package manager." >&2
    exit 1
fi

sudo_prefix=()
if [ "$(id -u)" -ne 0 ]; then
    sudo_prefix=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
"${sudo_prefix[@]}" apt-get update -qq
# --no-install-recommends keeps out the extras (xauth, ncurses-term) the tests never use.
"${sudo_prefix[@]}" apt-get install -y -qq --no-install-recommends openssh-server openssh-client >/dev/null

# The package's post-install may start a system sshd on port 22; the tests start their own on a
# free port and do not need it, but a missing privilege-separation folder stops any sshd.
"${sudo_prefix[@]}" mkdir -p /run/sshd

have_sshd && have_ssh
echo "ensure-sshd: OpenSSH server and client installed."
