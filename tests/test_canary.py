"""Which replica the canary gate judges against: the declared reference, another replica of the
router when that one is dead, none when the reference serves the canary's own configuration.

The router's ``GET /workers`` and the replicas' ``/health`` are served by small stdlib HTTP servers
on 127.0.0.1 answering exactly what sglang-router 0.3.2 and SGLang answer (the label sits in each
worker's ``metadata``); the fleet's integration tests run the real router.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sglang_stacks.components.canary import CanaryInputs, pick_reference
from sglang_stacks.config.benchmark_spec import BenchmarkSpec
from sglang_stacks.config.fleet import RolloutSpec
from tests._pulumi import free_port


def serve(answers: dict[str, Any]) -> str:
    """An HTTP server in a thread answering each path in ``answers`` with its JSON; its URL."""

    class Handler(BaseHTTPRequestHandler):
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


def gate(canary: str, reference: str, labels: dict[str, str]) -> CanaryInputs:
    workers = [
        {"url": url, "is_healthy": True, "metadata": {"sglang_stacks_config": d}} for url, d in labels.items()
    ]
    router = serve({"/workers": {"workers": workers}})
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
        router_url=router,
        config_digest="new",
    )


def test_a_dead_reference_hands_the_judging_to_another_replica_of_the_router(
    replicas: dict[str, str],
) -> None:
    inputs = gate(replicas["live-a"], replicas["dead"], {replicas["live-b"]: "old"})

    assert pick_reference(inputs) == (replicas["live-b"], "")


def test_a_reference_on_the_canarys_configuration_leaves_nothing_to_judge(replicas: dict[str, str]) -> None:
    inputs = gate(replicas["live-a"], replicas["live-b"], {replicas["live-b"]: "new"})

    assert pick_reference(inputs) == (
        None,
        "the canary runs the configuration the fleet serves: no change to judge",
    )


def test_no_live_replica_on_the_current_configuration_is_said(replicas: dict[str, str]) -> None:
    inputs = gate(replicas["live-a"], replicas["dead"], {})

    assert pick_reference(inputs) == (
        None,
        "no replica on the current configuration answered: nothing to compare with",
    )
