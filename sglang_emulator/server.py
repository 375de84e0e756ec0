"""SGLang's HTTP API over the emulated engine: each path to its route (native, OpenAI-compatible,
informational), the API key, the health check and the count of requests in flight."""

from __future__ import annotations

import time
from collections.abc import Callable

from sglang_emulator import info_routes, openai_routes
from sglang_emulator.context import ServerContext
from sglang_emulator.generate_route import GenerateRoute
from sglang_emulator.http_common import BadRequest, InternalError
from sglang_emulator.http_plumbing import EmulatorHttpServer

__all__ = ["ServerContext", "make_http_server"]


def make_http_server(context: ServerContext) -> EmulatorHttpServer:
    """Bind the launch's host and port (``OSError`` when that fails, as uvicorn would report)."""
    server = EmulatorHttpServer((context.config.host, context.config.port), _Handler)
    server.context = context
    return server


class _Handler(GenerateRoute):
    """One connection's handler: a ``ThreadingHTTPServer`` runs one per connection."""

    # --- dispatch -------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        path = self.path.split("?", 1)[0]
        routes: dict[str, Callable[[], None]] = {
            "/health": self._health,
            "/health_generate": self._health,
            "/model_info": lambda: info_routes.model_info(self),
            "/get_model_info": lambda: info_routes.model_info(self),
            "/server_info": lambda: info_routes.server_info(self),
            "/get_server_info": lambda: info_routes.server_info(self),
            "/flush_cache": lambda: info_routes.flush_cache(self),
            "/metrics": lambda: info_routes.metrics(self),
            "/get_load": lambda: info_routes.get_load(self),
            "/v1/models": lambda: info_routes.models(self),
            "/generate": self._generate,
            "/v1/completions": lambda: openai_routes.completions(self),
            "/v1/chat/completions": lambda: openai_routes.chat_completions(self),
        }
        posts = {"/generate", "/v1/completions", "/v1/chat/completions"}
        handler = routes.get(path)
        try:
            if handler is None:
                self._body()
                self._json(404, {"detail": "Not Found"})
                return
            if (path in posts) != (self.command == "POST") and path != "/flush_cache":
                self._body()
                self._json(405, {"detail": "Method Not Allowed"})
                return
            api_key = self.server.context.config.api_key
            open_paths = {"/health", "/health_generate", "/metrics"}
            if (
                api_key
                and path not in open_paths
                and self.headers.get("Authorization") != f"Bearer {api_key}"
            ):
                self._body()
                self._json(401, {"error": "Unauthorized"})
                return
            if path in posts:
                self._tracked(handler)
            else:
                handler()
        except BadRequest as exc:
            self._error(400, str(exc))
        except InternalError as exc:
            self._error(500, str(exc))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # --- routes ---------------------------------------------------------------------------

    def _health(self) -> None:
        self._body()
        context = self.server.context
        if not context.ready.is_set():
            self._send(503, b"", "text/plain")
            return
        if context.engine.stalled:
            # SGLang's check sends a one-token generation and waits for the scheduler to answer
            # anything; a stuck scheduler never does, so it gives up after its timeout.
            started = time.time()
            time.sleep(context.health_check_timeout_s)
            context.log.error(
                "Health check failed. Server couldn't get a response from detokenizer for last %d "
                "seconds. tic start time: %s. last_heartbeat time: %s",
                context.health_check_timeout_s,
                time.strftime("%H:%M:%S", time.localtime(started)),
                time.strftime("%H:%M:%S", time.localtime(context.engine.stalled_unix_s)),
            )
            self._send(503, b"", "text/plain")
            return
        self._send(200, b"", "text/plain")

    def _tracked(self, handler: Callable[[], None]) -> None:
        # From the request's arrival to its last byte: what a router drain must wait for.
        context = self.server.context
        context.track(+1)
        try:
            handler()
        finally:
            context.track(-1)
