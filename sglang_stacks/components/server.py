"""SGLangServer: the SGLang server process on the GPU host, as a Pulumi resource.

The launch flags are one typed value (`config.flags.LaunchFlags`), recorded as a map (canonical
flag name -> value), so `pulumi preview --diff` shows a change flag by flag; they become an argv
here, once, when the server is launched. A change of flags, environment, Python environment or draft
model replaces the server, stopping the old process before the new one starts: two never share the
GPUs. The process work itself is `hostops.process`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Annotated, Any

import pulumi
from pydantic import Field

from sglang_stacks.components._group import GroupMember, member_runs
from sglang_stacks.components._refresh import HOST_READS
from sglang_stacks.components.host import check_installed_release
from sglang_stacks.config.flags import LaunchFlags
from sglang_stacks.config.memory_advice import MemoryAdvice
from sglang_stacks.errors import StacksError
from sglang_stacks.hostops import claim, logs, process, serving
from sglang_stacks.hostops.cancel import Cancelled
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.gpu_room import check_gpu_room, server_gpus
from sglang_stacks.hostops.server_failure import FailureContext
from sglang_stacks.resources.provider import (
    LABEL,
    REPLACES,
    REPLACES_IF_KNOWN,
    SECRET,
    HostInputs,
    Props,
    TypedProvider,
)
from sglang_stacks.resources.resource import Args, TypedResource, args_for


class ServerInputs(HostInputs):
    """What a server is launched from; a change of any ``REPLACES`` field means a new process."""

    stack: Annotated[str, LABEL]
    """The stack that owns the server (and holds the host's claim while launching it)."""
    python: Annotated[str, REPLACES_IF_KNOWN]
    """The Python of the environment that runs the server."""
    launcher_module: Annotated[str, REPLACES_IF_KNOWN]
    """``sglang.launch_server``, or the emulator's module on the emulator host."""
    runtime: Annotated[str, REPLACES]
    """What the environment runs, ``sglang`` or ``emulator``: the declared half of ``python``."""
    extra_pins: Annotated[list[str], REPLACES] = Field(default_factory=list)
    """Packages pinned beside SGLang: another set means another environment, so another server."""
    flags: Annotated[LaunchFlags, REPLACES]
    """The launch flags, rendered for ``release`` at launch."""
    release: Annotated[str, REPLACES]
    """The SGLang release the flags are rendered for."""
    installed_version: Annotated[str, REPLACES_IF_KNOWN]
    """The release the environment installed; a launch refuses a mismatch."""
    env: Annotated[dict[str, str], REPLACES]
    """Environment variables on the command line (NCCL settings, the emulator's profile)."""
    secret_env: Annotated[dict[str, str] | None, REPLACES, SECRET] = None
    """Variables the server inherits without any command line showing them (a hub token)."""
    port: Annotated[int, REPLACES]
    """The server's HTTP port on the host."""
    draft_digest: Annotated[str, REPLACES] = ""
    """The draft model's tree digest: new content means a new server."""
    nvidia_smi: Annotated[list[str], LABEL]
    """How to run nvidia-smi on the host (the emulator's stand-in on the emulator host)."""
    state_dir: str
    """The host's folder of sglang-stacks state (claim, serving note)."""
    update_id: Annotated[str, LABEL]
    """The running update, for the claim."""
    log_dir: str
    """Folder on the host for the server logs, one file per launch."""
    ready_timeout_s: float = 1800.0
    stop_timeout_s: float = 120.0
    taken_from: Annotated[str, LABEL] = ""
    """The stack whose server the claim stopped to make room for this one, if any."""
    taken_in_update: Annotated[str, LABEL] = ""
    """The update in which the claim did so: only a failure in that update has undone it."""
    ready_line: Annotated[str, LABEL] = ""
    """A node of a multi-node server other than rank 0 serves no HTTP: it counts as started once its
    log shows this line; rank 0's health check then says the whole group joined."""
    group: Annotated[list[GroupMember], LABEL, SECRET] = Field(default_factory=list)
    """The other nodes of a multi-node server: a refresh that finds any of them gone finds this
    node gone too, since SGLang's group only runs whole; the next up relaunches all of them."""
    group_instances: Annotated[list[str], REPLACES] = Field(default_factory=list)
    """Rank 0 only: the launches of the other nodes. A relaunched node means a new group, so a new
    rank 0."""
    memory: Annotated[MemoryAdvice | None, LABEL] = None
    """The memory plan of the stack's SGLang release: an out-of-memory failure's fix names a
    fraction from it other than the one set."""

    def failure_context(self) -> FailureContext:
        """The settings a failure of this server names values against."""
        return FailureContext(
            stack=self.stack,
            port=self.port,
            ready_timeout_s=self.ready_timeout_s,
            env=self.env,
            memory=self.memory,
        )

    def command(self) -> str:
        """The exact command line the server runs: variables, Python, launcher, argv."""
        # The renderer reads the release's flag table: imported only where a command is made.
        from sglang_stacks.config.render import render_command

        return render_command(self.flags, self.release, self.python, self.env, self.launcher_module)


class ServerOutputs(Props):
    """The launched process, as the host knows it."""

    pid: int
    """The server's process id on the host."""
    start_ticks: int
    """The process's start time in clock ticks since boot: with the pid, its identity."""
    instance: str
    """A new value for every launch: what the benchmark keys its results on."""
    log_path: str
    """The server's log file on the host."""
    launch_command: str
    """The exact command line the server was started with."""
    url: str
    """The server's base URL as seen from the host."""


def _launch(inputs: ServerInputs, log_path: str) -> process.Launch:
    return process.Launch(
        command=inputs.command(),
        python=inputs.python,
        port=inputs.port,
        log_path=log_path,
        ready_timeout_s=inputs.ready_timeout_s,
        stop_timeout_s=inputs.stop_timeout_s,
        nvidia_smi=inputs.nvidia_smi,
        secret_env=inputs.secret_env or {},
        ready_line=inputs.ready_line,
        claim_stack=inputs.stack,
        state_dir=inputs.state_dir,
        context=inputs.failure_context(),
    )


def start(inputs: ServerInputs) -> ServerOutputs:
    """Launches the server, waits until it is ready, records it on the host and returns it.

    On failure the process is stopped and ServerError gives the class, the log's last lines and
    the fix.
    """
    conn = inputs.connection
    check_installed_release(conn.label, inputs.release, inputs.installed_version)
    try:
        return _start(inputs)
    except StacksError as error:
        if not inputs.taken_from or inputs.taken_in_update != inputs.update_id:
            raise
        # This update stopped another stack's serving server to launch this one, which failed:
        # the host serves nothing now, and one command brings the other stack back. The error
        # keeps its type and fields (a server's class of failure); only the advice is added.
        error.message = (
            f"{error.message} {conn.label} no longer serves stack {inputs.taken_from!r}: its server "
            f"was stopped when this update took the host over. `pulumi up -s {inputs.taken_from}` "
            "restores it."
        )
        error.args = (error.message,)
        raise


def _start(inputs: ServerInputs) -> ServerOutputs:
    conn = inputs.connection
    # Holding the claim for this update keeps a racing update of another stack from launching too.
    claim.acquire(conn, inputs.stack, takeover=False, update_id=inputs.update_id, state_dir=inputs.state_dir)
    _stop_untracked(conn, inputs)
    flags = inputs.flags
    gpus_per_node = max(1, (flags.tp_size or 1) // (flags.nnodes or 1))
    check_gpu_room(conn, inputs.nvidia_smi, server_gpus(inputs.env, gpus_per_node), inputs.memory)
    instance = uuid.uuid4().hex[:12]
    log_path = logs.server_log_path(inputs.log_dir, inputs.stack, instance)
    launch = _launch(inputs, log_path)
    try:
        running = process.launch(conn, launch)  # noted in the claim by the launch itself
        process.wait_ready(conn, launch, running)
    except Cancelled as error:
        # The engine hears back at once; the server, noted in the claim, is the next update's to stop.
        error.message = (
            f"{error.message} SGLang, which this step launched, was still starting: the next "
            f"`pulumi up -s {inputs.stack}` stops it before its own launch, and "
            f"`sglang-stacks recover {inputs.stack}` stops it now."
        )
        error.args = (error.message,)
        raise
    serving.record(
        conn,
        inputs.state_dir,
        serving.ServingNote(
            stack=inputs.stack,
            pid=running.pid,
            release=inputs.release,
            flags=inputs.flags,
            launch_command=launch.command,
        ),
    )
    return ServerOutputs(
        pid=running.pid,
        start_ticks=running.start_ticks,
        instance=instance,
        log_path=log_path,
        launch_command=launch.command,
        url=f"http://127.0.0.1:{inputs.port}",
    )


def _stop_untracked(conn: Connection, inputs: ServerInputs) -> None:
    """Stops a server of this stack that no update tracks: one whose update was killed after the
    launch. By the time a server is created the stack's previous one is stopped, so a live process
    recorded in the claim only holds the GPUs and the port (and would answer the health check)."""
    current = claim.read(conn, state_dir=inputs.state_dir)
    if current is not None and current.stack == inputs.stack:
        process.stop_recorded(conn, current, inputs.nvidia_smi, inputs.stop_timeout_s, inputs.state_dir)


def upgrade_flags(props: Mapping[str, Any]) -> dict[str, Any]:
    """Server state of versions that recorded the flags as rendered options (``--flag`` -> the
    argv words), in today's shape: the same flags by canonical name, typed."""
    flags = props.get("flags")
    if not isinstance(flags, Mapping) or not any(str(key).startswith("-") for key in flags):
        return dict(props)
    from sglang_stacks.config.recorded import values_from_options  # old state only

    return {**props, "flags": values_from_options(flags, str(props["release"]))}


class ServerProvider(TypedProvider[ServerInputs, ServerOutputs]):
    """Launches, supervises, notices and stops the server process."""

    gathers_with = HOST_READS

    inputs = ServerInputs
    outputs = ServerOutputs

    def resource_id(self, inputs: ServerInputs, outputs: ServerOutputs) -> str:
        return outputs.instance

    def upgrade(self, props: Mapping[str, Any]) -> dict[str, Any]:
        upgraded = upgrade_flags(props)
        if "runtime" not in upgraded and isinstance(upgraded.get("launcher_module"), str):
            # Recorded since the package layout; before it, the launcher said which runtime ran.
            emulated = upgraded["launcher_module"].startswith("sglang_emulator")
            upgraded["runtime"] = "emulator" if emulated else "sglang"
        return upgraded

    def create_typed(self, inputs: ServerInputs) -> ServerOutputs:
        return start(inputs)

    def read_typed(self, inputs: ServerInputs, outputs: ServerOutputs) -> ServerOutputs | None:
        conn = inputs.connection
        if not process.is_running(conn, process.Running(outputs.pid, outputs.start_ticks)):
            # Gone from the host: refresh drops it from the state and the next up relaunches it;
            # the host stops saying it serves it.
            serving.forget(conn, inputs.state_dir, outputs.pid)
            return None
        if not all(member_runs(member, inputs.stack) for member in inputs.group):
            # A node of its group is gone: the group is down (SGLang's is, once NCCL notices), and
            # only a relaunch of every node forms it again. The next create stops what is left.
            return None
        return outputs

    def delete_typed(self, inputs: ServerInputs, outputs: ServerOutputs) -> None:
        conn = inputs.connection
        # The claim before the stop: while this update holds the host, a racing update of another
        # stack cannot take it over, so a replace never stops its own serving server only to lose
        # the host before its launch. A host another stack claimed has stopped this server already.
        current = claim.read(conn, state_dir=inputs.state_dir)
        if current is not None and current.stack == inputs.stack:
            claim.acquire(
                conn, inputs.stack, takeover=False, update_id=inputs.update_id, state_dir=inputs.state_dir
            )
        serving.forget(conn, inputs.state_dir, outputs.pid)
        process.stop(conn, outputs.pid, outputs.start_ticks, inputs.nvidia_smi, inputs.stop_timeout_s)


ServerArgs = args_for(ServerInputs)
"""`SGLangServer`'s arguments: the fields of `ServerInputs`, each a value or an Output of one."""


class SGLangServer(TypedResource[ServerInputs, ServerOutputs], module="sglang", name="Server"):
    """An SGLang server process on the GPU host, ready to serve when created; its outputs are
    `ServerOutputs` (``server.output(lambda o: o.url)``)."""

    def __init__(
        self, name: str, args: Args[ServerInputs], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(ServerProvider(), name, args, opts)
