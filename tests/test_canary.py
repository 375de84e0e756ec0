"""Which replica the canary gate judges against (the declared reference, another replica of the
router when that one is dead, none when the reference serves the canary's own configuration), and
the reference's trip out of the router and back while both are measured.

The router's ``GET /workers`` and the replicas' ``/health`` are served by small stdlib HTTP servers
on 127.0.0.1 answering exactly what sglang-router 0.3.2 and SGLang answer (the label sits in each
worker's ``metadata``); the trip out and back runs the real router and emulator replicas.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sglang_emulator import start_emulator
from sglang_stacks.components._canary_reference import Reference, out_of_router, pick_reference
from sglang_stacks.components.canary import CanaryInputs, CanaryOutputs, CanaryProvider
from sglang_stacks.components.router import RouterInputs, WorkerInputs, add_worker, start_router, stop_router
from sglang_stacks.config.benchmark_spec import BenchmarkSpec
from sglang_stacks.config.fleet import RolloutSpec
from sglang_stacks.errors import BenchmarkError
from sglang_stacks.hostops import lifetime, router_workers
from tests._pulumi import free_port
from tests._router import local_router_props


def serve(answers: dict[str, Any], asked: list[str] | None = None) -> str:
    """An HTTP server in a thread answering each path in ``answers`` with its JSON; its URL. The
    methods and paths of requests other than GET go to ``asked``."""

    class Handler(BaseHTTPRequestHandler):
        def do_DELETE(self) -> None:
            if asked is not None:
                asked.append(f"DELETE {self.path}")
            self.send_response(404)
            self.end_headers()

        def do_GET(self) -> None:
            found = self.path in answers
            body = json.dumps(answers.get(self.path, {})).encode()
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def replicas() -> Iterator[dict[str, str]]:
    """Two live replicas and one dead (nothing listens on its port)."""
    yield {
        "live-a": serve({"/health": {}}),
        "live-b": serve({"/health": {}}),
        "dead": f"http://127.0.0.1:{free_port()}",
    }


def gate(
    canary: str,
    reference: str,
    labels: dict[str, str],
    router: str | None = None,
    asked: list[str] | None = None,
) -> CanaryInputs:
    workers = [
        {"url": url, "id": f"w{i}", "is_healthy": True, "metadata": {"sglang_stacks_config": d}}
        for i, (url, d) in enumerate(labels.items())
    ]
    return CanaryInputs(
        connection={"kind": "local"},
        stack="fleet",
        python="python3",
        canary_url=canary,
        canary_instance="c1",
        reference_url=reference,
        workload=BenchmarkSpec(),
        rollout=RolloutSpec(),
        state_dir="/nowhere",
        router_url=router or serve({"/workers": {"workers": workers}}, asked),
        config_digest="new",
    )


def pick(inputs: CanaryInputs) -> tuple[Reference | None, str]:
    """The gate's choice of reference for ``inputs``."""
    return pick_reference(inputs.router_url, inputs.canary_url, inputs.reference_url, inputs.config_digest)


def leaving(inputs: CanaryInputs, url: str) -> contextlib.AbstractContextManager[None]:
    """The gate's reference at ``url`` (on configuration "old") out of the router for a block."""
    reference = Reference(url, "old", inputs.router_url)
    return out_of_router(
        reference,
        connection=inputs.connection,
        canary_url=inputs.canary_url,
        drain_timeout_s=inputs.drain_timeout_s,
        stack=inputs.stack,
    )


def test_a_dead_reference_hands_the_judging_to_another_replica_of_the_router(
    replicas: dict[str, str],
) -> None:
    inputs = gate(replicas["live-a"], replicas["dead"], {replicas["live-b"]: "old"})

    assert pick(inputs) == (Reference(replicas["live-b"], "old", inputs.router_url), "")


