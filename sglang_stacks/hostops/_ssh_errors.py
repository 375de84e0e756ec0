"""What an OpenSSH client's failure means, in a sentence that says what to fix."""

from __future__ import annotations

import re

from sglang_stacks.errors import HostError
from sglang_stacks.hostops._output import last_lines, said_last
from sglang_stacks.hostops.connection import Connection

__all__ = ["ssh_failure"]


def ssh_failure(conn: Connection, stderr: str) -> HostError:
    """Turns the OpenSSH client's own error into a sentence that says what to do."""
    where = f"{conn.host}:{conn.port}"
    keyscan = f"`ssh-keyscan -p {conn.port} {conn.host}`"
    if "Host key verification failed" in stderr or "REMOTE HOST IDENTIFICATION HAS CHANGED" in stderr:
        fingerprint = re.search(r"(SHA256:[A-Za-z0-9+/=]+)", stderr)
        presented = f" The host presented {fingerprint.group(1)}." if fingerprint else ""
        if conn.host_key is not None:
            return HostError(
                f"The host key of {where} does not match the pinned host.host_key.{presented} "
                "If the host was reinstalled, check its key out of band and replace host.host_key "
                f"with a line from {keyscan}; otherwise do not connect: something else answers there."
            )
        return HostError(
            f"The host key of {where} is not known.{presented} Pin it: set host.host_key to a line "
            f"from {keyscan}, checked against the host's own /etc/ssh/ssh_host_*_key.pub."
        )
    if re.search(r"Load key .*: (invalid format|incorrect passphrase|error in libcrypto)", stderr):
        return HostError(
            f"The sshPrivateKey secret for {where} is not a usable private key (unreadable, or "
            "protected by a passphrase). Set it to an unencrypted OpenSSH private key, e.g. "
            "`pulumi config set --secret sshPrivateKey < ~/.ssh/id_ed25519`."
        )
    if "Permission denied" in stderr or "Too many authentication failures" in stderr:
        return HostError(
            f"{where} refused the SSH key for user {conn.user!r}. Add the key's public half to "
            f"~{conn.user}/.ssh/authorized_keys on the host, or set host.user and the sshPrivateKey secret "
            "to a login that has it."
        )
    if "Connection refused" in stderr:
        return HostError(
            f"Nothing accepts SSH connections at {where} (connection refused). "
            "Check host.address and host.port, and that sshd runs on the host."
        )
    if "timed out" in stderr:
        return HostError(
            f"No answer from {where} within {conn.connect_timeout_s:g} s. Check the address, the "
            "firewall and that the host is up; raise the connect timeout for slow networks."
        )
    if "Could not resolve hostname" in stderr:
        return HostError(f"The host name {conn.host!r} does not resolve. Check host.address.")
    if "No route to host" in stderr or "Network is unreachable" in stderr:
        return HostError(f"{where} is unreachable from here (no route). Check host.address and the network.")
    last = last_lines(stderr)
    return HostError(
        f"SSH to {where} failed. {said_last(last)} Check the connection settings of host.", last_output=last
    )
