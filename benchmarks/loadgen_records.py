"""What the load-generator accuracy benchmark keeps of the load generator's run, which its document
does not carry: every batch's records (warmups and repetitions) and the server's own latency of each
request. The load generator runs in this process, so its classes are wrapped (``instrument``); a
watcher task in its event loop records how late it wakes from a 5 ms sleep."""

from __future__ import annotations

import asyncio
import json
import time

from sglang_loadgen import client, contract, streaming
from sglang_loadgen.document import Document
from sglang_loadgen.streaming import RequestRecord

__all__ = ["REPETITIONS", "SENT", "SERVER_E2E_S", "instrument", "run_watching_the_loop"]

SENT: list[list[RequestRecord]] = []
"""Every batch of the run (warmups and repetitions) as the client kept them, in send order."""
REPETITIONS: list[list[RequestRecord]] = []
"""Every measured repetition's records (absolute send and finish times)."""
SERVER_E2E_S: dict[int, float] = {}
"""The emulator's own latency of each request (``meta_info.e2e_latency`` of its last chunk), by record."""


def instrument() -> None:
    """Keep every batch's records and the server's latency of each request, which the load
    generator's document does not carry (it runs in this process, so its classes are wrapped)."""
    batch, finish = client._Run.batch, streaming._Reader.finish

    async def kept_batch(run: client._Run, level: float, total: int, rep: int) -> list[RequestRecord]:
        records = await batch(run, level, total, rep)
        SENT.append(records)
        if rep >= 0:
            REPETITIONS.append(records)
        return records

    def finish_with_server_latency(reader: streaming._Reader) -> None:
        finish(reader)
        meta = (json.loads(reader.last_event).get("meta_info") or {}) if reader.last_event else {}
        if meta.get("e2e_latency") is not None:
            SERVER_E2E_S[id(reader.record)] = float(meta["e2e_latency"])

    client._Run.batch = kept_batch  # type: ignore[method-assign,assignment]
    streaming._Reader.finish = finish_with_server_latency  # type: ignore[method-assign,assignment]


async def run_watching_the_loop(workload: contract.Workload) -> tuple[Document, list[float]]:
    """The load generator's run, and how late its event loop woke a 5 ms sleep all along: a busy
    or starved client would read chunks that late."""
    lags: list[float] = []

    async def watch() -> None:
        while True:
            due = time.perf_counter() + 0.005
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - due)

    watcher = asyncio.ensure_future(watch())
    try:
        return await client.run_async(workload), lags
    finally:
        watcher.cancel()
