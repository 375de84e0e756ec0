"""Scripts and uploads over a real OpenSSH server on 127.0.0.1, and on the local host."""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest

from sglang_stacks.errors import HostError, SpecError
from sglang_stacks.hostops import _ssh, command_folder
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.session import open_session
from sglang_stacks.hostops.transport import HostPath, gathering, quote, quote_path, run, upload
from tests._ports import free_port
from tests._processes import alive
from tests._pulumi import ROOT
from tests.sshd import SshServer, new_key, start_sshd

T = TypeVar("T")

# Runs one call in a process of its own: argv is port, user, host key, script; the key is on stdin.
CALLER = """
import sys
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.transport import run
port, user, host_key, script = sys.argv[1:]
conn = Connection(host="127.0.0.1", port=int(port), user=user, host_key=host_key,
                  private_key=sys.stdin.read(), connect_timeout_s=5)
run(conn, script, timeout_s=120)
"""


@pytest.fixture(scope="module")
def sshd() -> Iterator[SshServer]:
    with start_sshd() as server:
        yield server


@pytest.fixture(params=["ssh", "local"])
def conn(request, sshd: SshServer) -> Connection:
    return sshd.connection() if request.param == "ssh" else Connection.local()


def key_body(private_key: str) -> str:
    """A line from the middle of a private key: what must never leak anywhere."""
    return private_key.strip().splitlines()[2]


def fresh_authorized_key(sshd: SshServer, folder: Path, name: str) -> str:
    """A new client key the test sshd accepts: a connection of its own, not shared with other tests."""
    private_key, public = new_key(folder, name)
    with (sshd.folder / "authorized_keys").open("a") as authorized:
        authorized.write(public + "\n")
    (folder / name).unlink()  # the key now lives only in this test's memory, as a secret would
    return private_key


def wait_for(check: Callable[[], T], timeout_s: float = 30) -> T:
    """The first truthy value of ``check()``, polled until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"still waiting after {timeout_s} s"
        time.sleep(0.05)
    return found


def read_proc(pid: int, name: str) -> str:
    return Path(f"/proc/{pid}/{name}").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def is_session(pid: int) -> bool:
    """Whether ``pid`` is the ssh client of a session (not the one that starts the master)."""
    try:
        return "ControlMaster=no" in read_proc(pid, "cmdline")
    except OSError:
        return False


def descendants(pid: int) -> list[int]:
    """This test's own processes: the children of ``pid``, theirs, and so on."""
    children: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return []  # it ended while the tree was read (a short-lived helper): nothing of it is left
    for task in tasks:
        with contextlib.suppress(OSError):
            children += [int(child) for child in (task / "children").read_text().split()]
    return [found for child in children for found in (child, *descendants(child))]


