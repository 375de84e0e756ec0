"""A generation request on a worker of a disaggregated fleet, as SGLang's PD schedulers take it: a
request the router did not pair is refused; a prefill worker computes the prompt and its first token,
then hands the KV to the bootstrap room; a decode worker pulls the room's KV (the transfer's time
taken), then decodes from it without computing the prompt again."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from sglang_emulator.context import ServerContext
from sglang_emulator.disaggregation import (
    BootstrapServer,
    PrefilledKv,
    TransferFailed,
    bootstrap_fields,
    pull_kv,
    transfer_s,
)
from sglang_emulator.http_common import BadRequest, InternalError
from sglang_emulator.launch import LaunchConfig
from sglang_emulator.requests import Request

__all__ = [
    "BOOTSTRAP_TIMEOUT_S",
    "WAITING_TIMEOUT_S",
    "await_handoff",
    "pair_request",
    "role_problem",
    "start_bootstrap",
]

_COUNTING = threading.Lock()

BOOTSTRAP_TIMEOUT_S = 300.0
"""SGLang's ``SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT`` default: how long a prefill worker waits for
the decode worker of a request it prefilled."""

WAITING_TIMEOUT_S = 300.0
"""SGLang's ``SGLANG_DISAGGREGATION_WAITING_TIMEOUT`` default: how long a decode worker waits for a
request's KV once bootstrapped."""


def pair_request(context: ServerContext, request: Request, body: dict[str, Any], mode: str) -> None:
    """Makes ``request`` this worker's half of a paired request; BadRequest for an unpaired one,
    InternalError (SGLang's abort with status 500) when a decode worker cannot get the KV."""
    try:
        paired = bootstrap_fields(body, mode)
    except ValueError as error:
        raise BadRequest(str(error)) from None
    if paired is None:
        message = (
            "Invalid request: Disaggregated request received without boostrap room id. "
            f"req.rid='{request.rid}'"
        )
        context.log.error(message)
        raise BadRequest(message)
    host, port, room = paired
    if mode == "prefill":
        # A prefill worker answers with the first token; the decode worker makes the rest.
        request.max_new_tokens = min(request.max_new_tokens, 1)
        request.handoff_room = room
        request.on_finished = lambda done: context.handoff.publish(
            PrefilledKv(
                room=room,
                prompt_tokens=len(done.prompt_ids),
                first_token_id=done.output_ids[0] if done.output_ids else 0,
                kv_bytes=context.kv_bytes(len(done.prompt_ids)),
            )
        )
        return
    waiting_s = float(os.environ.get("SGLANG_DISAGGREGATION_WAITING_TIMEOUT") or WAITING_TIMEOUT_S)
    stats = context.engine.stats
    with _COUNTING:
        stats.transferring += 1
    try:
        kv = pull_kv(host, port, room, waiting_s, context.config.page_size)
        network = context.profile.host.network
        time.sleep(transfer_s(kv.kv_bytes, network.bandwidth_gbit_s, network.latency_us))
    except TransferFailed as failed:
        message = (
            f"Decode {failed.stage} failed for request rank=0 decode_req.req.rid='{request.rid}' "
            f"decode_req.req.bootstrap_room={room} with exception "
            f"KVTransferError(bootstrap_room={room}): {failed.reason}"
        )
        context.log.error(message)
        raise InternalError(message) from None
    finally:
        with _COUNTING:
            stats.transferring -= 1
    request.prefilled = True
    request.runnable_s = time.monotonic()


def await_handoff(context: ServerContext, request: Request) -> None:
    """On a prefill worker, returns once a decode worker took the request's KV, as SGLang answers a
    prefilled request only after its transfer; InternalError after SGLang's bootstrap timeout."""
    room = request.handoff_room
    if room is None:
        return
    timeout_s = float(os.environ.get("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT") or BOOTSTRAP_TIMEOUT_S)
    if context.handoff.wait_taken(room, timeout_s):
        return
    message = (
        f"Prefill bootstrap failed for request rank=0 req.rid='{request.rid}' req.bootstrap_room={room} "
        f"with exception KVTransferError(bootstrap_room={room}): Request {room} timed out after "
        f"{timeout_s:.1f}s in KVPoll.Bootstrapping"
    )
    context.log.error(message)
    raise InternalError(message)


def start_bootstrap(context: ServerContext) -> str | None:
    """A prefill worker's bootstrap server on its bootstrap port, serving in the background; the
    bind's error line when the port cannot be bound (nothing for other workers)."""
    config = context.config
    if config.disaggregation_mode != "prefill":
        return None
    # What 0.5.8's bootstrap server answers a decode worker's handshake (its CommonKVBootstrapServer).
    layout = {
        "prefill_attn_tp_size": config.tp_size,
        "prefill_dp_size": 1,
        "prefill_pp_size": 1,
        "prefill_page_size": config.page_size,
    }
    try:
        BootstrapServer((config.host, config.bootstrap_port), layout, context.handoff).serve_in_background()
    except OSError as exc:
        return (
            f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
            f"('{config.host}', {config.bootstrap_port}): {(exc.strerror or str(exc)).lower()} "
            "(the prefill worker's bootstrap server, --disaggregation-bootstrap-port)"
        )
    print(
        f"sglang-emulator: KV bootstrap server listening on {config.host}:{config.bootstrap_port}",
        file=sys.stderr,
        flush=True,
    )
    return None


def role_problem(config: LaunchConfig) -> str | None:
    """What SGLang's ServerArgs refuses about a worker's role flags (its assertion's words), or None."""
    decode_tp = config.server_args.get("disaggregation_decode_tp")
    if config.disaggregation_mode == "decode" and decode_tp is not None:
        return "AssertionError: Cannot set --disaggregation-decode-tp for the decode engine."
    if config.disaggregation_mode == "prefill" and decode_tp is not None:
        tp = config.tp_size
        if decode_tp % tp and tp % decode_tp:
            return (
                "AssertionError: Different tp size is supported only when one tp is multiple of the other. "
                f"decode_tp={decode_tp}, prefill_tp={tp}"
            )
    return None
