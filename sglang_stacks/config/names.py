"""The one rule for environment variable names, used by the spec, the renderer and the transport."""

from __future__ import annotations

import re

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_env_name(name: str) -> bool:
    """Whether ``name`` can be an environment variable's name: letters, digits and ``_``, not
    starting with a digit."""
    return bool(_ENV_NAME.match(name))
