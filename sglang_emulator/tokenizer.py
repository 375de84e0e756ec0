"""A deterministic stand-in tokenizer: no vocabulary files, stable counts and ids.

A token is at most four non-space characters with the whitespace before them, so ``" the"``
is one token and ``" tokenizer"`` is three. Generated text uses short words only, which makes
re-tokenizing an output give back exactly its ``completion_tokens``.
"""

from __future__ import annotations

import re
import zlib

__all__ = ["GENERATED_WORDS", "count_tokens", "encode", "render_chat"]

_TOKEN = re.compile(r"\s*\S{1,4}|\s+$")

# Words of at most four letters, each one token with its leading space.
GENERATED_WORDS = (
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "was",
    "with",
    "as",
    "be",
    "at",
    "by",
    "this",
    "had",
    "not",
    "are",
    "but",
    "from",
    "or",
    "have",
    "an",
    "they",
    "one",
    "you",
    "were",
    "her",
    "all",
    "she",
    "can",
    "its",
    "so",
    "said",
    "what",
    "each",
    "do",
    "how",
    "if",
    "will",
    "up",
    "out",
    "many",
    "then",
    "them",
    "some",
    "make",
    "like",
    "time",
    "has",
    "two",
    "more",
    "go",
    "see",
    "way",
    "who",
    "now",
    "long",
    "down",
    "day",
    "did",
    "get",
    "come",
    "made",
    "may",
    "part",
    "over",
    "new",
    "take",
    "only",
    "work",
    "know",
    "year",
    "live",
    "back",
    "give",
    "most",
    "very",
    "name",
    "good",
    "well",
    "also",
    "just",
    "form",
    "much",
    "help",
    "line",
    "turn",
    "same",
    "tell",
    "mean",
    "move",
    "real",
    "left",
    "end",
    "does",
    "off",
)


def encode(text: str, vocab_size: int) -> list[int]:
    """Token ids of ``text``: a stable hash of each piece into ``[0, vocab_size)``."""
    return [zlib.crc32(piece.encode()) % vocab_size for piece in _TOKEN.findall(text)]


def count_tokens(text: str) -> int:
    """How many tokens ``encode`` would return."""
    return len(_TOKEN.findall(text))


def render_chat(messages: list[dict[str, object]]) -> str:
    """A fixed chat template: each message as ``<|role|>content`` on its own line."""
    parts = [f"<|{m.get('role', 'user')}|>{_content_text(m.get('content'))}\n" for m in messages]
    return "".join(parts) + "<|assistant|>"


def _content_text(content: object) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)
