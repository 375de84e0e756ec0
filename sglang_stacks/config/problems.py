"""How a stack file's problems are said: each names its key path (``sglang-stacks:server.tp_size``),
the value, what is allowed and the fix, from the JSON Schema's or pydantic's complaint."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from sglang_stacks.config.sections import CONFIG_NAMESPACE

if TYPE_CHECKING:
    import jsonschema

__all__ = ["pydantic_problem", "schema_problem"]


def _key_path(parts: list[Any] | tuple[Any, ...]) -> str:
    if not parts:
        return CONFIG_NAMESPACE
    head, *rest = parts
    path = f"{CONFIG_NAMESPACE}:{head}"
    for part in rest:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _properties_at(schema: dict[str, Any], node: dict[str, Any]) -> list[str]:
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return list(node.get("properties", {}))


def schema_problem(error: jsonschema.ValidationError, schema: dict[str, Any]) -> str:
    """One schema complaint as the sentence that names the key and the fix (unknown keys with the
    nearest allowed one)."""
    parts = list(error.absolute_path)
    path = _key_path(parts)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = _properties_at(schema, error.schema if isinstance(error.schema, dict) else {})
        lines = []
        for key in sorted(set(error.instance) - set(allowed)):
            near = difflib.get_close_matches(key, allowed, n=2)
            fix = f"did you mean {' or '.join(near)}?" if near else f"allowed keys: {', '.join(allowed)}."
            lines.append(f"{_key_path([*parts, key])}: unknown key. Remove it or rename it: {fix}")
        return "\n".join(lines)
    if error.validator == "required":
        return f"{path}: {error.message}. Add it."
    if error.validator == "anyOf" and error.context:
        # "X or null" and unions: all type mismatches list the types; otherwise report the
        # complaint of the alternative that matched the type.
        if all(e.validator == "type" for e in error.context):
            types = " or ".join(str(e.validator_value) for e in error.context if e.validator_value != "null")
            return _not_allowed(path, error.instance, types)
        return schema_problem(next(e for e in error.context if e.validator != "type"), schema)
    return _not_allowed(path, error.instance, _expected(error))


def _not_allowed(path: str, value: object, expected: str) -> str:
    return f"{path}: {value!r} is not allowed; expected {expected}. Change the value in the stack file."


def _expected(error: jsonschema.ValidationError) -> str:
    limit: Any = error.validator_value
    match error.validator:
        case "type":
            return f"a value of type {limit}"
        case "enum":
            return f"one of {', '.join(str(v) for v in limit)}"
        case "minimum":
            return f"at least {limit}"
        case "maximum":
            return f"at most {limit}"
        case "exclusiveMinimum":
            return f"more than {limit}"
        case "exclusiveMaximum":
            return f"less than {limit}"
        case "pattern":
            return f"text matching {limit}"
        case "minLength":
            return f"at least {limit} characters"
        case "minItems":
            return f"at least {limit} items"
    return error.message


def pydantic_problem(error: Any) -> str:
    """One pydantic complaint (a rule of the spec's models) with its key path and value."""
    parts = [p for p in error["loc"] if p != "__root__"]
    path = _key_path(parts)
    message = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    shown = "" if isinstance(value, dict) else f" (value {value!r})"
    return f"{path}{shown}: {message}."
