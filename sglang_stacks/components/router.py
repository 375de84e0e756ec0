"""SGLang's router in front of a fleet, and each replica's place in it, as Pulumi resources.

`SGLangRouter` is the router process (``python -m sglang_router.launch_router``, the
``sglang-router`` package). `RouterWorker` is one replica registered with it through the router's
worker API: created once the replica is ready (``POST /workers``, then listed healthy), deleted
by draining (``DELETE /workers/{id}``, then the replica's own ``/get_load`` down to no request).
A replaced server replaces its `RouterWorker` first, so a replica leaves the router before it
stops and comes back only once its successor is ready.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import pulumi

from sglang_stacks.components import _router_api
from sglang_stacks.components._provider import LABEL, REPLACES, HostInputs, Props, TypedProvider
from sglang_stacks.components._resource import Args, TypedResource, args_for
from sglang_stacks.errors import RouterError
from sglang_stacks.hostops.programs.runner import Param, run_bash
from sglang_stacks.hostops.transport import HostPath


class RouterInputs(HostInputs):
    """How the router is started; every field but the timeouts means another router process."""

    python: Annotated[str, REPLACES]
    """The Python that has sglang-router installed."""
    release: Annotated[str, REPLACES]
    """The sglang-router release it must be."""
    host: Annotated[str, REPLACES]
    port: Annotated[int, REPLACES]
    metrics_port: Annotated[int, REPLACES]
    policy: Annotated[str, REPLACES]
    health_check_interval_s: Annotated[int, REPLACES]
    log_path: Annotated[str, REPLACES]
    start_timeout_s: Annotated[float, LABEL] = 60.0


class RouterOutputs(Props):
    """The running router."""

    pid: int
    start_ticks: int
    url: str
    """The router's base URL: where clients send requests."""


def _run(inputs: RouterInputs, mode: str, limit_s: float, **params: Param) -> str:
    result = run_bash(inputs.connection, "router.sh", {"mode": mode, **params}, timeout_s=limit_s)
    if mode != "alive" and not result.ok:
        raise RouterError(
            f"The router program on {inputs.connection.label} failed ({mode}): "
            f"{result.stderr.strip() or result.stdout.strip()}."
        )
    return result.stdout if mode != "alive" else ("yes" if result.ok else "")


def start_router(inputs: RouterInputs) -> RouterOutputs:
    """Starts the router with no workers and waits for its liveness; RouterError says why not."""
    printed = _run(
        inputs,
        "start",
        inputs.start_timeout_s + 30,
        python=inputs.python,
        release=inputs.release,
        host=inputs.host,
        port=inputs.port,
        metrics_port=inputs.metrics_port,
        policy=inputs.policy,
        health_interval_s=inputs.health_check_interval_s,
        log=HostPath(inputs.log_path),
        timeout_s=int(inputs.start_timeout_s),
    )
    words = printed.split()
    if words[:1] == ["ready"]:
        return RouterOutputs(
            pid=int(words[1]), start_ticks=int(words[2]), url=f"http://{inputs.host}:{inputs.port}"
        )
    if words[:1] == ["wrong-release"]:
        raise RouterError(
            f"fleet.router.release is {inputs.release}, but {inputs.python} has sglang-router "
            f"{words[1]}. Install it (`pip install sglang-router=={inputs.release}`, or the project's "
            "`fleet` extra) or set fleet.router.release to the installed release."
        )
    if words[:1] == ["port-taken"]:
        raise RouterError(
            f"Port {inputs.port} on {inputs.host} already answers, so the router was not started. Stop "
            "the program there or set fleet.router.port to a free port."
        )
    raise RouterError(
        f"SGLang's router did not become live on {inputs.host}:{inputs.port} ({printed.strip()}). "
        "Fix what its log names and run `pulumi up` again."
    )


def leftover_router(inputs: RouterInputs) -> tuple[int, int] | None:
    """The router the last start with this log launched, while it still runs: its pid and start
    ticks. A start interrupted before it answered leaves one that no state knows."""
    words = _run(inputs, "leftover", 30, log=HostPath(inputs.log_path)).split()
    return (int(words[1]), int(words[2])) if words[:1] == ["running"] else None


def stop_router(inputs: RouterInputs, pid: int, start_ticks: int) -> None:
    """Stops the router process ``pid`` (if it is still the one started at ``start_ticks``)."""
    _run(inputs, "stop", 60, pid=pid, start_ticks=start_ticks, timeout_s=20)


class RouterProvider(TypedProvider[RouterInputs, RouterOutputs]):
    """Starts, notices and stops the router process."""

    inputs = RouterInputs
    outputs = RouterOutputs

    def resource_id(self, inputs: RouterInputs, outputs: RouterOutputs) -> str:
        return f"router-{outputs.pid}"

    def create_typed(self, inputs: RouterInputs) -> RouterOutputs:
        return start_router(inputs)

    def read_typed(self, inputs: RouterInputs, outputs: RouterOutputs) -> RouterOutputs | None:
        alive = _run(inputs, "alive", 30, pid=outputs.pid, start_ticks=outputs.start_ticks)
        return outputs if alive else None

    def delete_typed(self, inputs: RouterInputs, outputs: RouterOutputs) -> None:
        stop_router(inputs, outputs.pid, outputs.start_ticks)


RouterArgs = args_for(RouterInputs)
"""`SGLangRouter`'s arguments: the fields of `RouterInputs`, each a value or an Output of one."""


