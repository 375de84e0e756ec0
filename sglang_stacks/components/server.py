"""The SGLang server on the GPU host: launched under supervision, ready when its health check
passes, classified when it fails, stopped only once its GPU memory is free, noticed when it dies.

The launch flags are an input map (`--flag` -> value), so `pulumi preview --diff` shows a change
flag by flag. Any change of flags, environment, Python environment or draft model replaces the
server, stopping the old process before the new one starts: two never share the GPUs.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pulumi
import pulumi.dynamic as dynamic

from sglang_stacks.components._resource import connect, connection_diff, keep_connection_secret, plain_errors
from sglang_stacks.errors import ServerError
from sglang_stacks.hostops import claim, serving
from sglang_stacks.hostops import transport as transport
from sglang_stacks.hostops.transport import Connection, quote, quote_path

FailureClass = Literal["out_of_memory", "bad_flag", "nccl", "other"]

# Inputs whose change means a different server: it is replaced, the old one stopped first.
REPLACING_INPUTS = (
    "flags",
    "env",
    "secret_env",
    "python",
    "launcher_module",
    "installed_version",
    "port",
    "draft_digest",
)
_LOG_TAIL_LINES = 25
# SGLang's first log line lists every server argument; error messages keep the start of such lines.
_LOG_LINE_CHARS = 400
# Seconds that the host-side scripts may take beyond their own waits.
_SLACK_S = 30.0


@dataclass(frozen=True)
class Failure:
    """Why a server did not become ready, in the terms a user acts on."""

    kind: FailureClass
    fix: str


# Checked in order. SGLang wraps every error during CUDA-graph capture in "Capture cuda graph
# failed", so the specific causes come before the out-of-memory pattern that phrase belongs to.
_FAILURES: tuple[tuple[re.Pattern[str], Failure], ...] = (
    (
        re.compile(r"error: (unrecognized arguments|ambiguous option|argument [^:]+: invalid)"),
        Failure(
            "bad_flag",
            "The SGLang release on the host rejects a launch flag. Run "
            "`python -m sglang_stacks.cli render <stack> --release <host release>` to see the argv, and "
            "set environment.sglang_release to the release the host really has.",
        ),
    ),
    (
        re.compile(r"NCCL (error|WARN)|ncclInternalError|ncclSystemError|NCCL_ALGO"),
        Failure(
            "nccl",
            "Check the NCCL settings in environment.env (NCCL_ALGO=Tree cannot run with CUDA graphs) "
            "and keep server.disable_custom_all_reduce on PCIe hosts.",
        ),
    ),
    (
        # Kernels that do not support the GPU: SGLang reports them inside the CUDA-graph capture
        # error, so they are looked for before out-of-memory.
        re.compile(r"FlashInfer JIT failed|torch symmetric memory|not supported on (this GPU|SM)"),
        Failure(
            "other",
            "A kernel this flag selects does not support the host's GPU architecture. Remove the flag "
            "(preflight knows the SM120 cases: `python -m sglang_stacks.cli render <stack>`).",
        ),
    ),
    (
        re.compile(r"Not enough memory|CUDA out of memory|OutOfMemoryError|Capture cuda graph failed"),
        Failure(
            "out_of_memory",
            "Raise server.mem_fraction_static to at least the smallest fraction the memory plan of "
            "`python -m sglang_stacks.cli render <stack>` gives, or lower server.cuda_graph_max_bs.",
        ),
    ),
    (
        # nohup's and env's words when the program to run is missing.
        re.compile(r"failed to run command|^env: .*No such file or directory", re.MULTILINE),
        Failure(
            "other",
            "The server's Python is not on the host any more. Run `pulumi refresh` so that the Python "
            "environment is seen gone, then `pulumi up` installs it again.",
        ),
    ),
    (
        re.compile(r"[Aa]ddress already in use"),
        Failure(
            "other",
            "Another process holds the server's port on the host. Stop it, "
            "or set server.port to a free port.",
        ),
    ),
)


def classify_failure(log_text: str) -> Failure:
    """The class and the fix of a failed start, from the server's log."""
    for pattern, failure in _FAILURES:
        if pattern.search(log_text):
            return failure
    return Failure("other", "Read the log lines above; fix the cause and run `pulumi up` again.")


