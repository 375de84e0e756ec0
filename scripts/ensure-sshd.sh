#!/usr/bin/env bash
# Makes sure the OpenSSH server and client are installed, for the tests that reach a test host
# over real SSH. Idempotent: when `sshd` and `ssh` are already there it returns at once.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"

have_sshd() { command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ]; }
have_ssh() { command -v ssh >/dev/null 2>&1; }

if have_sshd && have_ssh; then
    exit 0
fi

# --no-install-recommends keeps out the extras (xauth, ncurses-term) the tests never use.
apt_install "sshd or ssh" openssh-server openssh-client

# The package's post-install may start a system sshd on port 22; the tests start their own on a
# free port and do not need it, but a missing privilege-separation folder stops any sshd.
if [ "$(id -u)" -eq 0 ]; then mkdir -p /run/sshd; else sudo mkdir -p /run/sshd; fi

have_sshd && have_ssh
echo "ensure-sshd: OpenSSH server and client installed."