def open_files(pid: int, attempts: int = 20) -> list[str]:
    """What the process's descriptors point to, all read at one moment: a descriptor closed between
    the listing and its reading (a slow machine widens that gap) makes a new listing, so nothing
    it held is skipped."""
    for _ in range(attempts - 1):
        with contextlib.suppress(FileNotFoundError):
            return [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
    return [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]


def control_socket(conn: Connection) -> Path:
    """The control socket of this process's master connection for ``conn``."""
    return _ssh._ensure_master(conn)[0]


def master_pid_at(folder: Path) -> int:
    socket_path = next(folder.glob("*.sock"))
    checked = subprocess.run(
        ["ssh", "-o", f"ControlPath={socket_path}", "-O", "check", "x"], capture_output=True, text=True
    )
    return int(checked.stderr.split("pid=")[1].split(")")[0])


def master_pid(conn: Connection) -> int:
    return master_pid_at(control_socket(conn).parent)


def pids_running(command_line: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if cmdline.read_bytes().replace(b"\0", b" ").strip() == command_line.encode():
                found.append(int(cmdline.parent.name))
    return found


def files_holding(
    secrets: Sequence[bytes], since: float, *, roots: Sequence[str] = (), skip: Sequence[Path] = ()
) -> list[Path]:
    """Files under ``roots`` (by default the temporary folders and the home folder), changed since
    ``since``, that hold one of ``secrets``; the folders in ``skip`` are allowed to."""
    roots = roots or sorted({tempfile.gettempdir(), "/tmp", "/var/tmp", str(Path.home())})
    # find walks the half a million files there in seconds, where os.walk takes minutes.
    changed = subprocess.run(
        ["find", *roots, "-xdev", "-type", "f", "-size", "-64M",
         "(", "-newermt", f"@{since:.0f}", "-o", "-newerct", f"@{since:.0f}", ")", "-print0"],
        capture_output=True,
    ).stdout.split(b"\0")  # fmt: skip
    found = []
    for name in filter(None, changed):
        path = Path(os.fsdecode(name))
        if any(path.is_relative_to(folder) for folder in skip):
            continue
        with contextlib.suppress(OSError):  # a file removed meanwhile
            data = path.read_bytes()
            if any(secret in data for secret in secrets):
                found.append(path)
    return found


def key_copies(private_key: str, since: float, *, skip: Path) -> list[Path]:
    """Files under the temporary folders and the home folder, changed since ``since``, that hold
    the key (``skip``: the test sshd's own folder, the stand-in for the user's ~/.ssh)."""
    return files_holding([key_body(private_key).encode()], since, skip=[skip])


def test_run_returns_exit_code_output_and_reads_stdin(conn: Connection) -> None:
    result = run(conn, "echo out; echo err >&2; tr a-z A-Z; exit 3", timeout_s=20, stdin=b"piped in\n")

    assert (result.exit_code, result.ok) == (3, False)
    assert result.stdout == "out\nPIPED IN\n"
    assert result.stderr == "err\n"


def test_env_values_arrive_unchanged_however_they_are_quoted(conn: Connection) -> None:
    tricky = "a b 'c' \"d\" $HOME `id` \\ ; & |\nsecond line é"

    result = run(conn, 'printf "%s" "$TRICKY"', timeout_s=20, env={"TRICKY": tricky})

    assert result.stdout == tricky


def test_env_name_that_bash_cannot_export_is_refused(conn: Connection) -> None:
    with pytest.raises(SpecError, match="'BAD-NAME' is not valid"):
        run(conn, "true", timeout_s=5, env={"BAD-NAME": "x"})


def test_timeout_stops_the_script_on_the_host(conn: Connection) -> None:
    tag = str(900 + os.getpid() % 97)  # a sleep length no other test uses, to find the process
    started = time.monotonic()

    with pytest.raises(HostError, match=r"did not finish within 1 s"):
        run(conn, f"echo working; sleep {tag}", timeout_s=1)

    assert time.monotonic() - started < 8
    leftover = run(Connection.local(), f"pgrep -f '^sleep {tag}$' || true", timeout_s=5)
    assert leftover.stdout == ""


def test_detached_background_process_does_not_hold_the_call(conn: Connection, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    script = (
        f"setsid nohup sleep 60 >/dev/null 2>&1 </dev/null &\necho $! > {quote(str(pid_file))}; echo launched"
    )
    started = time.monotonic()

    result = run(conn, script, timeout_s=30)

    took_s = time.monotonic() - started
    pid = int(pid_file.read_text())
    try:
        assert result.stdout == "launched\n"
        assert took_s < 5
        os.kill(pid, 0)  # still running after the call returned
    finally:
        os.kill(pid, 9)


def test_background_process_holding_the_output_is_reported_not_waited_for(conn: Connection) -> None:
    started = time.monotonic()

    with pytest.raises(HostError, match=r"holds its output open.*setsid nohup"):
        run(conn, "sleep 9 & echo launched", timeout_s=60)

    assert time.monotonic() - started < 8  # well before the background process or the timeout ends


def test_pinned_host_key_mismatch_is_refused(sshd: SshServer, tmp_path: Path) -> None:
    _, other_host_key = new_key(tmp_path, "impostor")
    impostor = " ".join(other_host_key.split()[:2])

    with pytest.raises(HostError, match=f"host key of 127.0.0.1:{sshd.port} does not match") as caught:
        run(sshd.connection(host_key=impostor), "echo reached", timeout_s=10)

    assert "ssh-keyscan" in str(caught.value)


def test_keyscan_line_with_host_field_is_accepted_as_pin(sshd: SshServer) -> None:
    keyscan_line = f"[127.0.0.1]:{sshd.port} {sshd.host_key}"

    assert run(sshd.connection(host_key=keyscan_line), "echo pinned", timeout_s=10).stdout == "pinned\n"


def test_unpinned_unknown_host_is_refused_unless_explicitly_insecure(sshd: SshServer) -> None:
    with pytest.raises(HostError, match=r"is not known.*host\.host_key"):
        run(sshd.connection(host_key=None), "true", timeout_s=10)

    insecure = sshd.connection(host_key=None, insecure_skip_host_key_check=True)
    assert run(insecure, "echo trusted", timeout_s=10).stdout == "trusted\n"


def test_unreachable_port_fails_quickly_naming_the_address(sshd: SshServer) -> None:
    port = free_port()
    started = time.monotonic()

    with pytest.raises(HostError, match=f"127.0.0.1:{port} \\(connection refused\\)"):
        run(sshd.connection(port=port), "true", timeout_s=30)

    assert time.monotonic() - started < 5


def test_host_that_never_answers_fails_after_the_connect_timeout(sshd: SshServer) -> None:
    with socket.socket() as silent:  # accepts connections, never speaks SSH
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        started = time.monotonic()

        with pytest.raises(HostError, match=f"No answer from 127.0.0.1:{port} within 1 s"):
            run(sshd.connection(port=port, connect_timeout_s=1), "true", timeout_s=60)

    assert time.monotonic() - started < 5


def test_refused_key_says_so_without_showing_the_key(sshd: SshServer, tmp_path: Path) -> None:
    wrong_key, _ = new_key(tmp_path, "stranger")

    with pytest.raises(HostError, match="refused the SSH key for user") as caught:
        run(sshd.connection(private_key=wrong_key), "true", timeout_s=10)

    assert key_body(wrong_key) not in str(caught.value)
    assert key_body(wrong_key) not in repr(caught.value.args)


def test_private_key_is_never_on_a_command_line_in_an_environment_or_in_a_file(
    sshd: SshServer, tmp_path: Path
) -> None:
    conn = sshd.connection(private_key=fresh_authorized_key(sshd, tmp_path, "argv"))
    release = tmp_path / "release"
    # While this call runs, the session's ssh client and the master are alive to be inspected.
    call = threading.Thread(
        target=run,
        args=(conn, f"while [ ! -e {quote(str(release))} ]; do sleep 0.05; done"),
        kwargs={"timeout_s": 30},
    )
    call.start()
    try:
        clients = wait_for(lambda: [pid for pid in descendants(os.getpid()) if is_session(pid)])
        master = master_pid(conn)
        inspected = {pid: open_files(pid) for pid in [*clients, master]}
        texts = [read_proc(pid, name) for pid in inspected for name in ("cmdline", "environ")]
    finally:
        release.touch()
        call.join()

    assert texts and all(key_body(conn.private_key or "") not in text for text in texts)
    # The key is nowhere on a filesystem: the processes hold pipes, sockets and /dev/null only.
    assert all(
        target.split(":")[0] in {"pipe", "socket", "anon_inode", "/dev/null"}
        for targets in inspected.values()
        for target in targets
    ), inspected
    folder = control_socket(conn).parent
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert all(
        key_body(conn.private_key or "") not in path.read_text()
        for path in folder.iterdir()
        if path.is_file()
    )


def test_one_handshake_serves_every_call_to_a_host_even_concurrent_ones(
    sshd: SshServer, tmp_path: Path
) -> None:
    conn = sshd.connection(private_key=fresh_authorized_key(sshd, tmp_path, "shared"))
    before = sshd.connections()

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda n: run(conn, f"echo {n}", timeout_s=20).stdout, range(8)))
    session = open_session(conn, "read -r line; echo $line")
    session.send(b"through the same connection\n")
    results.append(session.read_line(timeout_s=20))
    session.close()
    upload(conn, Path(__file__), str(tmp_path / "copied.py"))

    assert results == [f"{n}\n" for n in range(8)] + ["through the same connection"]
    assert sshd.connections() - before == 1


def test_a_process_killed_mid_call_leaves_no_key_and_no_connection_behind(
    sshd: SshServer, tmp_path: Path
) -> None:
    since = time.time() - 1  # find compares whole seconds
    private_key = fresh_authorized_key(sshd, tmp_path, "killed")
    tag = str(1800 + os.getpid() % 97)  # a sleep length no other test uses, to find it
    # The key reaches the child on stdin, as the provider gets it from Pulumi: never in argv or env.
    child = subprocess.Popen(
        [sys.executable, "-c", CALLER, str(sshd.port), sshd.user, sshd.host_key, f"sleep {tag}"],
        stdin=subprocess.PIPE,
        cwd=ROOT,
    )
    assert child.stdin is not None
    child.stdin.write(private_key.encode())
    child.stdin.close()
    wait_for(lambda: pids_running(f"sleep {tag}"))
    folder = wait_for(
        lambda: [path.parent for path in command_folder._private_base().glob(f"{child.pid}-*/*.sock")]
    )[0]
    master = master_pid_at(folder)

    child.kill()
    child.wait()

    wait_for(lambda: not folder.exists() and not Path(f"/proc/{master}").exists())
    try:
        assert key_copies(private_key, since, skip=sshd.folder) == []
    finally:
        for pid in pids_running(f"sleep {tag}"):  # the host's side outlives its session (issue 10)
            os.kill(pid, 9)


def test_the_folder_of_an_update_killed_with_its_reaper_goes_at_the_next_update(
    sshd: SshServer, tmp_path: Path
) -> None:
    stale = command_folder._private_base() / f"{os.getpid()}-1"  # this pid, another start: an ended process
    stale.mkdir(mode=0o700)
    (stale / "0123.known").write_text(sshd.host_key)
    private_key = fresh_authorized_key(sshd, tmp_path, "sweep")

    subprocess.run(
        [sys.executable, "-c", CALLER, str(sshd.port), sshd.user, sshd.host_key, "true"],
        input=private_key.encode(),
        cwd=ROOT,
        check=True,
    )

    assert not stale.exists()


def test_port_read_back_from_pulumi_state_as_a_float_still_connects(sshd: SshServer) -> None:
    conn = sshd.connection(port=float(sshd.port))

    assert conn.port == sshd.port and isinstance(conn.port, int)
    assert run(conn, "echo reached", timeout_s=10).stdout == "reached\n"


def test_connection_repr_hides_the_key_and_pickles(sshd: SshServer) -> None:
    conn = sshd.connection()

    assert key_body(sshd.client_key) not in repr(conn)
    assert pickle.loads(pickle.dumps(conn)) == conn
    assert conn.label == f"{sshd.user}@127.0.0.1:{sshd.port}"


def test_upload_copies_a_folder_and_replaces_a_file(conn: Connection, tmp_path: Path) -> None:
    source = tmp_path / "draft"
    (source / "nested").mkdir(parents=True)
    (source / "config.json").write_text('{"a": 1}')
    (source / "nested" / "weights.bin").write_bytes(bytes(range(256)) * 64)
    destination = tmp_path / "host" / "draft-copy"

    upload(conn, source, str(destination))
    upload(conn, source / "config.json", str(tmp_path / "host" / "single.json"))
    (source / "config.json").write_text('{"a": 2}')
    upload(conn, source / "config.json", str(tmp_path / "host" / "single.json"))

    assert (destination / "nested" / "weights.bin").read_bytes() == bytes(range(256)) * 64
    assert (destination / "config.json").read_text() == '{"a": 1}'
    assert (tmp_path / "host" / "single.json").read_text() == '{"a": 2}'
    assert sorted(p.name for p in (tmp_path / "host").iterdir()) == ["draft-copy", "single.json"]


def test_upload_of_missing_source_names_it(conn: Connection, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="missing-folder' does not exist"):
        upload(conn, tmp_path / "missing-folder", str(tmp_path / "anywhere"))


def test_a_host_path_variable_reaches_the_script_with_the_home_folder_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    env = {"LOG": HostPath("~/logs/a b.log"), "PLAIN": "~/logs", "HOME_ITSELF": HostPath("~")}

    result = run(Connection.local(), 'printf "%s|%s|%s" "$LOG" "$PLAIN" "$HOME_ITSELF"', timeout_s=5, env=env)

    assert result.stdout == f"{tmp_path}/logs/a b.log|~/logs|{tmp_path}"


def test_quote_path_keeps_home_relative_paths_relative_to_the_host_home() -> None:
    name = f"sglang-stacks-test-{uuid.uuid4().hex}"

    result = run(Connection.local(), f"echo {quote_path('~/' + name + ' x')}", timeout_s=5)

    assert result.stdout == f"{Path.home()}/{name} x\n"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"port": 70000}, "SSH port 70000 is outside 1..65535"),
        ({"port": 22.5}, "SSH port 22.5 is not a whole number"),
        ({"host": "-oProxyCommand=x"}, "SSH host '-oProxyCommand=x' is not a host name"),
        ({"host_key": "AAAA not-a-key"}, "is not an SSH public key"),
        ({"kind": "telnet"}, "kind 'telnet' is not known"),
    ],
)
def test_bad_connection_settings_are_refused_with_the_value(sshd: SshServer, changes, message) -> None:
    with pytest.raises(SpecError, match=message):
        sshd.connection(**changes)