def launch_argv(flags: Mapping[str, Any]) -> list[str]:
    """The argv after the launcher module, from the flag map: `True` is a bare switch, a list is
    several values, anything else one value. The map comes from `flags.render_argv` via
    `flag_map`, so the release's spelling is kept as is."""
    argv: list[str] = []
    for option, value in flags.items():
        argv.append(option)
        if value is True:
            continue
        argv.extend(str(v) for v in value) if isinstance(value, list) else argv.append(str(value))
    return argv


def flag_map(argv: Sequence[str]) -> dict[str, Any]:
    """The rendered argv as an ordered map `--flag` -> value, `True` for a switch, a list for
    several values; the inverse of `launch_argv`."""
    result: dict[str, Any] = {}
    option: str | None = None
    for token in argv:
        if token.startswith("--"):
            option = token
            result[option] = True
        elif option is not None:
            current = result[option]
            result[option] = token if current is True else [*_as_list(current), token]
    return result


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# Fields of /proc/PID/stat after the command name, which may itself hold spaces: 1 is the
# state, 20 the start time in clock ticks since boot.
_STAT = "sed 's/^.*) //' /proc/{pid}/stat 2>/dev/null | cut -d' ' -f{field}"


def _alive_check(pid: int, start_ticks: int | None) -> str:
    """A test that the server still runs. A pid is ours only while its start time matches (pids
    are reused); without a start time, only while it is still an SGLang process."""
    state = _STAT.format(pid=pid, field=1)
    running = f'[ -n "$({state})" ] && [ "$({state})" != "Z" ]'
    if start_ticks is None:
        return f"{running} && tr '\\0' ' ' </proc/{pid}/cmdline | grep -q -- '-m sglang'"
    return f'{running} && [ "$({_STAT.format(pid=pid, field=20)})" = "{start_ticks}" ]'


def _command(props: Mapping[str, Any]) -> str:
    env = " ".join(f"{name}={quote(str(value))}" for name, value in sorted(props["env"].items()))
    argv = " ".join(quote(token) for token in launch_argv(props["flags"]))
    prefix = f"env {env} " if env else ""
    return f"{prefix}{quote(props['python'])} -m {props['launcher_module']} {argv}"


def _launch_script(props: Mapping[str, Any], log_path: str) -> str:
    # setsid makes the server a session leader, so stopping its process group stops its workers;
    # the redirections release the SSH session at once. Secret variables (a hub token) are
    # exported inside the script, which travels on stdin: never on a command line.
    secrets = "".join(
        f"export {name}={quote(str(value))}\n"
        for name, value in sorted((props.get("secret_env") or {}).items())
    )
    # A program already listening on the port would answer the health check in the server's stead.
    listening = (
        "import socket, sys\n"
        "with socket.socket() as probe:\n"
        "    probe.settimeout(5)\n"
        f"    sys.exit(0 if probe.connect_ex(('127.0.0.1', {int(props['port'])})) == 0 else 1)\n"
    )
    return (
        "set -eu\n"
        f"if {quote(props['python'])} -c {quote(listening)}; then echo port-taken; exit 0; fi\n"
        f"{secrets}"
        f"log={quote_path(log_path)}\n"
        'mkdir -p "$(dirname "$log")"\n'
        f'setsid nohup {_command(props)} >"$log" 2>&1 </dev/null &\n'
        "pid=$!\n"
        f'echo "$pid $({_STAT.format(pid="$pid", field=20)})"\n'
    )


def _ready_script(props: Mapping[str, Any], pid: int, start_ticks: int, log_path: str) -> str:
    url = f"http://127.0.0.1:{int(props['port'])}/health_generate"
    probe = (
        "import sys, urllib.request\n"
        "try:\n"
        f"    sys.exit(0 if urllib.request.urlopen({url!r}, timeout=10).status == 200 else 1)\n"
        "except Exception:\n"
        "    sys.exit(1)\n"
    )
    return (
        f"deadline=$((SECONDS + {int(props['ready_timeout_s'])}))\n"
        "while true; do\n"
        f"    if ! {{ {_alive_check(pid, start_ticks)}; }}; then echo exited; break; fi\n"
        f"    if {quote(props['python'])} -c {quote(probe)}; then echo ready; break; fi\n"
        '    if [ "$SECONDS" -ge "$deadline" ]; then echo timeout; break; fi\n'
        "    sleep 1\n"
        "done\n"
        f"echo ---log---; {_log_tail_script(log_path)}"
    )


