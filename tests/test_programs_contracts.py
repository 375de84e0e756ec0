"""Each host program against its contract, read from both files: the modes the program dispatches
are the contract's, an unknown mode is refused with the exit code the contract names for it, every
exit code the program writes is declared, every declared code is written, or shown here, and
documented; a bash program reads exactly the parameters its requests declare. And `call`, the one
runner: a declared failure is raised as its class with the contract's words, an undeclared exit
code as the program's own error class."""

from __future__ import annotations

import ast
import importlib
import json
import os
import pkgutil
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sglang_stacks.config.docstrings import attribute_docstrings
from sglang_stacks.config.flags import ServerFlags
from sglang_stacks.errors import ArtifactError, HostError, ServerError
from sglang_stacks.hostops.connection import Connection
from sglang_stacks.hostops.programs import claim_contract, serving_note_contract
from sglang_stacks.hostops.programs.bound_contract import BoundExit
from sglang_stacks.hostops.programs.contract import FOLDER, Program, Request
from sglang_stacks.hostops.programs.runner import call
from sglang_stacks.hostops.programs.server_contract import Launch, LogTail
from sglang_stacks.hostops.programs.serving_note_contract import ServingNote
from sglang_stacks.hostops.programs.swap_folder_contract import SwapFolder
from sglang_stacks.hostops.programs.tree_digest_contract import ListTree
from tests._programs import run_py, run_sh, unreadable_file

PROGRAM_FILES = sorted(
    path.name
    for path in FOLDER.iterdir()
    if path.suffix in (".sh", ".py")
    and path.stem not in ("__init__", "contract", "runner")
    and not path.stem.endswith("_contract")
)


def _contract_modules() -> list[str]:
    return [
        f"sglang_stacks.hostops.programs.{found.name}"
        for found in pkgutil.iter_modules([str(FOLDER)])
        if found.name.endswith("_contract") and found.name != "_contract"
    ]


def _contracts() -> dict[str, tuple[Program, list[type[Request[object]]]]]:
    """Each program file's declaration and the request classes of its contract module."""
    found: dict[str, tuple[Program, list[type[Request[object]]]]] = {}
    for name in _contract_modules():
        module = importlib.import_module(name)
        stem = name.rsplit(".", 1)[1].removesuffix("_contract")
        declared = [
            v for v in vars(module).values() if isinstance(v, Program) and v.file.startswith(stem + ".")
        ]
        assert len(declared) == 1, f"{name} declares {len(declared)} programs of its own"
        requests = [
            value
            for value in vars(module).values()
            if isinstance(value, type)
            and issubclass(value, Request)
            and value.__module__ == name
            and getattr(value, "program", None) is not None
        ]
        found[declared[0].file] = (declared[0], requests)
    return found


CONTRACTS = _contracts()
WITH_MODES = sorted(file for file, (program, _) in CONTRACTS.items() if program.modes is not None)


def _text(file: str) -> str:
    return (FOLDER / file).read_text()


def _dispatched_modes(file: str) -> set[str]:
    """The modes the program's own dispatch names: a bash program's ``case "$MODE"`` arms, a Python
    program's ``MODES`` tuple."""
    text = _text(file)
    if file.endswith(".sh"):
        block = text[text.rindex('case "$MODE" in') : text.rindex("esac")]
        return set(re.findall(r"^\s*([a-z][a-z-]*)\)", block, re.MULTILINE))
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["MODES"]:
            return set(ast.literal_eval(node.value))
    raise AssertionError(f"{file} has no MODES tuple")


def _written_exit_codes(file: str) -> set[int]:
    """The exit codes the program writes out: ``exit N`` in bash; ``sys.exit(N)`` and the numbers
    ``main`` returns in Python."""
    text = _text(file)
    if file.endswith(".sh"):
        return {int(code) for code in re.findall(r"\bexit (\d+)", text)}
    codes: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "sys.exit":
            codes |= _numbers(node)
        if isinstance(node, ast.FunctionDef) and node.name == "main":
            for inner in ast.walk(node):
                if isinstance(inner, ast.Return) and inner.value is not None:
                    codes |= _numbers(inner.value)
    return codes


