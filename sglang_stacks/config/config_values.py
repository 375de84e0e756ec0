"""Config values read as the schema's type: `pulumi config set --path` stores every value it is
given as a string (``mem_fraction_static: "0.85"``), so a string where the stack's JSON Schema
allows a number, an integer or a boolean and no string is read as that type, before validation.

A string the schema also allows (a path, a release, ``extra_flags``' free values) stays as it is;
one that reads as no allowed type stays too, and validation names its key."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

_INTEGER = re.compile(r"[+-]?\d+")
_BOOLEANS = {"true": True, "false": False}


def typed_as_schema(value: Any, node: Mapping[str, Any], schema: Mapping[str, Any]) -> Any:
    """``value`` with each string read as the type that ``node`` (a part of ``schema``, whose
    ``$defs`` its references name) allows for it, in sections, lists and nested sections alike."""
    alternatives = _alternatives(node, schema)
    if isinstance(value, str):
        return _read_string(value, {alt.get("type") for alt in alternatives})
    if isinstance(value, Mapping):
        return {
            key: typed_as_schema(item, _property(alternatives, key), schema) for key, item in value.items()
        }
    if isinstance(value, list):
        items: Mapping[str, Any] = next(
            (alt["items"] for alt in alternatives if isinstance(alt.get("items"), Mapping)), {}
        )
        return [typed_as_schema(item, items, schema) for item in value]
    return value


def _alternatives(node: Mapping[str, Any], schema: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The schemas a value at ``node`` may match, references resolved and unions flattened."""
    if "$ref" in node:
        return _alternatives(schema["$defs"][node["$ref"].rsplit("/", 1)[-1]], schema)
    for union in ("anyOf", "oneOf"):
        if union in node:
            return [alt for option in node[union] for alt in _alternatives(option, schema)]
    return [node]


def _property(alternatives: list[Mapping[str, Any]], key: str) -> Mapping[str, Any]:
    for alt in alternatives:
        found = alt.get("properties", {}).get(key, alt.get("additionalProperties"))
        if isinstance(found, Mapping):
            return found
    return {}


def _read_string(text: str, types: set[Any]) -> Any:
    if "string" in types or None in types:
        return text  # the schema takes text here (or says nothing of the type)
    stripped = text.strip()
    if "integer" in types and _INTEGER.fullmatch(stripped):
        return int(stripped)
    if "number" in types:
        try:
            number = float(stripped)
        except ValueError:
            return text
        return number if math.isfinite(number) else text
    if "boolean" in types and stripped.lower() in _BOOLEANS:
        return _BOOLEANS[stripped.lower()]
    return text