def _stop_script(pid: int, start_ticks: int | None, nvidia_smi: Sequence[str], timeout_s: float) -> str:
    # TERM the process group (the server and its per-GPU workers), KILL it after the grace period,
    # then wait until none of the group's processes is listed as holding GPU memory: only then
    # may the next server start.
    smi = " ".join(quote(word) for word in nvidia_smi)
    return (
        f"deadline=$((SECONDS + {int(timeout_s)}))\n"
        f"group=$(ps -eo pid=,pgid= | awk -v g={pid} '$2 == g {{print $1}}' | tr '\\n' ' ')\n"
        f"if {_alive_check(pid, start_ticks)}; then\n"
        f"    kill -TERM -- -{pid} 2>/dev/null || kill -TERM {pid} 2>/dev/null || true\n"
        f'    while {_alive_check(pid, start_ticks)} && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done\n'
        f"    if {_alive_check(pid, start_ticks)}; then kill -KILL -- -{pid} 2>/dev/null || true; fi\n"
        "fi\n"
        "while true; do\n"
        f"    listed=$({smi} --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -d ' ')\n"
        '    held=""\n'
        f'    for p in $group {pid}; do printf "%s\\n" "$listed" | grep -qx "$p" && held="$held $p"; done\n'
        '    [ -z "$held" ] && { echo freed; break; }\n'
        '    [ "$SECONDS" -ge "$deadline" ] && { echo "still-held$held"; break; }\n'
        "    sleep 0.5\n"
        "done\n"
    )


def start(props: Mapping[str, Any]) -> dict[str, Any]:
    """Launches the server, waits until it is ready, and returns the process's identity.

    On failure the process is stopped and ServerError gives the class, the log's last lines and
    the fix.
    """
    conn = connect(props)
    if props["installed_version"] != props["release"]:
        raise ServerError(
            f"The flags were rendered for SGLang {props['release']}, but {conn.label} has "
            f"{props['installed_version']} installed. Set environment.sglang_release to "
            f"{props['installed_version']!r}, or let the environment install {props['release']}."
        )
    # Holding the claim for this update keeps a racing update of another stack from launching too.
    claim.acquire(
        conn, props["stack"], takeover=False, update_id=props["update_id"], state_dir=props["state_dir"]
    )
    _stop_untracked(conn, props)
    instance = uuid.uuid4().hex[:12]
    log_path = f"{props['log_dir'].rstrip('/')}/{props['stack']}-{instance}.log"
    launched = transport.run(conn, _launch_script(props, log_path), timeout_s=60)
    if not launched.ok:
        raise ServerError(
            f"Could not start SGLang on {conn.label}: {launched.stderr.strip() or launched.stdout.strip()}. "
            "Check that the Python environment exists on the host."
        )
    if launched.stdout.strip() == "port-taken":
        raise ServerError(
            f"Port {props['port']} on {conn.label} is taken by another program, so SGLang was not started "
            "(its health check would have reached that program). Stop the program "
            f"(`ss -ltnp 'sport = :{props['port']}'` on the host names it) or set server.port to a free port."
        )
    words = launched.stdout.split()
    if len(words) < 2:
        # No start time: the process was gone before it could be read, it failed at once.
        tail = transport.run(conn, _log_tail_script(log_path), timeout_s=30)
        raise _start_failure(conn, props, "exited", tail.stdout, log_path)
    pid, start_ticks = int(words[0]), int(words[1])
    claim.record_server(conn, props["stack"], pid, start_ticks, state_dir=props["state_dir"])
    waited = transport.run(
        conn,
        _ready_script(props, pid, start_ticks, log_path),
        timeout_s=float(props["ready_timeout_s"]) + _SLACK_S,
    )
    verdict, _, log_tail = waited.stdout.partition("---log---\n")
    if verdict.strip() != "ready":
        stop(conn, pid, start_ticks, props["nvidia_smi"], float(props["stop_timeout_s"]))
        raise _start_failure(conn, props, verdict.strip(), log_tail, log_path)
    serving.record(
        conn,
        props["state_dir"],
        {
            "stack": props["stack"],
            "pid": pid,
            "release": props["release"],
            "flags": props["flags"],
            "launch_command": _command(props),
        },
    )
    return {
        "pid": pid,
        "start_ticks": start_ticks,
        "instance": instance,
        "log_path": log_path,
        "launch_command": _command(props),
        "url": f"http://127.0.0.1:{int(props['port'])}",
    }


