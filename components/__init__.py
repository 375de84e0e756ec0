"""sglang-stacks components: the stack spec, SGLang flags, preflight and the Pulumi components.

Submodules are imported where they are used; importing the package itself has no side effects.
"""
