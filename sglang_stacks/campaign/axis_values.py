"""The values a campaign's axes give their keys, checked against the stack field each sets before
anything is made: ``values: [128, "lots"]`` for ``server.cuda_graph_max_bs`` would otherwise
make an invalid stack of every candidate with "lots", discarded one by one as the search met them.
Each value is validated as the stack file's own field (its type and limits); ``auto`` and null leave
the key unset and are always allowed. Launch flags under ``server.extra_flags`` are the release's,
typed by its own parser when the candidate is judged."""

from __future__ import annotations

import typing
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import TypeAdapter, ValidationError

from sglang_stacks.campaign.axis_keys import field_path, field_types, refuse_listed
from sglang_stacks.campaign.model import CampaignSpec

__all__ = ["check_axis_values"]


def check_axis_values(campaign: CampaignSpec) -> None:
    """SpecError naming every axis value its key's field refuses, with what is allowed."""
    problems = [
        f"{where}: {value!r} is not allowed for {key}: {why}"
        for where, key, value in _values(campaign)
        if (why := _refusal(key, value)) is not None
    ]
    refuse_listed(
        problems,
        f"The campaign gives {len(problems)} value(s) that no stack takes, so their candidates would be "
        "invalid stacks",
        "Fix the value in the campaign file; nothing was created.",
    )


def _values(campaign: CampaignSpec) -> Iterable[tuple[str, str, Any]]:
    for index, axis in enumerate(campaign.axes):
        if axis.key is not None:
            for position, value in enumerate(axis.values or ()):
                yield f"axes.{index}.values[{position}]", axis.key, value
        for key, values in (axis.zip or {}).items():
            for position, value in enumerate(values):
                yield f"axes.{index}.zip {key}[{position}]", key, value


def _refusal(key: str, value: Any) -> str | None:
    if value is None or value == "auto":
        return None
    adapter = _adapter(key)
    if adapter is None:
        return None
    try:
        adapter.validate_python(value)
    except ValidationError as error:
        return "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in error.errors())
    return None


def _adapter(key: str) -> TypeAdapter[Any] | None:
    """The validator of what the stack field at ``key`` holds; None for a key typed elsewhere."""
    found = field_path(key)
    if found is None:
        return None
    model, field, rest = found
    info = model.model_fields[field]
    if not rest:
        limits = info.metadata  # ge, le, ...: validated with the type
        return TypeAdapter(Annotated[(info.annotation, *limits)] if limits else info.annotation)
    if len(rest) == 1:  # a key of a mapping field (environment.env.NCCL_ALGO): its values' type
        mapping = [a for a in field_types(model, field) if typing.get_origin(a) is dict]
        if mapping:
            return TypeAdapter(typing.get_args(mapping[0])[1])
    return None