def _stop_untracked(conn: Connection, props: Mapping[str, Any]) -> None:
    """Stops a server of this stack that no update tracks: one whose update was killed after the
    launch. By the time a server is created the stack's previous one is stopped, so a live process
    recorded in the claim only holds the GPUs and the port (and would answer the health check)."""
    current = claim.read(conn, state_dir=props["state_dir"])
    if current is not None and current.stack == props["stack"]:
        stop_recorded(conn, current, props)


def _log_tail_script(log_path: str) -> str:
    return f"tail -n {_LOG_TAIL_LINES} {quote_path(log_path)} 2>/dev/null || true\n"


def _shorten_lines(text: str) -> str:
    return "\n".join(
        line
        if len(line) <= _LOG_LINE_CHARS
        else f"{line[:_LOG_LINE_CHARS]} [... {len(line) - _LOG_LINE_CHARS} more characters]"
        for line in text.rstrip().splitlines()
    )


def _start_failure(
    conn: Connection, props: Mapping[str, Any], verdict: str, log_tail: str, log_path: str
) -> ServerError:
    """The error of a start that did not reach ready: how it ended, its class, the log, the fix."""
    failure = classify_failure(log_tail)
    fix = failure.fix
    if verdict == "timeout":
        why = f"was not ready within {props['ready_timeout_s']:g} s and was stopped"
        if failure.kind == "other":
            fix = (
                "If the log shows it still loading, raise launch.ready_timeout_s; if it stopped making "
                "progress, fix what its last lines name and run `pulumi up` again."
            )
    else:
        why = "exited before it became ready" if verdict == "exited" else "could not be checked"
    return ServerError(
        f"SGLang on {conn.label} {why} ({failure.kind}). Last log lines of {log_path}:\n"
        f"{_shorten_lines(log_tail) or '(the log is empty)'}\n{fix}"
    )


def stop(
    conn: Connection, pid: int, start_ticks: int | None, nvidia_smi: Sequence[str], timeout_s: float
) -> None:
    """Stops the server's process group and waits until its GPU memory is free."""
    result = transport.run(
        conn, _stop_script(pid, start_ticks, nvidia_smi, timeout_s), timeout_s=timeout_s + _SLACK_S
    )
    if result.stdout.strip().startswith("still-held"):
        raise ServerError(
            f"SGLang (pid {pid}) on {conn.label} stopped, but processes {result.stdout.split()[1:]} still "
            f"hold GPU memory after {timeout_s:g} s. Check `nvidia-smi` on the host and stop them."
        )


def stop_pid(
    conn: Connection,
    pid: int,
    start_ticks: int | None,
    nvidia_smi: Sequence[str],
    timeout_s: float,
    *,
    state_dir: str,
) -> None:
    """Stops the SGLang server recorded in the claim (pid and, since it is recorded, start time),
    and removes the host's note that it serves."""
    stop(conn, pid, start_ticks, nvidia_smi, timeout_s)
    serving.forget(conn, state_dir, pid)


def stop_recorded(conn: Connection, recorded: claim.Claim, props: Mapping[str, Any]) -> None:
    """Stops the server a claim records, if it records one (`props` gives nvidia-smi, the
    stop timeout and the host's state folder)."""
    if recorded.server_pid:
        stop_pid(
            conn,
            recorded.server_pid,
            recorded.server_start_ticks,
            props["nvidia_smi"],
            float(props["stop_timeout_s"]),
            state_dir=props["state_dir"],
        )