def _numbers(node: ast.AST) -> set[int]:
    """The exit codes an expression is written as: a number, or either side of ``a if c else b``."""
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "sys.exit":
        return _numbers(node.args[0]) if node.args else {0}
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _numbers(node.body) | _numbers(node.orelse)
    return set()


def test_every_program_has_its_contract_beside_it() -> None:
    assert sorted(CONTRACTS) == PROGRAM_FILES


@pytest.mark.parametrize("file", WITH_MODES)
def test_a_program_dispatches_exactly_the_modes_its_contract_declares(file: str) -> None:
    program, requests = CONTRACTS[file]
    assert program.modes is not None

    assert _dispatched_modes(file) == {mode.value for mode in program.modes}
    # Each mode is asked for by a request of the contract, once.
    asked = sorted(str(request.mode) for request in requests if request.mode is not None)
    assert asked == sorted(mode.value for mode in program.modes)


@pytest.mark.parametrize("file", WITH_MODES)
def test_a_program_refuses_an_unknown_mode_with_the_code_its_contract_names(
    file: str, tmp_path: Path
) -> None:
    program, _ = CONTRACTS[file]

    done = run_sh(file, mode="bogus") if file.endswith(".sh") else run_py(file, "bogus", "x", str(tmp_path))

    assert program.exit_named(done.returncode) is program.exits["UNKNOWN_MODE"], done.stderr
    assert "bogus" in done.stderr


# Declared codes no line of the program writes nor another program's contract declares, and the
# run here that shows each: the command whose failure `set -e` passes on, argparse's refusal, an
# uncaught Python error, a signal.
IMPLICIT = {
    ("swap_folder.sh", 1): "test_a_failed_move_is_the_declared_failure_and_the_upload_goes",
    ("serving_note.sh", 1): "test_a_note_that_cannot_be_written_is_a_host_error",
    ("bound.py", 129): "test_bound_ends_with_its_command_on_term_or_hup_with_the_declared_codes",
    ("bound.py", 143): "test_bound_ends_with_its_command_on_term_or_hup_with_the_declared_codes",
    ("claim.py", 1): "test_a_claim_program_stopped_by_a_python_error_is_a_host_error_naming_the_folder",
    ("claim.py", 2): "test_a_program_refuses_an_unknown_mode_with_the_code_its_contract_names",
}


@pytest.mark.parametrize("file", sorted(CONTRACTS))
def test_every_exit_code_a_program_writes_is_declared_and_every_declared_one_written_or_shown(
    file: str,
) -> None:
    program, _ = CONTRACTS[file]
    declared = {int(code) for code in program.exits}
    written = _written_exit_codes(file)
    documented = attribute_docstrings(program.exits)

    assert written - declared == set(), f"{file} exits with codes its contract does not name"
    # A code the program passes on from a program it runs is written in that program's contract.
    passed_on = {int(code) for exits in program.passes_on for code in exits}
    assert {code for code in declared - written - passed_on if code != 0} == {
        code for f, code in IMPLICIT if f == file
    }
    assert sorted(documented) == sorted(member.name for member in program.exits)
    unknown = program.exits.__members__.get("UNKNOWN_MODE")
    assert (unknown is not None) == (program.modes is not None)


# Variables a bash program reads that are bash's own or set by its launcher, not parameters.
_NOT_PARAMETERS = {"SECONDS", "HOME", "SGLANG_STACKS_PROGRAM"}


def _variables(text: str) -> tuple[set[str], set[str]]:
    """The upper-case variables a bash program reads, and those it sets itself."""
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    read = set(re.findall(r"\$\{?([A-Z][A-Z0-9_]*)", code)) - _NOT_PARAMETERS
    assigned = set(re.findall(r"(?:^|[\s;(])([A-Z][A-Z0-9_]*)=", code, re.MULTILINE))
    assigned |= {name for names in re.findall(r"read -r ([A-Z_ ]+)", code) for name in names.split()}
    return read, assigned


@pytest.mark.parametrize("file", sorted(file for file in CONTRACTS if file.endswith(".sh")))
def test_a_bash_program_reads_exactly_the_parameters_its_requests_declare(file: str) -> None:
    program, requests = CONTRACTS[file]
    declared = {"MODE"} if program.modes is not None else set()
    declared |= set(program.companions)
    for request in requests:
        declared |= {name.upper() for name, info in request.model_fields.items() if not info.exclude}
    read, assigned = _variables(_text(file))

    assert declared - read == set(), f"{file} never reads these parameters"
    assert read - declared - assigned == set(), f"{file} reads variables no request passes"


def test_a_declared_failure_is_raised_as_its_class_with_the_contracts_words() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        launch = Launch(python=sys.executable, port=port, log="/nonexistent/log", command="false")

        with pytest.raises(ServerError, match=rf"Port {port} on the local host is taken by another program"):
            call(Connection.local(), launch)


def test_an_unreadable_draft_model_file_is_the_declared_hashing_failure(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    unreadable_file(tmp_path / "secret")

    with pytest.raises(ArtifactError, match=r"Hashing the draft model at .* failed \(exit 5\).*secret"):
        call(Connection.local(), ListTree(folder=str(tmp_path)))


def test_a_failed_move_is_the_declared_failure_and_the_upload_goes(tmp_path: Path) -> None:
    # A folder whose parent is missing: mv fails, and set -e passes its 1 on.
    staging, folder = tmp_path / "upload", tmp_path / "a" / "b"
    staging.mkdir()

    with pytest.raises(HostError, match="Moving the uploaded draft model into"):
        call(Connection.local(), SwapFolder(staging=str(staging), folder=str(folder)))
    assert not staging.exists()


def test_an_exit_code_the_contract_does_not_name_is_the_programs_own_error(tmp_path: Path) -> None:
    # LOG unset in the script's environment: bash's `set -u` ends it with 1, no code of server.sh.
    class Broken(LogTail):
        def variables(self) -> dict[str, str]:
            return {"MODE": "log-tail", "TAIL_LINES": "5"}

    undeclared = r"server.sh \(log-tail\) .* ended with exit 1, which it never gives.*LOG: unbound"
    with pytest.raises(ServerError, match=undeclared):
        call(Connection.local(), Broken(log=str(tmp_path / "log"), tail_lines=5))


def test_a_claim_program_stopped_by_a_python_error_is_a_host_error_naming_the_folder(tmp_path: Path) -> None:
    # Its state folder under a file: the folder cannot be made, Python stops with a traceback.
    (tmp_path / "file").write_text("")
    folder = str(tmp_path / "file" / "state")

    with pytest.raises(
        HostError, match=r"(?s)The GPU claim step read failed .* \(exit 1\).*NotADirectoryError"
    ):
        call(Connection.local(), claim_contract.Read(stack="", folder=folder))


def test_a_note_that_cannot_be_written_is_a_host_error(tmp_path: Path) -> None:
    # Its folder under a file: mkdir fails, and set -e passes its 1 on.
    (tmp_path / "file").write_text("")
    note = tmp_path / "file" / "serving.json"
    written = ServingNote(stack="baseline", pid=7, release="0.5.8", flags=ServerFlags())

    cannot = r"serving_note.sh \(record\) .* failed: record: the note could not be written"
    with pytest.raises(HostError, match=cannot):
        call(Connection.local(), serving_note_contract.Record(note=str(note), written=written))


@pytest.mark.parametrize(
    ("sent", "code"), [(signal.SIGTERM, BoundExit.TERMINATED), (signal.SIGHUP, BoundExit.HUNG_UP)]
)
def test_bound_ends_with_its_command_on_term_or_hup_with_the_declared_codes(
    tmp_path: Path, sent: signal.Signals, code: BoundExit
) -> None:
    runfile = tmp_path / "run.json"
    bound = subprocess.Popen(
        [sys.executable, str(FOLDER / "bound.py"), str(runfile), "test", "--", "sleep", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while not runfile.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    command = json.loads(runfile.read_text())["pid"]

    bound.send_signal(sent)

    assert bound.wait(timeout=30) == code
    assert not runfile.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(command, 0)
