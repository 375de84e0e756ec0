"""The Automation API's workspace and command runner as this tool drives them (`automation`'s
operations open every stack through them): the project folder's workspace, left as the user had it,
that reads outputs and states without decrypting secrets; and the `pulumi` on PATH, its version
checked once a process, retrying a read that met an update's checkpoint mid-write, and run with the
garbage collection that suits a process of a second (`GO_RUNTIME`)."""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Mapping
from typing import Any

from pulumi import automation as auto

__all__ = ["GO_RUNTIME", "TORN_READ", "Command", "UsersWorkspace", "cli", "go_runtime"]

GO_RUNTIME = {"GOGC": "off", "GOMEMLIMIT": "256MiB"}
"""How the `pulumi` processes this tool runs collect their garbage. Most live a second or less, and
with Go's default (a collection each time the heap doubles, from 4 MB) a third of their CPU went to
collecting what the CLI's package initialisation allocates (docs/performance.md). With these, a
process collects only once its heap nears 256 MiB: a read or a small stack's update never does, and
a long update's memory stays bounded."""


def go_runtime(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`GO_RUNTIME`, unless ``env`` (default: this process's environment) sets either variable: a
    user's own Go settings are left as they are."""
    given = os.environ if env is None else env
    return {} if any(name in given for name in GO_RUNTIME) else dict(GO_RUNTIME)


_SECRET = "[secret]"
"""What `pulumi stack output --json` prints for a secret output."""


class UsersWorkspace(auto.LocalWorkspace):
    """The project folder's workspace, left as the user had it: the Automation API's own opens a
    stack with `pulumi stack select` (and creates one with `pulumi stack init`, which selects it
    too), after which a bare `pulumi up` typed in that folder deploys the stack a companion command
    last read, and takes the host over. Each operation of a ``Stack`` names its stack itself
    (``--stack``), so none needs the selection: opening one only checks that it exists."""

    checks_stack = True
    """Whether opening a stack asks the CLI that it is there (``stack --show-name``). A reader whose
    own command says so when it is not (Pulumi's "no stack named", `auto.StackNotFoundError`)
    opens without asking: one CLI process, a third of a CPU-second, less."""

    def select_stack(self, stack_name: str) -> None:
        if self.checks_stack:
            self._pulumi("stack", "--show-name", "--stack", stack_name)

    def create_stack(self, stack_name: str) -> None:
        secrets = ["--secrets-provider", self.secrets_provider] if self.secrets_provider else []
        self._pulumi("stack", "init", stack_name, "--no-select", *secrets)

    def stack_outputs(self, stack_name: str) -> auto.OutputMap:
        """The outputs as `pulumi stack output --json` prints them, secrets ``[secret]``: what every
        reader here takes (``outputs_of``). The Automation API's own runs the command twice, once
        with ``--show-secrets`` to learn which are secret: a second CLI process (about half a
        CPU-second) for each read and each update, decrypting what no reader shows."""
        done = self._pulumi("stack", "output", "--json", "--stack", stack_name)
        masked: dict[str, Any] = json.loads(done.stdout)
        return {key: auto.OutputValue(value, secret=value == _SECRET) for key, value in masked.items()}

    def export_stack(self, stack_name: str) -> auto.Deployment:
        """The state as `pulumi stack export` prints it, secrets encrypted: the Automation API's own
        exports with ``--show-secrets``, decrypting into memory what no reader here shows."""
        done = self._pulumi("stack", "export", "--stack", stack_name)
        state = json.loads(done.stdout)
        return auto.Deployment(version=state.get("version"), deployment=state.get("deployment"))

    def _pulumi(self, *args: str) -> auto.CommandResult:
        return self.pulumi_command.run(list(args), self.work_dir, self._env())

    def _env(self) -> dict[str, str]:
        env = {"PULUMI_HOME": self.pulumi_home} if self.pulumi_home else {}
        return {**env, **self.env_vars}


# What a read of a stack says when it met the state file's attributes mid-write: the local backend
# rewrites ``<stack>.json.attrs`` in place (truncate, then write) at each checkpoint of an update.
TORN_READ = "failed to load checkpoint: EOF"
_READS = frozenset({"stack", "config"})  # `stack --show-name`, `stack output`, `config`: no writes before
_RETRY_S = (0.05, 0.1, 0.2, 0.4, 0.8)


class Command(auto.PulumiCommand):
    """The Automation API's command runner, with a read of a stack that met an update's checkpoint
    mid-write (``sglang-stacks logs -f`` or ``status`` while ``pulumi up`` runs) read again."""

    def run(
        self, args: list[str], cwd: str, additional_env: Mapping[str, str], *rest: Any, **kwargs: Any
    ) -> auto.CommandResult:
        env = {**go_runtime({**os.environ, **additional_env}), **additional_env}
        for pause in _RETRY_S:
            try:
                return super().run(list(args), cwd, env, *rest, **kwargs)  # it prepends to the list it gets
            except auto.CommandError as error:
                if not _READS.intersection(args[:1]) or TORN_READ not in str(error):
                    raise
            time.sleep(pause)
        return super().run(list(args), cwd, env, *rest, **kwargs)


@functools.cache
def cli() -> auto.PulumiCommand:
    """The `pulumi` on PATH, its version checked once a process: the Automation API runs `pulumi
    version` for every workspace it opens, and a campaign opens two a trial."""
    return Command()