def test_malformed_private_key_is_named_as_the_problem(sshd: SshServer) -> None:
    not_a_key = (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nbm90IGEga2V5IGF0IGFsbA==\n-----END OPENSSH PRIVATE KEY-----\n"
    )

    with pytest.raises(HostError, match=r"sshPrivateKey secret .* is not a usable private key") as caught:
        run(sshd.connection(private_key=not_a_key), "true", timeout_s=10)

    assert "bm90IGEga2V5" not in str(caught.value)


def test_session_keeps_a_script_running_and_talks_to_it_line_by_line(conn: Connection) -> None:
    session = open_session(
        conn,
        'echo "ready $GREETING"; while read -r line; do echo "got $line"; done; echo bye >&2',
        env={"GREETING": "hi"},
    )

    assert session.read_line(timeout_s=20) == "ready hi"
    assert session.send(b"one\n")
    assert session.read_line(timeout_s=20) == "got one"
    session.close()

    assert not session.alive


def test_session_to_an_unreachable_host_fails_at_once(sshd: SshServer) -> None:
    with pytest.raises(HostError, match="connection refused"):
        open_session(sshd.connection(port=free_port()), "echo never")


def test_reads_run_at_once_share_one_session_each_with_its_own_output(sshd: SshServer) -> None:
    conn = sshd.connection()
    run(conn, "true", timeout_s=30)  # the master is up: what follows is sessions only
    before = sshd.sessions()

    def read(index: int) -> tuple[int, str, str]:
        with gathering():
            found = run(
                conn, f'echo "out $N"; echo "err $N" >&2; exit {index}', timeout_s=30, env={"N": str(index)}
            )
        return found.exit_code, found.stdout, found.stderr

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(read, range(4)))

    assert answers == [(index, f"out {index}\n", f"err {index}\n") for index in range(4)]
    assert sshd.sessions() - before == 1


