"""The package's build: everything is declared in pyproject.toml; this adds the start hook.

``sglang_stacks-lifetime.pth`` goes beside the package in site-packages (a regular install) or in
the editable wheel. Python runs its import line at the start of every process of that environment;
the line does nothing unless the process is one of Pulumi's dynamic-provider processes
(``python -m pulumi.dynamic <engine address>``), which then watches its engine from its first moment
and ends once the engine is gone (``sglang_stacks/hostops/lifetime.py``).
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HOOK_NAME = "sglang_stacks-lifetime.pth"
HOOK_TEXT = (
    "# sglang-stacks: a Pulumi dynamic-provider process ends once its engine is gone "
    "(sglang_stacks/hostops/lifetime.py).\n"
    'import sys; "pulumi.dynamic" in sys.orig_argv and __import__('
    '"sglang_stacks.hostops.lifetime", fromlist=["watch_provider_process"]).watch_provider_process()\n'
)


class BuildWithStartHook(build_py):
    """`build_py` that also writes the start hook where the wheel's top level is assembled."""

    def run(self) -> None:
        super().run()
        # An editable wheel is assembled from the install command's folder; a regular one from
        # build_lib (whose files go to site-packages as they are).
        root = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        Path(root, HOOK_NAME).write_text(HOOK_TEXT)


setup(cmdclass={"build_py": BuildWithStartHook})
