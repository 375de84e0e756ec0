"""A TCP forwarder on 127.0.0.1 that can be taken down and brought back on the same port: a host
whose sshd dies (connections refused, open sessions cut) and comes back, while the real sshd
behind it keeps serving the other hosts."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpForwarder:
    """Forwards connections on ``port`` to ``target_port``, until `close`; `open` listens again."""

    def __init__(self, port: int, target_port: int) -> None:
        self.port, self.target_port = port, target_port
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()

    def open(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def close(self) -> None:
        """Refuses new connections and cuts the open ones, as a host that died would."""
        if self._listener is not None:
            # shutdown wakes the thread blocked in accept(); close alone would leave it listening.
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                return  # closed
            with self._lock:
                self._open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass
