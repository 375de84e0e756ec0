"""A private PostgreSQL server on 127.0.0.1 for tests: its own cluster in a temporary folder, on a
free port, with a password that only a libpq password file holds.

    with start_postgres() as server:
        storage = server.url("campaign")  # postgresql+psycopg://sweep@127.0.0.1:<port>/campaign

A client finds the password through ``PGPASSFILE=server.password_file`` (``server.env()``), so the
database URL, like a campaign file's ``storage:``, carries none. PostgreSQL refuses to run as root:
as root the cluster runs as the ``postgres`` user (or ``nobody``). The server and its folder are
gone when the block ends. Without PostgreSQL installed the tests fail with the command that
installs it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests._ports import free_port

INSTALL_HINT = "PostgreSQL is not installed here; run scripts/ensure-postgres.sh once, then the tests again."
HOST = "127.0.0.1"
USER = "sweep"
"""The cluster's superuser, the role the tests connect as."""


def server_programs() -> Path | None:
    """The folder holding initdb, pg_ctl and postgres: Debian's newest version folder
    (``/usr/lib/postgresql/<version>/bin``), else the folder of the ``initdb`` on PATH."""
    found = [
        folder
        for folder in Path("/usr/lib/postgresql").glob("*/bin")
        if all((folder / name).is_file() for name in ("initdb", "pg_ctl", "postgres"))
    ]
    if found:
        return max(found, key=lambda folder: [int(n) for n in re.findall(r"\d+", folder.parent.name)])
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def _run_as() -> dict[str, Any]:
    """subprocess arguments that run PostgreSQL's programs as an unprivileged user when we are root."""
    if os.geteuid() != 0:
        return {}
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            account = pwd.getpwnam(name)
            return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
    raise AssertionError("Running as root, and no postgres or nobody user exists to run PostgreSQL as.")


@dataclass(frozen=True)
class PostgresServer:
    """A running test cluster and how to reach it."""

    host: str
    port: int
    password_file: Path
    """A libpq password file (``PGPASSFILE``) with the password of ``USER`` for this server."""
    folder: Path

    def url(self, database: str = "postgres") -> str:
        """An SQLAlchemy database URL for ``database`` through psycopg 3, without the password."""
        return f"postgresql+psycopg://{USER}@{self.host}:{self.port}/{database}"

    def env(self) -> dict[str, str]:
        """The environment variables a client needs besides the URL (the password file)."""
        return {"PGPASSFILE": str(self.password_file)}

    def create_database(self, name: str) -> str:
        """Create an empty database; its URL."""
        import psycopg

        dsn = f"host={self.host} port={self.port} user={USER} dbname=postgres passfile={self.password_file}"
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log(self) -> str:
        """What the server printed so far."""
        return (self.folder / "postgres.log").read_text(errors="replace")


@contextlib.contextmanager
def start_postgres() -> Iterator[PostgresServer]:
    """Start a cluster of its own on a free port of 127.0.0.1; stop it and remove it after the block."""
    programs = server_programs()
    if programs is None:
        pytest.fail(INSTALL_HINT)
    run_as = _run_as()
    folder = Path(tempfile.mkdtemp(prefix="sglang-stacks-postgres-"))
    password = secrets.token_urlsafe(18)
    # The cluster's user owns the folder; the password file for initdb is its, the client's is ours.
    (folder / "initdb-password").write_text(password + "\n", encoding="utf-8")
    if run_as:
        for path in (folder, folder / "initdb-password"):
            os.chown(path, run_as["user"], run_as["group"])
    os.chmod(folder / "initdb-password", 0o600)
    data, log = folder / "data", folder / "postgres.log"
    port = free_port()

    def program(*args: str, timeout_s: float = 120) -> None:
        result = subprocess.run(
            [str(programs / args[0]), *args[1:]],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            **run_as,
        )
        if result.returncode != 0:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            output = result.stderr + result.stdout
            raise AssertionError(f"{args[0]} failed ({result.returncode}): {output}{tail}")

    program(
        "initdb",
        f"--pgdata={data}",
        f"--username={USER}",
        f"--pwfile={folder / 'initdb-password'}",
        "--auth=scram-sha-256",
        "--encoding=UTF8",
        "--no-sync",
    )
    (folder / "initdb-password").unlink()
    password_file = folder / "pgpass"
    password_file.write_text(f"{HOST}:{port}:*:{USER}:{password}\n", encoding="utf-8")
    os.chmod(password_file, 0o600)
    # Only TCP on 127.0.0.1 (no Unix socket, so no shared socket folder); durability is not wanted here.
    options = f"-c listen_addresses={HOST} -p {port} -c unix_socket_directories='' -c fsync=off"
    try:
        program(
            "pg_ctl", f"--pgdata={data}", f"--log={log}", "--wait", "--timeout=60", "-o", options, "start"
        )
        yield PostgresServer(HOST, port, password_file, folder)
    finally:
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            program("pg_ctl", f"--pgdata={data}", "--mode=immediate", "--wait", "stop", timeout_s=60)
        shutil.rmtree(folder, ignore_errors=True)
