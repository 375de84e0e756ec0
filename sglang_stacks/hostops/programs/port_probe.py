"""Checks a local port on the GPU host: ``listening PORT`` exits 0 when something accepts
connections there; ``healthy PORT`` exits 0 when SGLang's ``/health_generate`` answers 200;
``health PORT`` prints how it answers: ``healthy``, ``unhealthy`` (another status, or the
connection refused or closed) or ``unresponsive`` (no answer within the wait)."""

from __future__ import annotations

import socket
import sys

HEALTH_WAIT_S = 10
MODES = ("listening", "healthy", "health")


def listening(port: int) -> bool:
    """Whether a program accepts connections on 127.0.0.1:port."""
    with socket.socket() as probe:
        probe.settimeout(5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def health(port: int) -> str:
    """How the server on the port answers its generation health check."""
    import urllib.error  # here: `listening`, the most frequent question, needs no HTTP client
    import urllib.request

    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{port}/health_generate", timeout=HEALTH_WAIT_S
        ) as answer:
            return "healthy" if answer.status == 200 else "unhealthy"
    except urllib.error.HTTPError:
        return "unhealthy"
    except TimeoutError:
        return "unresponsive"
    except urllib.error.URLError as error:
        timed_out = isinstance(error.reason, (TimeoutError, socket.timeout))
        return "unresponsive" if timed_out else "unhealthy"
    except (OSError, ValueError):
        return "unhealthy"


def healthy(port: int) -> bool:
    """Whether the server on the port answers its generation health check."""
    return health(port) == "healthy"


def main(argv: list[str]) -> int:
    """Exit 0 for yes, 1 for no, 2 for a bad command line; ``health`` prints its answer."""
    if len(argv) != 2 or argv[0] not in MODES or not argv[1].isdigit():
        print(
            f"port_probe.py: unknown mode or port in {argv}; "
            "usage: port_probe.py listening|healthy|health PORT",
            file=sys.stderr,
        )
        return 2
    if argv[0] == "health":
        print(health(int(argv[1])))
        return 0
    check = listening if argv[0] == "listening" else healthy
    return 0 if check(int(argv[1])) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
