"""The project's components, as the package ``sglang_stacks.components`` defines them.

This folder keeps one promise: stacks deployed by earlier versions of sglang-stacks pickled their
dynamic providers into the state by reference to modules of this folder (``components.server``,
...). Those modules stay here, naming the current providers, so that ``refresh``, ``preview`` and
``destroy`` of such stacks keep working. New code imports from ``sglang_stacks``.
"""