class SGLangRouter(TypedResource[RouterInputs, RouterOutputs], module="sglang", name="Router"):
    """SGLang's router process (sglang-router), live when created, with no workers yet; its outputs
    are `RouterOutputs`."""

    def __init__(
        self, name: str, args: Args[RouterInputs], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(RouterProvider(), name, args, opts)


# -- one replica in the router ------------------------------------------------------------------


class WorkerInputs(HostInputs):
    """A replica's registration; a new server instance means a new registration."""

    router_url: Annotated[str, REPLACES]
    worker_url: Annotated[str, REPLACES]
    """The replica's URL as the router reaches it."""
    server_instance: Annotated[str, REPLACES]
    """The server launch registered: a relaunched replica is drained and added anew."""
    config_digest: Annotated[str, LABEL] = ""
    """The configuration the replica serves, as a label in the router: the canary gate reads it."""
    ready_timeout_s: Annotated[float, LABEL] = 60.0
    drain_timeout_s: Annotated[float, LABEL] = 120.0


class WorkerOutputs(Props):
    """The registration as the router knows it."""

    worker_id: str


def _registration(inputs: WorkerInputs) -> dict[str, Any]:
    labels = {_router_api.CONFIG_LABEL: inputs.config_digest} if inputs.config_digest else {}
    return {"url": inputs.worker_url, "labels": labels}


def add_worker(inputs: WorkerInputs) -> WorkerOutputs:
    """Registers the replica and waits until the router lists it healthy."""
    import httpx  # in the functions that talk to the router: the program never needs it

    try:
        answer = httpx.post(f"{inputs.router_url}/workers", json=_registration(inputs), timeout=30)
        if answer.status_code >= 400:
            raise RouterError(
                f"The router at {inputs.router_url} refused worker {inputs.worker_url} "
                f"(HTTP {answer.status_code}: {answer.text.strip()[:300]})."
            )
        deadline = time.monotonic() + inputs.ready_timeout_s
        while time.monotonic() < deadline:
            found = _router_api.listed(inputs.router_url, inputs.worker_url)
            if found is not None and found.get("is_healthy"):
                return WorkerOutputs(worker_id=str(found["id"]))
            time.sleep(_router_api.POLL_S)
    except httpx.HTTPError as error:
        raise RouterError(
            f"The router at {inputs.router_url} did not answer ({error}); `pulumi refresh` notices a "
            "router that died, and the next `pulumi up` starts it again."
        ) from None
    raise RouterError(
        f"The router did not list {inputs.worker_url} healthy within {inputs.ready_timeout_s:g} s. Check "
        "that the router's machine reaches the replica's address and port."
    )


def drain_worker(inputs: WorkerInputs, worker_id: str) -> None:
    """Takes the replica out of the router, then waits until it has answered every request it had.

    The router stops sending new requests once the worker is unlisted; requests already routed
    finish on the replica, which ``/get_load`` counts (SGLang's per-rank ``num_reqs``).
    """
    import httpx  # in the functions that talk to the router: the program never needs it

    try:
        found = _router_api.listed(inputs.router_url, inputs.worker_url)
        if found is not None:
            httpx.delete(f"{inputs.router_url}/workers/{found['id']}", timeout=30).raise_for_status()
        deadline = time.monotonic() + inputs.drain_timeout_s
        while _router_api.listed(inputs.router_url, inputs.worker_url) is not None:
            if time.monotonic() > deadline:
                raise RouterError(
                    f"The router still lists {inputs.worker_url} {inputs.drain_timeout_s:g} s after its "
                    "removal; check the router's log."
                )
            time.sleep(_router_api.POLL_S)
    except httpx.HTTPError:
        pass  # a router that is gone sends the replica nothing more
    _router_api.wait_idle(inputs.worker_url, time.monotonic() + inputs.drain_timeout_s)


class RouterWorkerProvider(TypedProvider[WorkerInputs, WorkerOutputs]):
    """Adds a replica to the router, notices it gone, drains it."""

    inputs = WorkerInputs
    outputs = WorkerOutputs

    def resource_id(self, inputs: WorkerInputs, outputs: WorkerOutputs) -> str:
        return outputs.worker_id

    def create_typed(self, inputs: WorkerInputs) -> WorkerOutputs:
        return add_worker(inputs)

    def read_typed(self, inputs: WorkerInputs, outputs: WorkerOutputs) -> WorkerOutputs | None:
        import httpx

        try:
            found = _router_api.listed(inputs.router_url, inputs.worker_url)
        except httpx.HTTPError:
            return None  # the router is gone, and with it the registration
        return WorkerOutputs(worker_id=str(found["id"])) if found else None

    def delete_typed(self, inputs: WorkerInputs, outputs: WorkerOutputs) -> None:
        drain_worker(inputs, outputs.worker_id)


WorkerArgs = args_for(WorkerInputs)
"""`RouterWorker`'s arguments: the fields of `WorkerInputs`, each a value or an Output of one."""


class RouterWorker(TypedResource[WorkerInputs, WorkerOutputs], module="sglang", name="RouterWorker"):
    """One replica registered with SGLang's router; deleting it drains the replica. Its output is
    `WorkerOutputs`."""

    def __init__(
        self, name: str, args: Args[WorkerInputs], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(RouterWorkerProvider(), name, args, opts)
