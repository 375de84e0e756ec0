"""Reading a profile: a shipped one by name or a JSON file, into the checked ``Profile``.

A profile is a JSON file (``SGLANG_EMULATOR_PROFILE=<path>``, or the shipped default) read into
frozen dataclasses; a missing, unknown or mistyped key is an error that names it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from pathlib import Path
from typing import Any

from sglang_emulator.profile import Profile, ProfileError

__all__ = ["DEFAULT_PROFILE", "load_profile", "shipped_profiles"]

DEFAULT_PROFILE = "rtx-pro-6000-x8-kimi-k2.5-int4"
# The package is always installed as files (it is copied into a host's virtualenv); read beside this
# module, not through importlib.resources, whose import cost the nvidia-smi stand-in 9 of its 72 ms.
_SHIPPED = Path(__file__).resolve().parent / "profiles"


def shipped_profiles() -> list[str]:
    """Names of the profiles shipped in the package."""
    return sorted(p.name.removesuffix(".json") for p in _SHIPPED.iterdir() if p.name.endswith(".json"))


def load_profile(path: str | None = None) -> Profile:
    """Read ``path``, else ``$SGLANG_EMULATOR_PROFILE``, else the shipped default.

    A bare name (no ``/`` and no ``.json``) selects a shipped profile.
    """
    chosen = path or os.environ.get("SGLANG_EMULATOR_PROFILE") or DEFAULT_PROFILE
    if "/" not in chosen and not chosen.endswith(".json"):
        if chosen not in shipped_profiles():
            raise ProfileError(
                f"There is no shipped emulator profile named {chosen!r}; shipped: "
                f"{', '.join(shipped_profiles())}. Pass one of them or a path to a JSON profile."
            )
        text = (_SHIPPED / f"{chosen}.json").read_text()
        source = f"shipped:{chosen}"
    else:
        try:
            text = Path(chosen).expanduser().read_text()
        except OSError as exc:
            raise ProfileError(
                f"Cannot read the emulator profile {chosen!r}: {exc.strerror}. "
                "Point SGLANG_EMULATOR_PROFILE at an existing JSON file."
            ) from exc
        source = chosen
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProfileError(
            f"The emulator profile {chosen!r} is not valid JSON ({exc}). Fix the file's syntax."
        ) from exc
    profile: Profile = _build(Profile, {k: v for k, v in raw.items() if k != "source"}, "")
    return dataclasses.replace(profile, source=source)


def _build(cls: type[Any], raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        raise ProfileError(
            f"Profile key {where or '<top>'!r} must be an object, got {raw!r}. Fix the profile."
        )
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "source"}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ProfileError(
            f"Profile key {_join(where, unknown[0])!r} is unknown; allowed under "
            f"{where or '<top>'!r}: {', '.join(sorted(fields))}. Remove or rename it."
        )
    values: dict[str, Any] = {}
    for name, spec in fields.items():
        key = _join(where, name)
        if name not in raw:
            no_default = spec.default is dataclasses.MISSING and spec.default_factory is dataclasses.MISSING
            if no_default:
                raise ProfileError(
                    f"Profile key {key!r} is missing. Add it (see the shipped default profile)."
                )
            continue
        values[name] = _convert(hints[name], raw[name], key)
    return cls(**values)


def _convert(hint: Any, value: Any, key: str) -> Any:
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _build(hint, value, key)
    origin = typing.get_origin(hint)
    if origin is list:
        (item,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise ProfileError(f"Profile key {key!r} must be a list, got {value!r}. Fix the profile.")
        return [_convert(item, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict or origin in (types.UnionType, typing.Union):
        return value
    ok = {
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
        bool: isinstance(value, bool),
    }.get(hint, True)
    if not ok:
        raise ProfileError(
            f"Profile key {key!r} must be {getattr(hint, '__name__', hint)}, got {value!r}. Fix the profile."
        )
    return float(value) if hint is float else value


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name
