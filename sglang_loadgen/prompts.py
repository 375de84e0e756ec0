"""Prompts of exactly the length asked for, fresh in every run: token ids for the routes that take
them (SGLang's ``/generate`` ``input_ids``, an OpenAI completion ``prompt`` of ids), words that
are one token each for the chat route, and conversations of a ShareGPT-format file.

A run draws a random ``nonce``; every prompt's content comes from the nonce and the request's
number within the run, so no two requests of any two runs share a prefix beyond the
``prefix_share`` the workload asks for. Lengths come from the workload's ``seed``, so a random
or ShareGPT dataset sends the same lengths in every run.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .contract import LoadgenError, Workload

__all__ = ["TOKEN_ID_RANGE", "WORDS", "Conversation", "Prompt", "PromptSource", "read_sharegpt"]

TOKEN_ID_RANGE = (1000, 30000)
"""Prompt token ids are drawn from here: above the special and byte tokens every vocabulary starts
with, below the size of the smallest vocabulary in use (32k)."""

# Common short words: each, after a space, is a single token in BPE vocabularies and in the
# emulator's tokenizer; the chat route needs text, and these keep its length exact.
_WORD_TEXT = (
    "the of and to in is it that for on was with as be at by this had not are but from or have an "
    "they one you were her all she can its so said what each do how if will up out many then them "
    "some make like time has two more go see way who now long down day did get come made may part"
)
WORDS = tuple(_WORD_TEXT.split())


@dataclass(frozen=True)
class Prompt:
    """One request's prompt and how many tokens it should generate."""

    output_len: int
    ids: list[int] | None = None
    text: str | None = None
    expected_tokens: int | None = None
    """What the server must report as ``prompt_tokens``; None when only the server can count it."""


@dataclass(frozen=True)
class Conversation:
    """A ShareGPT conversation's first exchange: the prompt, and the reference answer's length."""

    prompt: str
    answer: str


SHAREGPT_SAMPLE = 1000
"""The conversations a run draws from: the first of the file's shuffle."""


def read_sharegpt(path: str, seed: int) -> list[Conversation]:
    """The file's conversations that open with a human turn answered by a model, shuffled by ``seed``.
    The file is JSON, or JSON compressed with gzip (a cluster's benchmark gets it so: `kube.dataset`)."""
    try:
        raw = Path(path).read_bytes()
        entries = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    except (OSError, EOFError, ValueError) as exc:
        raise LoadgenError(f"dataset_path {path!r} is not a readable JSON file ({exc}).") from exc
    found = []
    for entry in entries if isinstance(entries, list) else []:
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        first, second = turns[0], turns[1]
        if not (isinstance(first, dict) and isinstance(second, dict)):
            continue
        opens = first.get("from") == "human" and second.get("from") == "gpt"
        if opens and str(first.get("value", "")).strip() and str(second.get("value", "")).strip():
            found.append(Conversation(str(first["value"]), str(second["value"])))
    if not found:
        raise LoadgenError(
            f"dataset_path {path!r} holds no ShareGPT conversations: it must be a JSON list of "
            '{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}]}.'
        )
    random.Random(seed).shuffle(found)
    return found


class PromptSource:
    """Numbered prompts of one run; ``prompt(i)`` is the same for the same ``i`` within the run."""

    def __init__(
        self,
        workload: Workload,
        nonce: int,
        *,
        chat_overhead: int = 0,
        conversations: list[Conversation] | None = None,
        answer_tokens: list[int] | None = None,
    ) -> None:
        self._workload = workload
        self._nonce = nonce
        self._chat_overhead = chat_overhead
        self._conversations = conversations or []
        self._answer_tokens = answer_tokens or []
        if workload.endpoint == "chat" and workload.dataset != "sharegpt":
            shortest = (
                self._lengths(0)[0] if workload.dataset == "fixed" else _low(workload.input_len, workload)
            )
            if shortest <= chat_overhead:
                raise LoadgenError(
                    f"input_len {shortest} is not more than the {chat_overhead} tokens the chat template "
                    "adds on this server; raise input_len."
                )

    def _lengths(self, number: int) -> tuple[int, int]:
        workload = self._workload
        if workload.dataset != "random":
            return workload.input_len, workload.output_len
        rng = random.Random(f"{workload.seed}/{number}")
        return (
            rng.randint(_low(workload.input_len, workload), workload.input_len),
            rng.randint(_low(workload.output_len, workload), workload.output_len),
        )

    def prompt(self, number: int) -> Prompt:
        """The prompt of the run's ``number``-th request (warmup included)."""
        if self._workload.dataset == "sharegpt":
            return self._conversation(number)
        input_len, output_len = self._lengths(number)
        if self._workload.endpoint == "chat":
            words = self._draw(number, input_len - self._chat_overhead, WORDS)
            return Prompt(output_len, text=" ".join(words), expected_tokens=input_len)
        low, high = TOKEN_ID_RANGE
        return Prompt(
            output_len, ids=self._draw(number, input_len, range(low, high)), expected_tokens=input_len
        )

    def _draw(self, number: int, length: int, choices: Sequence[Any]) -> list[Any]:
        """``length`` items: a prefix shared by the whole run, then items of this request alone."""
        shared = min(int(self._workload.prefix_share * length), length - 1)
        head = random.Random(f"{self._nonce}/shared").choices(choices, k=shared) if shared else []
        rng = random.Random(f"{self._nonce}/{number}")
        return [*head, *rng.choices(choices, k=length - shared)]

    def _conversation(self, number: int) -> Prompt:
        index = number % len(self._conversations)
        conversation = self._conversations[index]
        # A request-specific first line keeps the prefix cache from serving a prompt sent before.
        tag = " ".join(random.Random(f"{self._nonce}/{number}").choices(WORDS, k=8))
        text = f"{tag}\n{conversation.prompt}"
        return Prompt(self._answer_tokens[index], text=text)


def _low(length: int, workload: Workload) -> int:
    return max(1, int(length * workload.range_ratio))
