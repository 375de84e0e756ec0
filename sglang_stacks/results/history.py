"""The results history: every benchmark result appended to one SQLite file beside the Pulumi state.

The file is ``sglang-stacks-history.sqlite`` in the local backend's ``.pulumi`` folder
(``$SGLANG_STACKS_HISTORY`` overrides); each write is its own immediate transaction, so two stacks
finishing at once both land.
"""

from __future__ import annotations

import os
import shlex
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote, urlparse

from pydantic import ConfigDict

from sglang_stacks.errors import SpecError
from sglang_stacks.results.stats import BenchmarkResult
from sglang_stacks.shape import Shape

__all__ = [
    "ENV_VAR",
    "FILE_NAME",
    "HistoryRow",
    "default_history_path",
    "format_table",
    "latest",
    "record",
    "rows",
]

ENV_VAR = "SGLANG_STACKS_HISTORY"
FILE_NAME = "sglang-stacks-history.sqlite"
_BUSY_TIMEOUT_S = 30.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    stack TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    flags_digest TEXT NOT NULL,
    sglang_version TEXT NOT NULL,
    launch_command TEXT NOT NULL,
    concurrency INTEGER NOT NULL,
    tok_s_mean REAL NOT NULL,
    tok_s_ci95_low REAL NOT NULL,
    tok_s_ci95_high REAL NOT NULL,
    accept_length REAL,
    errors INTEGER NOT NULL,
    result_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS results_by_stack ON results (stack, recorded_at);
"""


class HistoryRow(Shape):
    """One recorded benchmark: which stack, when, with which flags and SGLang, and its result."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    stack: str
    recorded_at: datetime
    """UTC."""
    flags_digest: str
    sglang_version: str
    launch_command: str
    result: BenchmarkResult


def default_history_path(backend_url: str | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """Where the history lives: ``$SGLANG_STACKS_HISTORY``, else beside the local state.

    A ``file://<folder>`` backend (``backend_url``, else ``$PULUMI_BACKEND_URL``) keeps its state in
    ``<folder>/.pulumi``, and the history goes there too; with no local backend named it is
    ``~/.pulumi``, where ``pulumi login --local`` keeps state.
    """
    env = os.environ if environ is None else environ
    if env.get(ENV_VAR):
        return Path(env[ENV_VAR]).expanduser()
    url = backend_url or env.get("PULUMI_BACKEND_URL") or ""
    folder = "~"
    if url.startswith("file://"):
        parts = urlparse(url)
        folder = unquote(parts.netloc + parts.path) or "~"
    return Path(folder).expanduser() / ".pulumi" / FILE_NAME


def _connect(db_path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(db_path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
    connection.row_factory = sqlite3.Row
    return connection


def record(
    db_path: str | os.PathLike[str],
    stack: str,
    flags_digest: str,
    sglang_version: str,
    launch_command: str | Sequence[str],
    result: BenchmarkResult,
    when: datetime | None = None,
) -> HistoryRow:
    """Append one result and return it as stored; ``when`` must be timezone-aware (default: now)."""
    moment = datetime.now(UTC) if when is None else when
    if moment.tzinfo is None:
        raise ValueError(f"when={moment.isoformat()} has no timezone; pass an aware datetime, e.g. in UTC.")
    moment = moment.astimezone(UTC)
    command = launch_command if isinstance(launch_command, str) else shlex.join(launch_command)
    path = Path(db_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    values = (
        stack,
        moment.isoformat(),
        flags_digest,
        sglang_version,
        command,
        result.concurrency,
        result.tok_s_mean,
        result.tok_s_ci95[0],
        result.tok_s_ci95[1],
        result.accept_length,
        result.errors,
        result.model_dump_json(),
    )
    with closing(_connect(path)) as connection:
        # IMMEDIATE takes the write lock up front: a second writer waits for it instead of failing.
        connection.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    connection.execute(statement)
            cursor = connection.execute(
                "INSERT INTO results (stack, recorded_at, flags_digest, sglang_version, launch_command,"
                " concurrency, tok_s_mean, tok_s_ci95_low, tok_s_ci95_high, accept_length, errors,"
                " result_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                values,
            )
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
    return HistoryRow(
        id=int(cursor.lastrowid or 0),
        stack=stack,
        recorded_at=moment,
        flags_digest=flags_digest,
        sglang_version=sglang_version,
        launch_command=command,
        result=result,
    )


def _read(db_path: str | os.PathLike[str], where: str, parameters: Sequence[str]) -> list[HistoryRow]:
    path = Path(db_path)
    if not path.exists():
        return []
    with closing(_connect(path)) as connection:
        try:
            found = connection.execute(
                "SELECT id, stack, recorded_at, flags_digest, sglang_version, launch_command, result_json"
                f" FROM results {where} ORDER BY recorded_at, id",
                parameters,
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            raise SpecError(
                f"The results history {path} cannot be read ({exc}). Point {ENV_VAR} at a history file "
                "written by sglang-stacks, or move this one aside to start a new history."
            ) from exc
    return [
        HistoryRow(
            id=row["id"],
            stack=row["stack"],
            recorded_at=datetime.fromisoformat(row["recorded_at"]),
            flags_digest=row["flags_digest"],
            sglang_version=row["sglang_version"],
            launch_command=row["launch_command"],
            result=BenchmarkResult.model_validate_json(row["result_json"]),
        )
        for row in found
    ]


def rows(db_path: str | os.PathLike[str], stacks: Iterable[str] | None = None) -> list[HistoryRow]:
    """Every recorded result, oldest first; only those of ``stacks`` when given."""
    if stacks is None:
        return _read(db_path, "", ())
    wanted = list(stacks)
    if not wanted:
        return []
    return _read(db_path, f"WHERE stack IN ({', '.join('?' for _ in wanted)})", wanted)


def latest(db_path: str | os.PathLike[str], stack: str) -> HistoryRow | None:
    """The newest result of ``stack``, or ``None`` when it has never been benchmarked."""
    found = _read(db_path, "WHERE stack = ?", (stack,))
    return found[-1] if found else None


def format_table(history: Sequence[HistoryRow]) -> str:
    """The history as an aligned text table, one line per result."""
    header = (
        "recorded (UTC)",
        "stack",
        "sglang",
        "tok/s",
        "95 % CI",
        "accept",
        "TTFT p50 ms",
        "errors",
        "flags",
    )
    lines = [header]
    for row in history:
        result = row.result
        low, high = result.tok_s_ci95
        lines.append(
            (
                row.recorded_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M"),
                row.stack,
                row.sglang_version,
                f"{result.tok_s_mean:.1f}",
                f"{low:.1f}-{high:.1f}",
                "-" if result.accept_length is None else f"{result.accept_length:.2f}",
                "-" if result.ttft_ms is None else f"{result.ttft_ms.p50:.1f}",
                f"{result.errors}/{result.requests}",
                row.flags_digest[:12],
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    numeric = {3, 4, 5, 6, 7}
    return "\n".join(
        "  ".join(
            cell.rjust(w) if i in numeric else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in lines
    )
