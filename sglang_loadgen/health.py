"""The server's health, watched while the benchmark runs: a server that hangs (a stuck collective,
a scheduler that makes no progress) keeps every request open until its timeout (600 s by default,
one request after another), while its own health check says within seconds that it hangs. The
watch asks ``GET /health`` every few seconds on a connection of its own; SGLang's check answers
503 once its scheduler has not answered for its own timeout (20 s by default), and when it says so
twice in a row (or does not answer at all) the run stops and says the server hangs.

A missing route (404, 405 or 501: a server or router without it) ends the watch; any other answer
than SGLang's 503 is no verdict; a refused connection is not a hang (the server died, and its
requests fail at once, which the run reports itself)."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from .contract import LoadgenError

HEALTH_POLL_S = 5.0
"""Between the end of one health check and the next."""
HEALTH_ANSWER_S = 60.0
"""Longest a health check may take: SGLang's own gives up on its scheduler after 20 s (by default)."""
FAILED_CHECKS = 2
"""Failed checks in a row that stop the run: a single slow check on a busy server stops nothing."""
UNHEALTHY = 503
"""What SGLang's health check answers when its scheduler did not answer it in time."""
NO_HEALTH_ROUTE = frozenset({404, 405, 501})
"""Answers of a server (or router) without the route: nothing to watch."""


class ServerHangs(LoadgenError):
    """The server's health check failed ``FAILED_CHECKS`` times in a row during the benchmark."""


async def watch_health(url: str) -> None:
    """Returns only when the watch ends without a verdict (no health route); raises ServerHangs."""
    failed: list[str] = []
    first_failed_s = 0.0
    timeout = aiohttp.ClientTimeout(total=HEALTH_ANSWER_S)
    async with aiohttp.ClientSession(timeout=timeout) as client:
        while True:
            await asyncio.sleep(HEALTH_POLL_S)
            asked_s = time.monotonic()
            try:
                async with client.get(url.rstrip("/") + "/health") as reply:
                    status = reply.status
            except TimeoutError:
                status = None
            except aiohttp.ClientConnectionError:
                continue  # not a hang: gone, or briefly unreachable
            if status in NO_HEALTH_ROUTE:
                return
            if status is not None and status != UNHEALTHY:
                failed.clear()
                continue
            if not failed:
                first_failed_s = asked_s
            failed.append(f"HTTP {status}" if status is not None else f"no answer in {HEALTH_ANSWER_S:g} s")
            if len(failed) >= FAILED_CHECKS:
                raise ServerHangs(
                    f"The server at {url} hangs: its health check failed {len(failed)} times in a row "
                    f"({', '.join(failed)}) over {time.monotonic() - first_failed_s:.0f} s while requests "
                    "were in flight, so the benchmark stopped instead of waiting for each request's timeout."
                )
