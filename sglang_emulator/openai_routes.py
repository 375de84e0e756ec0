"""The emulator's OpenAI-compatible routes, as SGLang serves them: ``/v1/completions`` (a text
prompt or a list of token ids) and ``/v1/chat/completions``, whole or streamed as deltas."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sglang_emulator.engine import Request
from sglang_emulator.http_common import BadRequest, sse
from sglang_emulator.tokenizer import encode, render_chat

if TYPE_CHECKING:
    from sglang_emulator.generate_route import GenerateRoute

_DEFAULT_OPENAI_MAX_TOKENS = 16
_DEFAULT_CHAT_MAX_TOKENS = 1024


def _openai_request(
    handler: GenerateRoute, body: dict[str, Any], prompt_text: str, default_max: int
) -> Request:
    ids = encode(prompt_text, handler.server.context.profile.model.vocab_size)
    return _openai_ids_request(handler, body, ids, default_max)


def _openai_ids_request(
    handler: GenerateRoute, body: dict[str, Any], ids: list[int], default_max: int
) -> Request:
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or default_max
    return handler._new_request(ids, max_tokens, None, body)


def _usage(handler: GenerateRoute, request: Request) -> dict[str, Any]:
    prompt = len(request.prompt_ids)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": request.completion_tokens,
        "total_tokens": prompt + request.completion_tokens,
        "prompt_tokens_details": None,
    }


def completions(handler: GenerateRoute) -> None:
    body = handler._body()
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, list):
        # A prompt of token ids, as the OpenAI API allows and SGLang serves.
        ids = handler._prompt_ids(None, prompt)
    elif isinstance(prompt, str):
        ids = encode(prompt, handler.server.context.profile.model.vocab_size)
    else:
        raise BadRequest(
            "'prompt' must be a string or a list of token ids (the emulator serves one prompt per request)."
        )
    if not handler._fault_gate():
        return
    request = _openai_ids_request(handler, body, ids, _DEFAULT_OPENAI_MAX_TOKENS)
    _openai_reply(handler, body, request, chat=False)


def chat_completions(handler: GenerateRoute) -> None:
    body = handler._body()
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages) or not messages:
        raise BadRequest("'messages' must be a non-empty list of {role, content} objects.")
    if not handler._fault_gate():
        return
    request = _openai_request(handler, body, render_chat(messages), _DEFAULT_CHAT_MAX_TOKENS)
    _openai_reply(handler, body, request, chat=True)


def _openai_reply(handler: GenerateRoute, body: dict[str, Any], request: Request, chat: bool) -> None:
    context = handler.server.context
    ident = ("chatcmpl-" if chat else "cmpl-") + request.rid
    created = int(time.time())
    model = context.config.served_model_name
    if not body.get("stream"):
        for _ in handler._chunks(request):
            pass
        choice: dict[str, Any] = {
            "index": 0,
            "logprobs": None,
            "finish_reason": "length",
            "matched_stop": None,
        }
        if chat:
            choice["message"] = {
                "role": "assistant",
                "content": request.output_text,
                "reasoning_content": None,
                "tool_calls": None,
            }
        else:
            choice["text"] = request.output_text
        handler._json(
            200,
            {
                "id": ident,
                "object": "chat.completion" if chat else "text_completion",
                "created": created,
                "model": model,
                "choices": [choice],
                "usage": _usage(handler, request),
            },
        )
        handler._finished()
        return
    options = body.get("stream_options") or {}
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    handler._stream(_openai_events(handler, request, chat, ident, created, model, include_usage))
    handler._finished()


def _openai_events(
    handler: GenerateRoute,
    request: Request,
    chat: bool,
    ident: str,
    created: int,
    model: str,
    include_usage: bool,
) -> Iterator[bytes]:
    kind = "chat.completion.chunk" if chat else "text_completion"

    def event(choice: dict[str, Any]) -> bytes:
        return sse(
            {
                "id": ident,
                "object": kind,
                "created": created,
                "model": model,
                "choices": [choice],
                "usage": None,
            }
        )

    if chat:
        yield event(
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
                "matched_stop": None,
            }
        )
    for chunk in handler._chunks(request):
        reason = "length" if chunk.finished else None
        if chat:
            yield event(
                {
                    "index": 0,
                    "delta": {"content": chunk.new_text},
                    "logprobs": None,
                    "finish_reason": reason,
                    "matched_stop": None,
                }
            )
        else:
            yield event(
                {
                    "index": 0,
                    "text": chunk.new_text,
                    "logprobs": None,
                    "finish_reason": reason,
                    "matched_stop": None,
                }
            )
    if include_usage:
        yield sse(
            {
                "id": ident,
                "object": kind,
                "created": created,
                "model": model,
                "choices": [],
                "usage": _usage(handler, request),
            }
        )
    yield b"data: [DONE]\n\n"
