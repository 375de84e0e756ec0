"""Stopping an SGLang server process on the host: its process group TERMed (KILLed after a grace
period), then waited on until none of its processes holds GPU memory, so the next server may start.

Used by the GPU claim's takeover (the previous owner's server) as well as by the server resource.
"""

from __future__ import annotations

from collections.abc import Sequence

from sglang_stacks.errors import ServerError
from sglang_stacks.hostops import claim, serving
from sglang_stacks.hostops import transport as transport
from sglang_stacks.hostops.transport import Connection, quote

__all__ = ["stop", "stop_pid", "stop_recorded"]

# Seconds that the host-side script may take beyond its own waits.
_SLACK_S = 30.0

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


def stop_recorded(
    conn: Connection,
    recorded_claim: claim.Claim,
    nvidia_smi: Sequence[str],
    stop_timeout_s: float,
    state_dir: str,
) -> None:
    """Stops the server a claim records, if it records one."""
    if recorded_claim.server_pid:
        stop_pid(
            conn,
            recorded_claim.server_pid,
            recorded_claim.server_start_ticks,
            nvidia_smi,
            stop_timeout_s,
            state_dir=state_dir,
        )
