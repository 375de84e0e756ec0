"""``sweep dashboard``: optuna-dashboard, the study's own web UI, served on 127.0.0.1 for one
campaign's study until Ctrl-C. It reads the study's storage live (the SQLite file in the campaign's
folder, or the database of the campaign's ``storage``), so it shows trials while a sweep runs.

optuna-dashboard 0.21.0 names as "Best Trial" the trial with the best value whether or not it met
the campaign's constraints; here the storage it reads answers with the best trial that met them
all (Optuna's own ``Study.best_trial`` rule), so the dashboard and ``sweep report`` agree.
"""

from __future__ import annotations

import socketserver
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from optuna.storages import RDBStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from sglang_stacks.campaign.model import CampaignSpec
from sglang_stacks.campaign.study import STUDY_FILE, open_storage, storage_url
from sglang_stacks.errors import SpecError
from sglang_stacks.exits import ExitCode

__all__ = ["DASHBOARD_HOST", "Dashboard", "FeasibleBestStorage", "serve_dashboard"]

DASHBOARD_HOST = "127.0.0.1"
"""Only this machine reaches the dashboard: it can also change the study (notes, trial states)."""


class FeasibleBestStorage(RDBStorage):
    """The study's storage as the dashboard reads it: its best trial is the best that met every
    constraint (a trial that missed an SLO, failed on its host or was discarded never is)."""

    def get_best_trial(self, study_id: int) -> FrozenTrial:
        directions = self.get_study_directions(study_id)
        if len(directions) != 1:
            return super().get_best_trial(study_id)  # raises: several objectives have no single best
        trials = self.get_all_trials(study_id, deepcopy=False, states=(TrialState.COMPLETE,))
        feasible = [t for t in trials if t.value is not None and all(c <= 0 for c in t.constraints.values())]
        if not feasible:
            # The dashboard asks only once a trial is complete, and has no way to show "none":
            # until one is feasible it shows the best of the rest, each marked with its constraints.
            return super().get_best_trial(study_id)
        maximize = directions[0] == StudyDirection.MAXIMIZE
        return (max if maximize else min)(feasible, key=lambda t: float(t.value or 0.0))


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    """One thread per request: the page asks for the study, its plots and its files at once."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """No line per request on stderr (the page polls the study every few seconds)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Dashboard:
    """optuna-dashboard bound to a port of 127.0.0.1 for one campaign's study; ``serve()`` runs it."""

    def __init__(self, name: str, campaign: CampaignSpec, folder: Path, port: int = 0) -> None:
        """Open the campaign's study and bind the port (0: a free one); nothing is served until
        ``serve()``. SpecError when there is no study yet, its storage cannot be opened, or the
        port cannot be bound."""
        from optuna_dashboard import wsgi

        url = storage_url(campaign, folder)
        if url.startswith("sqlite:") and not (folder / STUDY_FILE).exists():
            raise SpecError(
                f"Campaign {name} has no study yet ({folder / STUDY_FILE} does not exist). Run "
                f"`sglang-stacks sweep run {name}` first; the dashboard shows its trials as they come."
            )
        storage = open_storage(url, storage_class=FeasibleBestStorage)
        try:
            study_id = storage.get_study_id_from_name(name)
        except KeyError:
            raise SpecError(
                f"The storage of campaign {name} holds no study {name!r} yet. Run "
                f"`sglang-stacks sweep run {name}` first; the dashboard shows its trials as they come."
            ) from None
        app: Callable[..., Any] = wsgi(storage)
        try:
            self._server = make_server(
                DASHBOARD_HOST, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler
            )
        except OSError as error:
            raise SpecError(
                f"The dashboard cannot listen on {DASHBOARD_HOST}:{port} ({error.strerror}). Pick "
                f"another port with --port, e.g. `sglang-stacks sweep dashboard {name} --port {port + 1}`."
            ) from None
        self.port: int = self._server.server_address[1]
        self.url = f"http://{DASHBOARD_HOST}:{self.port}/dashboard/studies/{study_id}"
        """The study's page."""

    def serve(self) -> None:
        """Serve until ``stop()`` is called from another thread (or Ctrl-C in this one)."""
        try:
            self._server.serve_forever(poll_interval=0.2)
        finally:
            self._server.server_close()

    def stop(self) -> None:
        """End ``serve()`` from another thread."""
        self._server.shutdown()


def serve_dashboard(name: str, campaign: CampaignSpec, folder: Path, *, port: int, out: TextIO) -> int:
    """Serve the campaign's dashboard, print its URL, and run until Ctrl-C; exit code OK."""
    dashboard = Dashboard(name, campaign, folder, port)
    print(f"Dashboard of campaign {name}: {dashboard.url}", file=out)
    print("Press Ctrl-C to stop it.", file=out, flush=True)
    try:
        dashboard.serve()
    except KeyboardInterrupt:
        print("dashboard: stopped", file=out, flush=True)
    return ExitCode.OK
