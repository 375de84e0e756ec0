"""How many streamed tokens per second the load generator's client can take on one core, and what
each costs in CPU.

The emulator saturates near 8k tok/s on a small machine, so the token source here is a minimal
streaming endpoint written for this benchmark alone (``_Source``, run as a child process): a
stdlib asyncio protocol server that answers SGLang's ``/generate`` (incremental chunks, with
``meta_info.completion_tokens``) or OpenAI's ``/v1/chat/completions`` (deltas and a final usage
chunk), emitting one token to every open stream every ``--step-ms`` the way a decode step does
(one write per stream), with no model, no scheduler and no tokenizer. It is not SGLang and not
the emulator. A late step is not caught up in a burst, so a stream's tokens always leave at
least a step apart.

For each concurrency the load generator runs in this process (one event loop, at most one core);
its CPU is this process's user+system time over the run. Reported: tok/s received against the
source's schedule, CPU microseconds per token, the client's and the source's share of a core,
and the share of inter-token gaps under 1 ms (tokens the client read together). ``--pin`` puts
the client and the source on two different cores.

Run: ``python benchmarks/loadgen_capacity.py [--route generate|chat] [--step-ms 2] [--pin]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cpu_time import own_cpu_s, process_cpu_s

from sglang_emulator.launcher import free_port
from sglang_loadgen import client, contract
from sglang_loadgen.settings import Endpoint

_CHUNKED = b"Transfer-Encoding: chunked\r\n\r\n"
_CHAT_EVENT = (
    '{{"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":[{{"index":0,'
    '"delta":{{"content":" tok"}},"logprobs":null,"finish_reason":{reason},"matched_stop":null}}],'
    '"usage":null}}'
)


class _Source(asyncio.Protocol):
    """One connection to the token source: reads requests, streams tokens when ``step`` says."""

    def __init__(self, streams: list[_Source]) -> None:
        self.streams = streams
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.sent = self.wanted = self.prompt = 0
        self.chat = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
            lines = head.lower().split(b"\r\n")
            length = next((int(line[15:]) for line in lines if line.startswith(b"content-length:")), 0)
            if len(rest) < length:
                return
            self.buffer = rest[length:]
            self.request(head.split(b" ")[1], json.loads(rest[:length]) if length else {})

    def request(self, path: bytes, body: dict[str, Any]) -> None:
        assert self.transport is not None
        if path == b"/v1/models" or not body.get("stream"):
            # The model list, or the chat route's probe: the (absent) template adds no token.
            words = len(body["messages"][0]["content"].split()) if body else 0
            payload = json.dumps({"data": [{"id": "m"}], "usage": {"prompt_tokens": words}}).encode()
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
            return
        self.chat = path == b"/v1/chat/completions"
        self.wanted = body["max_tokens"] if self.chat else body["sampling_params"]["max_new_tokens"]
        # Token ids count as they are; chat words are one token each (no template).
        self.prompt = len(body.get("input_ids") or []) or len(body["messages"][0]["content"].split())
        self.sent = 0
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + _CHUNKED)
        self.streams.append(self)

    def token(self) -> bool:
        """Send the stream's next token; True when it was the last."""
        assert self.transport is not None
        self.sent = sent = self.sent + 1
        last = sent >= self.wanted
        if self.chat:
            event = _CHAT_EVENT.format(reason='"length"' if last else "null")
            if last:
                usage = {"prompt_tokens": self.prompt, "completion_tokens": sent}
                event += "\n\ndata: " + json.dumps({"choices": [], "usage": usage})
        else:
            finish = '{"type":"length"}' if last else "null"
            event = (
                f'{{"text":" tok","output_ids":[42],"meta_info":{{"id":"r","finish_reason":{finish},'
                f'"prompt_tokens":{self.prompt},"completion_tokens":{sent},"cached_tokens":0}}}}'
            )
        data = b"data: " + event.encode() + b"\n\n" + (b"data: [DONE]\n\n" if last else b"")
        self.transport.write(b"%x\r\n%s\r\n" % (len(data), data) + (b"0\r\n\r\n" if last else b""))
        return last