def test_a_gathered_read_keeps_its_own_time_limit(sshd: SshServer) -> None:
    conn = sshd.connection()
    with gathering(), pytest.raises(HostError, match="did not finish within 1 s"):
        run(conn, "sleep 20", timeout_s=1)


def _started_script(tmp_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    """The wire's bootstrap on this machine running a script that would run for minutes, and the
    pid of that script's bash."""
    from sglang_stacks.hostops._wire import command_line

    script = f"echo $$ > {tmp_path}/pid; sleep 300"
    wire = subprocess.Popen(
        command_line(Connection.local()),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert wire.stdin is not None
    wire.stdin.write(f"marker 600 {len(script)}\n{script}".encode())
    wire.stdin.close()
    deadline = time.monotonic() + 10
    while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text().strip():
        assert time.monotonic() < deadline, "the script never started"
        time.sleep(0.05)
    return wire, int((tmp_path / "pid").read_text())


def test_a_script_stops_when_the_process_that_ran_it_is_killed(tmp_path: Path) -> None:
    # A cancelled update kills the session's client; the host's script must not run on for minutes.
    wire, script = _started_script(tmp_path)
    assert alive(script)

    wire.kill()
    wire.wait()

    deadline = time.monotonic() + 5
    while alive(script) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(script), "the script ran on after its session ended"


def test_a_cancelled_update_stops_the_script_in_flight_at_once(tmp_path: Path) -> None:
    from sglang_stacks.hostops import cancel

    def cancel_soon() -> None:
        time.sleep(0.5)
        cancel._REQUESTED.set()

    threading.Thread(target=cancel_soon, daemon=True).start()
    started = time.monotonic()
    try:
        with pytest.raises(
            cancel.Cancelled, match=r"cancelled \(Ctrl-C\) while a step ran on the local host"
        ):
            run(Connection.local(), f"echo $$ > {tmp_path}/pid; sleep 300", timeout_s=600)
    finally:
        cancel._REQUESTED.clear()
    assert time.monotonic() - started < 5
    script = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 5
    while alive(script) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(script)
