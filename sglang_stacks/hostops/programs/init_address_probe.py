"""Checks a multi-node server's init address from one of its hosts (standard library only).

``join HOST PORT`` (a node other than rank 0): prints ``reachable`` when HOST answers on PORT,
listening or refusing, else ``unresolved``, ``timeout`` or ``unreachable`` and the reason.
``host HOST PORT`` (rank 0): prints ``free`` when this host can listen at HOST:PORT, else
``in-use`` or ``not-local`` (HOST is not an address of this host) and the reason.
"""

from __future__ import annotations

import errno
import socket
import sys

MODES = ("join", "host")


def join(host: str, port: int) -> str:
    """Whether this host reaches HOST:PORT."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return f"unresolved {exc}"
    try:
        with socket.create_connection((host, port), timeout=5):
            return "reachable listening"
    except ConnectionRefusedError:
        return "reachable refused"
    except TimeoutError:
        return "timeout no answer within 5 s"
    except OSError as exc:
        return f"unreachable {exc.strerror or exc}"


def host(address: str, port: int) -> str:
    """Whether this host can listen at ADDRESS:PORT."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((address, port))
        except OSError as exc:
            word = "in-use" if exc.errno == errno.EADDRINUSE else "not-local"
            return f"{word} {exc.strerror or exc}"
    return "free"


def main(argv: list[str]) -> int:
    """Print the verdict; exit 2 for a bad command line."""
    if len(argv) != 3 or argv[0] not in MODES or not argv[2].isdigit():
        print(
            f"init_address_probe.py: unknown mode or port in {argv}; "
            "usage: init_address_probe.py join|host HOST PORT",
            file=sys.stderr,
        )
        return 2
    check = join if argv[0] == "join" else host
    print(check(argv[1], int(argv[2])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