async def _serve(port: int, step_s: float) -> None:
    """The token source: every ``step_s``, one token to every open stream, one write each."""
    streams: list[_Source] = []
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Source(streams), "127.0.0.1", port)
    due = ran = time.perf_counter()
    async with server:
        while True:
            # A late step does not catch up in a burst: a stream's tokens leave at least a step
            # apart, so gaps under 1 ms are the client's doing.
            due = max(due + step_s, ran + step_s)
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            ran = time.perf_counter()
            streams[:] = [stream for stream in streams if not stream.token()]


def measure(
    url: str, route: Endpoint, streams: int, output_len: int, requests: int, source: int
) -> dict[str, float]:
    """One closed-loop run of the load generator; its tok/s, CPU per token and bunching, and the
    share of a core the source (process ``source``) used."""
    workload = contract.Workload(
        url=url, endpoint=route, input_len=8, output_len=output_len, concurrency=(streams,),
        warmup_requests=streams, repetitions=1, requests_per_repetition=requests,
    )  # fmt: skip
    cpu_before, source_before, wall_before = own_cpu_s(), process_cpu_s(source), time.perf_counter()
    document = client.run(workload)
    cpu_s, wall_s = own_cpu_s() - cpu_before, time.perf_counter() - wall_before
    source_s = process_cpu_s(source) - source_before
    (level,) = document.levels
    tokens = level.completion_tokens * (1 + streams / requests)  # the warmup's tokens cost CPU too
    return {
        "streams": streams,
        "tok_s": level.tok_s_runs[0],
        "cpu_us_per_token": 1e6 * cpu_s / tokens,
        "core_pct": 100.0 * cpu_s / wall_s,
        "source_core_pct": 100.0 * source_s / wall_s,
        "bunched_pct": level.itl_bunched_pct,
        "errors": level.errors,
    }


def _wait_for(port: int) -> None:
    """Until the source accepts connections (a loaded machine can take seconds to start it)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--route", choices=["generate", "chat"], default="generate")
    parser.add_argument("--step-ms", type=float, default=2.0, help="the source's time between two tokens")
    parser.add_argument("--output-len", type=int, default=500)
    parser.add_argument("--streams", default="1,8,16,32,64,96,128")
    parser.add_argument("--pin", action="store_true", help="the client on one core, the source on another")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve, args.step_ms / 1000))
        return 0
    port = free_port()
    argv = [sys.executable, __file__, "--serve", str(port), "--step-ms", str(args.step_ms)]
    source = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    cores = sorted(os.sched_getaffinity(0))
    if args.pin and len(cores) >= 2:
        # The client on one core, the source on another: "one core" is the client's alone.
        os.sched_setaffinity(0, {cores[0]})
        os.sched_setaffinity(source.pid, {cores[1]})
    try:
        _wait_for(port)
        print(f"route {args.route}, a token per stream every {args.step_ms} ms, {args.output_len} a request")
        print("| streams | source's schedule tok/s | received tok/s | client CPU us/token | client core % "
              "| source core % | gaps < 1 ms |")  # fmt: skip
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for streams in (int(s) for s in args.streams.split(",")):
            url = f"http://127.0.0.1:{port}"
            row = measure(url, args.route, streams, args.output_len, max(2 * streams, 4), source.pid)
            offered = streams * 1000 / args.step_ms
            print(
                f"| {streams} | {offered:.0f} | {row['tok_s']:.0f} | {row['cpu_us_per_token']:.1f} | "
                f"{row['core_pct']:.0f} | {row['source_core_pct']:.0f} | {row['bunched_pct']:.1f} % |",
                flush=True,
            )
    finally:
        source.terminate()
        source.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