def test_a_reference_on_the_canarys_configuration_leaves_nothing_to_judge(replicas: dict[str, str]) -> None:
    inputs = gate(replicas["live-a"], replicas["live-b"], {replicas["live-b"]: "new"})

    assert pick(inputs) == (
        None,
        "the canary runs the configuration the fleet serves: no change to judge",
    )


def test_no_live_replica_on_the_current_configuration_is_said(replicas: dict[str, str]) -> None:
    inputs = gate(replicas["live-a"], replicas["dead"], {})

    assert pick(inputs) == (
        None,
        "no replica on the current configuration answered: nothing to compare with",
    )


def test_the_reference_stays_in_the_router_when_no_other_replica_would_serve(
    replicas: dict[str, str],
) -> None:
    asked: list[str] = []
    inputs = gate(replicas["live-a"], replicas["live-b"], {replicas["live-b"]: "old"}, asked=asked)

    with (
        pytest.raises(BenchmarkError) as raised,
        leaving(inputs, replicas["live-b"]),
    ):
        pytest.fail("the gate measured with no replica serving")

    assert asked == []  # nothing was taken out of the router
    assert "no other replica is in the router to serve meanwhile, so the canary was not judged" in str(
        raised.value
    )


@pytest.mark.integration
def test_the_reference_leaves_the_router_while_measured_and_comes_back_when_it_fails_or_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the engine's watch runs before it ends a provider whose update was killed.
    on_engine_gone: list[Callable[[], None]] = []
    monkeypatch.setattr(lifetime, "on_engine_gone", on_engine_gone.append)
    router = RouterInputs.model_validate(local_router_props(str(tmp_path / "router.log")))
    started = start_router(router)
    flags = ["--model", "/shared/kimi-k2.5-int4", "--tp", "8"]
    try:
        with (
            start_emulator(flags, state_dir=str(tmp_path / "gpus-a")) as reference,
            start_emulator(flags, state_dir=str(tmp_path / "gpus-b")) as other,
        ):
            for url in (reference.base_url, other.base_url):
                add_worker(
                    WorkerInputs.model_validate(
                        {
                            "connection": {"kind": "local"},
                            "router_url": started.url,
                            "worker_url": url,
                            "server_instance": "i",
                            "config_digest": "old",
                        }
                    )
                )
            inputs = gate(f"http://127.0.0.1:{free_port()}", reference.base_url, {}, router=started.url)

            with (
                pytest.raises(RuntimeError, match="the load generator failed"),
                leaving(inputs, reference.base_url),
            ):
                assert list(router_workers.worker_configs(started.url)) == [other.base_url]
                raise RuntimeError("the load generator failed")

            back = router_workers.worker_configs(started.url)
            assert back == {reference.base_url: "old", other.base_url: "old"}
            assert all(w["is_healthy"] for w in router_workers.workers(started.url))

            with leaving(inputs, reference.base_url):
                assert list(router_workers.worker_configs(started.url)) == [other.base_url]
                for callback in on_engine_gone:
                    callback()  # the update is killed here: its provider never reaches the block's end
                deadline = time.monotonic() + 30
                while reference.base_url not in router_workers.worker_configs(started.url):
                    assert time.monotonic() < deadline, "the engine's watch did not put the reference back"
                    time.sleep(0.2)
                assert router_workers.worker_configs(started.url)[reference.base_url] == "old"
    finally:
        stop_router(router, started.pid, started.start_ticks)


def test_a_gate_recorded_by_the_previous_version_reads_back_as_a_verdict() -> None:
    recorded = {
        **gate("http://a", "http://b", {}, router="http://r").model_dump(mode="json"),
        "canary_tok_s": 80.9,
        "reference_tok_s": 75.8,
        "verdict": "passed",
    }

    outputs = CanaryOutputs.model_validate(CanaryProvider().upgrade(recorded))

    assert outputs.verdict.passed
    assert (outputs.verdict.canary_tok_s, outputs.verdict.reference_tok_s) == (80.9, 75.8)
    assert outputs.verdict.line == "passed (means only, judged by an earlier version)"
