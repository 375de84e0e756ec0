"""Where stacks deployed before the `sglang_stacks` package find their draft_model provider."""

from sglang_stacks.components.draft_model import DraftModelProvider as _DraftModelProvider

__all__ = ["_DraftModelProvider"]
