"""Checks a local port on the GPU host: ``listening PORT`` exits 0 when something accepts
connections there; ``healthy PORT`` exits 0 when SGLang's ``/health_generate`` answers 200."""

from __future__ import annotations

import socket
import sys
import urllib.request


def listening(port: int) -> bool:
    """Whether a program accepts connections on 127.0.0.1:port."""
    with socket.socket() as probe:
        probe.settimeout(5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def healthy(port: int) -> bool:
    """Whether the server on the port answers its generation health check."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health_generate", timeout=10) as answer:
            return bool(answer.status == 200)
    except (OSError, ValueError):
        return False


def main(argv: list[str]) -> int:
    """Exit 0 for yes, 1 for no, 2 for a bad command line."""
    if len(argv) != 2 or argv[0] not in ("listening", "healthy") or not argv[1].isdigit():
        print("usage: port_probe.py listening|healthy PORT", file=sys.stderr)
        return 2
    check = listening if argv[0] == "listening" else healthy
    return 0 if check(int(argv[1])) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
