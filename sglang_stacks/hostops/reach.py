"""Whether a host answers at all, before anything is asked of it: a TCP connection to an SSH host's
port within its connect timeout (no key, no login). ``sglang-stacks check`` and ``sweep run`` ask it
first, so a host whose name does not resolve, or that nothing listens on, is named at once."""

from __future__ import annotations

import socket

from sglang_stacks.config.sections import HostSpec
from sglang_stacks.errors import HostError

__all__ = ["host_answers"]


def host_answers(host: HostSpec) -> str:
    """What answers for ``host``, as a phrase; HostError with the fix when an SSH host does not."""
    if host.kind == "emulator":
        return "the built-in SGLang emulator on this machine"
    if host.kind == "kubernetes":
        return "a Kubernetes cluster (`pulumi preview` reads its nodes)"
    assert host.address is not None  # an ssh host's spec requires it
    try:
        with socket.create_connection((host.address, host.port), timeout=host.connect_timeout_s):
            return f"{host.user}@{host.address}:{host.port} answers"
    except OSError as error:
        raise HostError(
            f"{host.address}:{host.port} does not answer ({error.strerror or error}). Check host.address "
            "and host.port, and that its SSH server runs and the network reaches it."
        ) from None
