"""SGLang's router in front of a fleet, and each replica's place in it, as Pulumi resources; what
they do on the router's machine is ``hostops``' (the program ``router.sh`` through its contract,
the worker API in `hostops.router_workers`).

`SGLangRouter` is the router process (``python -m sglang_router.launch_router``, the
``sglang-router`` package). `RouterWorker` is one replica registered with it through the router's
worker API: created once the replica is ready (``POST /workers``, then listed healthy), deleted
by draining (``DELETE /workers/{id}``, then the replica's own ``/get_load`` down to no request).
A replaced server replaces its `RouterWorker` first, so a replica leaves the router before it
stops and comes back only once its successor is ready.
"""

from __future__ import annotations

from typing import Annotated, Literal

import pulumi

from sglang_stacks.components._refresh import FLEET_READS
from sglang_stacks.hostops import claim, router_workers
from sglang_stacks.hostops.programs import router_contract
from sglang_stacks.hostops.programs.runner import call
from sglang_stacks.resources.provider import LABEL, REPLACES, HostInputs, Props, TypedProvider
from sglang_stacks.resources.resource import Args, TypedResource, args_for


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
    pd_disaggregation: Annotated[bool, REPLACES] = False
    """PD mode: the router pairs a prefill worker with a decode worker for every request."""
    start_timeout_s: Annotated[float, LABEL] = 60.0
    stack: Annotated[str | None, LABEL] = None
    """The fleet's stack, which the fleet's benchmark claims ``state_dir`` for; the router's delete
    lets the claim go (none in states written before: nothing to let go)."""
    state_dir: Annotated[str | None, LABEL] = None
    """The router's folder (``fleet.router.state_dir``), where the fleet's benchmark claims the
    machine for its stack."""


class RouterOutputs(Props):
    """The running router."""

    pid: int
    start_ticks: int
    url: str
    """The router's base URL: where clients send requests."""


def start_router(inputs: RouterInputs) -> RouterOutputs:
    """Starts the router with no workers and waits for its liveness; RouterError says why not."""
    started = call(
        inputs.connection,
        router_contract.Start(
            python=inputs.python,
            release=inputs.release,
            host=inputs.host,
            port=inputs.port,
            metrics_port=inputs.metrics_port,
            policy=inputs.policy,
            health_interval_s=inputs.health_check_interval_s,
            log=inputs.log_path,
            timeout_s=int(inputs.start_timeout_s),
            pd_disaggregation=inputs.pd_disaggregation,
        ),
    )
    url = f"http://{inputs.host}:{inputs.port}"
    return RouterOutputs(pid=started.pid, start_ticks=started.start_ticks, url=url)


def leftover_router(inputs: RouterInputs) -> tuple[int, int] | None:
    """The router the last start with this log launched, while it still runs: its pid and start
    ticks. A start interrupted before it answered leaves one that no state knows."""
    left = call(inputs.connection, router_contract.Leftover(log=inputs.log_path))
    return None if left is None else (left.pid, left.start_ticks)


def stop_router(inputs: RouterInputs, pid: int, start_ticks: int) -> None:
    """Stops the router process ``pid`` (if it is still the one started at ``start_ticks``)."""
    call(inputs.connection, router_contract.StopRouter(pid=pid, start_ticks=start_ticks, timeout_s=20))


class RouterProvider(TypedProvider[RouterInputs, RouterOutputs]):
    """Starts, notices and stops the router process."""

    gathers_with = FLEET_READS

    inputs = RouterInputs
    outputs = RouterOutputs

    def resource_id(self, inputs: RouterInputs, outputs: RouterOutputs) -> str:
        return f"router-{outputs.pid}"

    def create_typed(self, inputs: RouterInputs) -> RouterOutputs:
        return start_router(inputs)

    def read_typed(self, inputs: RouterInputs, outputs: RouterOutputs) -> RouterOutputs | None:
        alive = router_contract.RouterAlive(pid=outputs.pid, start_ticks=outputs.start_ticks)
        return outputs if call(inputs.connection, alive) else None

    def delete_typed(self, inputs: RouterInputs, outputs: RouterOutputs) -> None:
        stop_router(inputs, outputs.pid, outputs.start_ticks)
        if inputs.stack is not None and inputs.state_dir is not None:
            # The fleet is gone: its router folder is free for another stack (a campaign's next
            # trial fleet, a renamed stack). A claim another stack holds is left as it is.
            claim.release(inputs.connection, inputs.stack, state_dir=inputs.state_dir)


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
    worker_type: Annotated[Literal["regular", "prefill", "decode"], REPLACES] = "regular"
    """What the router sends it: ``regular`` (whole requests), or in PD mode ``prefill`` or
    ``decode``."""
    bootstrap_port: Annotated[int | None, REPLACES] = None
    """A prefill worker's bootstrap port, which the router passes on to the decode worker."""
    """The configuration the replica serves, as a label in the router: the canary gate reads it."""
    ready_timeout_s: Annotated[float, LABEL] = 60.0
    drain_timeout_s: Annotated[float, LABEL] = 120.0


class WorkerOutputs(Props):
    """The registration as the router knows it."""

    worker_id: str


def add_worker(inputs: WorkerInputs) -> WorkerOutputs:
    """Registers the replica and waits until the router lists it healthy."""
    worker_id = router_workers.add(
        inputs.router_url,
        router_workers.Registration(
            url=inputs.worker_url,
            config_digest=inputs.config_digest,
            worker_type=inputs.worker_type,
            bootstrap_port=inputs.bootstrap_port,
        ),
        inputs.ready_timeout_s,
    )
    return WorkerOutputs(worker_id=worker_id)


def drain_worker(inputs: WorkerInputs, worker_id: str) -> None:
    """Takes the replica out of the router, then waits until it has answered every request it had."""
    router_workers.drain(inputs.router_url, inputs.worker_url, inputs.drain_timeout_s)


class RouterWorkerProvider(TypedProvider[WorkerInputs, WorkerOutputs]):
    """Adds a replica to the router, notices it gone, drains it."""

    gathers_with = FLEET_READS

    inputs = WorkerInputs
    outputs = WorkerOutputs

    def resource_id(self, inputs: WorkerInputs, outputs: WorkerOutputs) -> str:
        return outputs.worker_id

    def create_typed(self, inputs: WorkerInputs) -> WorkerOutputs:
        return add_worker(inputs)

    def read_typed(self, inputs: WorkerInputs, outputs: WorkerOutputs) -> WorkerOutputs | None:
        import httpx

        try:
            found = router_workers.listed(inputs.router_url, inputs.worker_url)
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
