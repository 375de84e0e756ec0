"""The multi-node process group: every node's server joins rank 0 at ``--dist-init-addr``.

SGLang starts one server per node with ``--nnodes N --node-rank R --dist-init-addr HOST:PORT``;
torch's distributed init blocks until all N nodes have joined the store that rank 0 hosts at
that address, and a node that dies later takes the group down. Here rank 0 listens at the
address, each other rank connects (retrying while rank 0 is not up yet, as torch's store client
does), and the connections stay open for the group's life: when one closes, the other side
knows its peer is gone. Once the group is formed rank 0 stops accepting, so a node of a later
launch never joins a group that is already running.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Group", "GroupError", "join_group", "split_address"]

_RETRY_S = 0.2
_WARN_EVERY_S = 10.0


class GroupError(Exception):
    """The group could not form; the message is torch's error line."""


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as a pair; ValueError when it is not one."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--dist-init-addr {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


@dataclass
class Group:
    """This node's open connections to the rest of the group, watched for a peer that leaves."""

    rank: int
    nnodes: int
    peers: dict[int, socket.socket] = field(default_factory=dict)
    """rank 0: every other rank's connection; rank R > 0: rank 0's, under 0."""

    def watch(self, on_peer_lost: Callable[[int], None]) -> None:
        """Calls ``on_peer_lost(rank)`` (in a thread) when a peer's connection closes."""
        for rank, peer in self.peers.items():
            threading.Thread(target=self._wait_closed, args=(rank, peer, on_peer_lost), daemon=True).start()

    @staticmethod
    def _wait_closed(rank: int, peer: socket.socket, on_peer_lost: Callable[[int], None]) -> None:
        peer.settimeout(None)
        with contextlib.suppress(OSError):
            while peer.recv(64):
                pass
        on_peer_lost(rank)


@dataclass(frozen=True)
class _Hello:
    rank: int
    nnodes: int
    tp_size: int

    def encode(self) -> bytes:
        return (
            json.dumps({"rank": self.rank, "nnodes": self.nnodes, "tp_size": self.tp_size}) + "\n"
        ).encode()


def _read_line(sock: socket.socket, deadline: float) -> str:
    data = b""
    while not data.endswith(b"\n"):
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data.decode()


def join_group(
    address: str, hello: tuple[int, int, int], timeout_s: float, warn: Callable[[str], None]
) -> Group:
    """Join (rank > 0) or host (rank 0) the group at ``address``; GroupError after ``timeout_s``.

    ``hello`` is (node rank, nnodes, tp size): every node must agree on the last two.
    """
    me = _Hello(*hello)
    host, port = split_address(address)
    if me.rank == 0:
        return _host(me, host, port, timeout_s, warn)
    return _join(me, host, port, timeout_s, warn)


def _host(me: _Hello, host: str, port: int, timeout_s: float, warn: Callable[[str], None]) -> Group:
    deadline = time.monotonic() + timeout_s
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        warn(
            f"[c10d] The server socket has failed to bind to [{host}]:{port} "
            f"(errno: {exc.errno} - {(exc.strerror or str(exc)).capitalize()})."
        )
        raise GroupError(
            f"torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
            f"network address. port: {port}, useIpv6: 0, code: -{exc.errno}, name: {exc.strerror}"
        ) from None
    listener.listen(64)
    group = Group(0, me.nnodes)
    try:
        while len(group.peers) < me.nnodes - 1:
            listener.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                peer, _ = listener.accept()
            except TimeoutError:
                missing = sorted(set(range(1, me.nnodes)) - set(group.peers))
                raise GroupError(
                    f"torch.distributed.DistStoreError: Timed out after {timeout_s:g} seconds waiting "
                    f"for clients. {len(group.peers) + 1}/{me.nnodes} clients joined "
                    f"(sglang-emulator: node ranks {missing} never reached {host}:{port})."
                ) from None
            _admit(me, group, peer, deadline)
        for peer in group.peers.values():
            peer.sendall(b'{"formed": true}\n')
    finally:
        listener.close()
    return group


def _admit(me: _Hello, group: Group, peer: socket.socket, deadline: float) -> None:
    try:
        hello = json.loads(_read_line(peer, min(deadline, time.monotonic() + 10)))
        rank, nnodes, tp = int(hello["rank"]), int(hello["nnodes"]), int(hello["tp_size"])
    except (OSError, ValueError, KeyError, TypeError):
        peer.close()
        return
    problem = ""
    if (nnodes, tp) != (me.nnodes, me.tp_size):
        problem = f"node {rank} runs --nnodes {nnodes} --tp-size {tp}, rank 0 {me.nnodes} and {me.tp_size}"
    elif rank in group.peers or not 0 < rank < me.nnodes:
        problem = f"node rank {rank} is out of range or already joined"
    if problem:
        with contextlib.suppress(OSError):
            peer.sendall((json.dumps({"error": problem}) + "\n").encode())
        peer.close()
        return
    group.peers[rank] = peer


def _join(me: _Hello, host: str, port: int, timeout_s: float, warn: Callable[[str], None]) -> Group:
    deadline = time.monotonic() + timeout_s
    warned_at = -_WARN_EVERY_S
    while True:
        try:
            peer = socket.create_connection((host, port), timeout=5)
        except OSError as exc:
            if time.monotonic() >= deadline:
                raise GroupError(
                    f"torch.distributed.DistNetworkError: The client socket has timed out after "
                    f"{round(timeout_s * 1000)}ms while trying to connect to ({host}, {port})."
                ) from None
            if time.monotonic() - warned_at >= _WARN_EVERY_S:
                warned_at = time.monotonic()
                warn(
                    f"[c10d] The client socket has failed to connect to [{host}]:{port} "
                    f"(errno: {exc.errno} - {(exc.strerror or str(exc)).capitalize()})."
                )
            time.sleep(_RETRY_S)
            continue
        try:
            peer.sendall(me.encode())
            answer = json.loads(_read_line(peer, deadline + 3600))
        except (OSError, ValueError):
            peer.close()
            time.sleep(_RETRY_S)
            continue
        if "error" in answer:
            peer.close()
            raise GroupError(f"RuntimeError: the process group refused this node: {answer['error']}")
        return Group(me.rank, me.nnodes, {0: peer})
