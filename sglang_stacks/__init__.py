"""sglang-stacks: each SGLang server configuration is a Pulumi stack.

The package has four rooms:

- ``sglang_stacks.config``: the stack spec, typed SGLang flags, the memory planner, preflight;
- ``sglang_stacks.hostops``: what runs on a GPU host (transport, claim, probe, server process,
  the load generator);
- ``sglang_stacks.results``: statistics, history, compare, gate, promote, plots;
- ``sglang_stacks.components``: the Pulumi resources, built on the three rooms above.

Beside them, ``sglang_stacks.drive`` drives Pulumi across stacks (``rollout``, ``recover``) through
its Automation API; ``sglang_stacks.campaign`` sweeps a search space of stacks over a pool of hosts
through it (``sweep``); ``sglang_stacks.project`` finds the project's folders; and
``sglang_stacks.cli`` is the ``sglang-stacks`` command.

Importing the package has no side effects and imports none of its rooms: another Pulumi program
imports what it uses, e.g. ``from sglang_stacks.components import SGLangDeployment``.
"""
