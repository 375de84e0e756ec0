"""SGLang's native ``/generate`` route, and the steps of a generation the OpenAI routes share: the
fault gate, a request's admission, its stream of chunks and its ``meta_info``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

from sglang_emulator.engine import Chunk, Request
from sglang_emulator.http_common import BadRequest, InputRefused, sse
from sglang_emulator.http_plumbing import HandlerPlumbing
from sglang_emulator.pd_worker import await_handoff, pair_request
from sglang_emulator.tokenizer import encode

__all__ = ["GenerateRoute"]

_DEFAULT_MAX_NEW_TOKENS = 128


class GenerateRoute(HandlerPlumbing):
    """The handler's ``/generate`` route and the generation steps every generating route uses."""

    def _fault_gate(self) -> bool:
        context = self.server.context
        number = context.next_generation_number()
        context.on_generation_received(number)
        if context.faults.is_error_burst(number):
            status = context.faults.error_burst_status
            self._error(
                status,
                f"Internal server error (sglang-emulator injected fault: error burst, request {number}).",
            )
            return False
        return True

    def _new_request(
        self, prompt_ids: list[int], max_new_tokens: Any, rid: str | None, body: dict[str, Any] | None = None
    ) -> Request:
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise BadRequest(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}.")
        context_len = self.server.context.config.context_length
        if len(prompt_ids) + max_new_tokens > context_len:
            raise BadRequest(
                f"Requested token count exceeds the model's maximum context length of {context_len} tokens. "
                f"You requested a total of {len(prompt_ids) + max_new_tokens} tokens: {len(prompt_ids)} "
                f"tokens from the input and {max_new_tokens} tokens for the completion. Reduce either."
            )
        problem = self.server.context.engine.input_problem(len(prompt_ids))
        if problem is not None:
            raise InputRefused(problem)
        request = Request(
            rid=rid or uuid.uuid4().hex,
            prompt_ids=prompt_ids,
            max_new_tokens=max_new_tokens,
            created_s=self.received_s,
        )
        mode = self.server.context.config.disaggregation_mode
        if mode != "null":
            pair_request(self.server.context, request, body or {}, mode)
        self.server.context.engine.submit(request)
        return request

    def _prompt_ids(self, text: Any, input_ids: Any) -> list[int]:
        vocab = self.server.context.profile.model.vocab_size
        if isinstance(text, str):
            return encode(text, vocab)
        if isinstance(input_ids, list) and input_ids and all(isinstance(i, int) for i in input_ids):
            outside = [i for i in input_ids if not 0 <= i < vocab]
            if outside:
                raise BadRequest(
                    f"Token id {outside[0]} is outside the vocabulary (0 to {vocab - 1}); send ids the "
                    "model's tokenizer produces."
                )
            return list(input_ids)
        raise BadRequest("Give the prompt as 'text' (a string) or 'input_ids' (a list of integers).")

    def _chunks(self, request: Request) -> Iterator[Chunk]:
        try:
            while True:
                chunk = request.chunks.get()
                if chunk.finished:
                    await_handoff(self.server.context, request)
                yield chunk
                if chunk.finished:
                    return
        finally:
            if request.finished_s is None:
                request.aborted = True

    def _meta(self, request: Request, finished: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": request.rid,
            "finish_reason": {"type": "length", "length": self._finish_length(request)} if finished else None,
            "prompt_tokens": len(request.prompt_ids),
            "weight_version": "default",
            "completion_tokens": request.completion_tokens,
            "cached_tokens": request.cached_tokens,
        }
        if self.server.context.config.speculative is not None:
            meta["spec_verify_ct"] = request.spec_verify_ct
        if finished and request.finished_s is not None:
            meta["e2e_latency"] = request.finished_s - request.created_s
        return meta

    def _finish_length(self, request: Request) -> int:
        # A prefill worker's request ends as SGLang's FINISH_LENGTH(length=0): its one token is the
        # decode worker's first.
        return 0 if request.handoff_room is not None else request.max_new_tokens

    def _finished(self) -> None:
        self.server.context.on_generation_finished()

    def _generate(self) -> None:
        body = self._body()
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise BadRequest("sampling_params must be an object.")
        max_new = params.get("max_new_tokens", _DEFAULT_MAX_NEW_TOKENS)
        texts = body.get("text")
        if isinstance(texts, list):
            if body.get("stream"):
                raise BadRequest(
                    "The emulator streams one prompt per request; send a string 'text' to stream."
                )
            if not self._fault_gate():
                return
            requests = [self._new_request(self._prompt_ids(t, None), max_new, None) for t in texts]
            for request in requests:
                for _ in self._chunks(request):
                    pass
            self._json(200, [self._generate_payload(r) for r in requests])
            self._finished()
            return
        prompt = self._prompt_ids(texts, body.get("input_ids"))
        if not self._fault_gate():
            return
        try:
            request = self._new_request(prompt, max_new, body.get("rid"), body)
        except InputRefused as refused:
            if not body.get("stream"):
                raise
            self._stream(self._aborted_events(body.get("rid"), len(prompt), str(refused)))
            return
        if body.get("stream"):
            self._stream(self._generate_events(request))
        else:
            for _ in self._chunks(request):
                pass
            self._json(200, self._generate_payload(request))
        self._finished()

    def _generate_payload(self, request: Request) -> dict[str, Any]:
        """The non-streaming reply of a finished request."""
        return {
            "text": request.output_text,
            "output_ids": request.output_ids,
            "meta_info": self._meta(request, True),
        }

    def _aborted_events(self, rid: Any, prompt_tokens: int, message: str) -> Iterator[bytes]:
        """The stream of a request the scheduler aborted before it ran."""
        finish = {"type": "abort", "message": message, "status_code": 400}
        meta = {"id": rid or uuid.uuid4().hex, "finish_reason": finish, "prompt_tokens": prompt_tokens}
        yield sse({"text": "", "output_ids": [], "meta_info": {**meta, "completion_tokens": 0}})
        yield b"data: [DONE]\n\n"

    def _generate_events(self, request: Request) -> Iterator[bytes]:
        # SGLang streams the whole output so far in every chunk, or only the new part with
        # --incremental-streaming-output (--stream-output before 0.5.13); completion_tokens in
        # meta_info counts the whole output either way.
        args = self.server.context.config.server_args
        incremental = bool(args.get("incremental_streaming_output") or args.get("stream_output"))
        text = ""
        count = 0
        for chunk in self._chunks(request):
            text = chunk.new_text if incremental else text + chunk.new_text
            start = count if incremental else 0
            count += len(chunk.new_token_ids)
            meta = self._meta(request, chunk.finished)
            meta["completion_tokens"] = count
            yield sse({"text": text, "output_ids": request.output_ids[start:count], "meta_info": meta})
        yield b"data: [DONE]\n\n"