def is_running(conn: Connection, pid: int, start_ticks: int) -> bool:
    """Whether the server process launched as (pid, start time) still runs."""
    return transport.run(conn, _alive_check(pid, start_ticks), timeout_s=30).ok


@plain_errors
class _ServerProvider(dynamic.ResourceProvider):
    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        outs = start(props)
        return dynamic.CreateResult(outs["instance"], {**props, **outs})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        replaces = [key for key in REPLACING_INPUTS if olds.get(key) != news.get(key)]
        in_place = [
            key
            for key in ("ready_timeout_s", "stop_timeout_s", "log_dir", "state_dir")
            if olds.get(key) != news.get(key)
        ]
        # Another host means another server; a new key or host key for the same host does not.
        connection_changed, new_host = connection_diff(olds, news)
        if connection_changed:
            (replaces if new_host else in_place).append("connection")
        return dynamic.DiffResult(
            changes=bool(replaces or in_place), replaces=replaces, delete_before_replace=True
        )

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        # Only supervision settings and the way in change in place; the process stays as it is.
        kept = {
            key: olds[key] for key in ("pid", "start_ticks", "instance", "log_path", "launch_command", "url")
        }
        return dynamic.UpdateResult({**news, **kept})

    def read(self, id_: str, props: dict[str, Any]) -> dynamic.ReadResult:
        conn = connect(props)
        if not is_running(conn, int(props["pid"]), int(props["start_ticks"])):
            # Gone from the host: refresh drops it from the state and the next up relaunches it;
            # the host stops saying it serves it.
            serving.forget(conn, props["state_dir"], int(props["pid"]))
            return dynamic.ReadResult(None, {})
        return dynamic.ReadResult(id_, props)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        conn = connect(props)
        serving.forget(conn, props["state_dir"], int(props["pid"]))
        stop(
            conn,
            int(props["pid"]),
            int(props["start_ticks"]),
            props["nvidia_smi"],
            float(props["stop_timeout_s"]),
        )


class SGLangServer(dynamic.Resource, module="sglang", name="Server"):
    """An SGLang server process on the GPU host, ready to serve when created."""

    pid: pulumi.Output[int]
    """The server's process id on the host."""
    instance: pulumi.Output[str]
    """A new value for every launch: what the benchmark keys its results on."""
    log_path: pulumi.Output[str]
    """The server's log file on the host."""
    launch_command: pulumi.Output[str]
    """The exact command line the server was started with."""
    url: pulumi.Output[str]
    """The server's base URL as seen from the host."""

    def __init__(
        self,
        name: str,
        *,
        connection: pulumi.Input[Mapping[str, Any]],
        stack: str,
        python: pulumi.Input[str],
        launcher_module: pulumi.Input[str],
        flags: Mapping[str, Any],
        release: str,
        installed_version: pulumi.Input[str],
        env: Mapping[str, str],
        secret_env: pulumi.Input[Mapping[str, str]] | None,
        port: int,
        nvidia_smi: pulumi.Input[Sequence[str]],
        state_dir: str,
        update_id: str,
        draft_digest: pulumi.Input[str] | None = None,
        log_dir: str,
        ready_timeout_s: float = 1800.0,
        stop_timeout_s: float = 120.0,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            "connection": connection,
            "stack": stack,
            "python": python,
            "launcher_module": launcher_module,
            "flags": dict(flags),
            "release": release,
            "installed_version": installed_version,
            "env": dict(env),
            "secret_env": secret_env,
            "port": port,
            "nvidia_smi": nvidia_smi,
            "draft_digest": draft_digest or "",
            "state_dir": state_dir,
            "update_id": update_id,
            "log_dir": log_dir,
            "ready_timeout_s": ready_timeout_s,
            "stop_timeout_s": stop_timeout_s,
            "pid": None,
            "start_ticks": None,
            "instance": None,
            "log_path": None,
            "launch_command": None,
            "url": None,
        }
        super().__init__(
            _ServerProvider(),
            name,
            props,
            pulumi.ResourceOptions.merge(
                keep_connection_secret(opts), pulumi.ResourceOptions(additional_secret_outputs=["secret_env"])
            ),
        )
