"""How many streamed tokens per second the load generator's client can take on one core, and what
each costs in CPU.

The emulator saturates near 8k tok/s on a small machine, so the token source here is a minimal
streaming endpoint written for this benchmark alone (``token_source``, run as a child process):
a stdlib asyncio HTTP server that answers SGLang's ``/generate`` (incremental chunks, with
``meta_info.completion_tokens``) or OpenAI's ``/v1/chat/completions`` (deltas and a final usage
chunk), emitting one token per stream every ``--step-ms`` the way a decode step does, with no
model, no scheduler and no tokenizer. It is not SGLang and not the emulator.

For each concurrency the load generator runs in this process (one event loop, one core); its CPU
is this process's user+system time over the run. Reported: tok/s received against the source's
schedule, CPU microseconds per token, the share of the core, and the share of inter-token gaps
under 1 ms (tokens the client bunched: the source sends each stream's tokens ``--step-ms`` apart).

Run: ``python benchmarks/loadgen_capacity.py [--route generate|chat] [--step-ms 2]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_emulator.launcher import free_port
from sglang_stacks.results.loadgen import client, contract

_CHUNKED = b"Transfer-Encoding: chunked\r\n\r\n"
_CHAT_EVENT = (
    '{{"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":[{{"index":0,'
    '"delta":{{"content":" tok"}},"logprobs":null,"finish_reason":{reason},"matched_stop":null}}],'
    '"usage":null}}'
)


async def _serve(port: int, step_s: float) -> None:
    """The token source: every ``step_s``, one token to every open stream."""
    streams: list[tuple[asyncio.StreamWriter, dict[str, int | bool], asyncio.Event]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            lines = head.lower().split(b"\r\n")
            length = next((int(line[15:]) for line in lines if line.startswith(b"content-length:")), 0)
            body = json.loads(await reader.readexactly(length)) if length else {}
            path = head.split(b" ")[1]
            if path == b"/v1/models":
                payload = b'{"data":[{"id":"m"}]}'
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
                continue
            chat = path == b"/v1/chat/completions"
            if not body.get("stream"):
                # The chat route's probe: how many tokens the (absent) template adds; none here.
                words = len(body["messages"][0]["content"].split())
                payload = json.dumps({"choices": [], "usage": {"prompt_tokens": words}}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
                continue
            wanted = body["max_tokens"] if chat else body["sampling_params"]["max_new_tokens"]
            # Token ids count as they are; chat words are one token each (no template).
            prompt = len(body.get("input_ids") or []) or len(body["messages"][0]["content"].split())
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + _CHUNKED)
            done = asyncio.Event()
            streams.append((writer, {"sent": 0, "wanted": wanted, "prompt": prompt, "chat": chat}, done))
            await done.wait()
            await writer.drain()

    async def step() -> None:
        due = time.perf_counter()
        while True:
            due += step_s
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            for writer, state, done in list(streams):
                state["sent"] = sent = int(state["sent"]) + 1
                last = sent >= int(state["wanted"])
                if state["chat"]:
                    event = _CHAT_EVENT.format(reason='"length"' if last else "null")
                    if last:
                        usage = {"prompt_tokens": state["prompt"], "completion_tokens": sent}
                        event += "\n\ndata: " + json.dumps({"choices": [], "usage": usage})
                else:
                    finish = '{"type":"length"}' if last else "null"
                    event = (
                        f'{{"text":" tok","output_ids":[42],"meta_info":{{"id":"r","finish_reason":{finish},'
                        f'"prompt_tokens":{state["prompt"]},"completion_tokens":{sent},"cached_tokens":0}}}}'
                    )
                data = b"data: " + event.encode() + b"\n\n" + (b"data: [DONE]\n\n" if last else b"")
                writer.write(b"%x\r\n%s\r\n" % (len(data), data) + (b"0\r\n\r\n" if last else b""))
                if last:
                    streams.remove((writer, state, done))
                    done.set()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    stepping = asyncio.ensure_future(step())
    async with server:
        await server.serve_forever()
    stepping.cancel()


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(url: str, route: str, streams: int, output_len: int, requests: int) -> dict[str, float]:
    """One closed-loop run of the load generator; its tok/s, CPU per token and bunching."""
    workload = contract.Workload(
        url=url, endpoint=route, input_len=8, output_len=output_len, concurrency=(streams,),
        warmup_requests=streams, repetitions=1, requests_per_repetition=requests,
    )  # fmt: skip
    cpu_before, wall_before = _cpu_s(), time.perf_counter()
    document = client.run(workload)
    cpu_s, wall_s = _cpu_s() - cpu_before, time.perf_counter() - wall_before
    (level,) = document["levels"]
    tokens = level["completion_tokens"] * (1 + streams / requests)  # the warmup's tokens cost CPU too
    return {
        "streams": streams,
        "tok_s": level["tok_s_runs"][0],
        "cpu_us_per_token": 1e6 * cpu_s / tokens,
        "core_pct": 100.0 * cpu_s / wall_s,
        "bunched_pct": level["itl_bunched_pct"],
        "errors": level["errors"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--route", choices=["generate", "chat"], default="generate")
    parser.add_argument("--step-ms", type=float, default=2.0, help="the source's time between two tokens")
    parser.add_argument("--output-len", type=int, default=500)
    parser.add_argument("--streams", default="1,8,16,32,64,96,128")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve, args.step_ms / 1000))
        return 0
    port = free_port()
    argv = [sys.executable, __file__, "--serve", str(port), "--step-ms", str(args.step_ms)]
    source = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    try:
        time.sleep(1.0)
        print(f"route {args.route}, a token per stream every {args.step_ms} ms, {args.output_len} a request")
        print("| streams | source tok/s | received tok/s | client CPU us/token | core % | gaps < 1 ms |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: |")
        for streams in (int(s) for s in args.streams.split(",")):
            url = f"http://127.0.0.1:{port}"
            row = measure(url, args.route, streams, args.output_len, max(2 * streams, 4))
            offered = streams * 1000 / args.step_ms
            print(
                f"| {streams} | {offered:.0f} | {row['tok_s']:.0f} | {row['cpu_us_per_token']:.1f} | "
                f"{row['core_pct']:.0f} | {row['bunched_pct']:.1f} % |",
                flush=True,
            )
    finally:
        source.terminate()
        source.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
