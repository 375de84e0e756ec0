"""The JSON Schemas' field descriptions, read from the docstring under each field.

pydantic can read these docstrings itself (``use_attribute_docstrings``), but it reads them while it
builds each model class, from the module's source: about 0.13 s of every program run, although only
the JSON Schemas (``sglang-stacks schema``, the committed ``schema.json`` files, the messages of a
config with problems) use them. A model whose config has ``json_schema_extra=describe_fields``
has them read when its schema is generated instead; ``FileSection`` is the base of such models.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict

from sglang_stacks.shape import Shape


@cache
def attribute_docstrings(cls: type) -> dict[str, str]:
    """``{field: docstring}`` of the fields (or enum members) ``cls`` declares itself, each
    docstring cleaned as Python cleans a function's."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source (an interactive class): no descriptions
        return {}
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    found: dict[str, str] = {}
    for statement, following in zip(body.body, body.body[1:], strict=False):
        if not (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            continue
        # A field (``name: type = ...``), or an enum's member (``NAME = value``).
        targets: list[ast.expr] = [statement.target] if isinstance(statement, ast.AnnAssign) else []
        targets += statement.targets if isinstance(statement, ast.Assign) else []
        if len(targets) == 1 and isinstance(targets[0], ast.Name):
            found[targets[0].id] = inspect.cleandoc(following.value.value)
    return found


def describe_fields(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    """Adds each field's docstring to its property in ``cls``'s schema, unless the field has a
    ``description`` of its own (pydantic's ``json_schema_extra`` hook)."""
    properties: dict[str, dict[str, Any]] = schema.get("properties", {})
    for name, field in cls.model_fields.items():
        owner = next((base for base in cls.__mro__ if name in base.__dict__.get("__annotations__", {})), cls)
        docstring = attribute_docstrings(owner).get(name)
        for key in {name, field.alias or name}:
            if docstring and key in properties and "description" not in properties[key]:
                properties[key]["description"] = docstring


class FileSection(Shape):
    """A section of a file a person writes (a stack file, a campaign file): frozen, every unknown key
    refused, each field's docstring its description in the JSON Schema."""

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra=describe_fields)
