"""The emulator's informational routes, as SGLang serves them: model and server info, the load
the router reads, the prefix-cache flush, Prometheus metrics and the OpenAI model list."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_emulator.metrics import render_metrics

if TYPE_CHECKING:
    from sglang_emulator.generate_route import GenerateRoute


def model_info(handler: GenerateRoute) -> None:
    context = handler.server.context
    handler._json(
        200,
        {
            "model_path": context.config.model_path,
            "tokenizer_path": context.config.server_args.get("tokenizer_path"),
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": context.profile.model.model_type,
            "architectures": [context.profile.model.architecture],
        },
    )


def server_info(handler: GenerateRoute) -> None:
    handler._json(200, handler.server.context.server_info())


def get_load(handler: GenerateRoute) -> None:
    # SGLang's /get_load: one entry per data-parallel rank (the emulator has one).
    context = handler.server.context
    stats = context.engine.stats
    handler._json(
        200,
        [
            {
                "dp_rank": 0,
                "num_reqs": context.in_flight,
                "num_waiting_reqs": stats.queued,
                "num_tokens": context.engine.scheduler.used,
            }
        ],
    )


def flush_cache(handler: GenerateRoute) -> None:
    handler._body()
    if not handler.server.context.engine.flush_cache():
        message = "Cache not flushed: requests are running or waiting. Retry when the server is idle.\n"
        handler._send(400, message.encode(), "text/plain")
        return
    message = (
        "Cache flushed.\nPlease check backend logs for more details. "
        "(When there are running or waiting requests, the operation will not be performed.)\n"
    )
    handler._send(200, message.encode(), "text/plain")


def metrics(handler: GenerateRoute) -> None:
    context = handler.server.context
    if not context.config.enable_metrics:
        handler._json(404, {"detail": "Not Found"})
        return
    stats = context.engine.stats
    gauges = {
        "sglang:num_running_reqs": ("The number of running requests.", stats.running),
        "sglang:num_queue_reqs": ("The number of requests in the waiting queue.", stats.queued),
        "sglang:gen_throughput": ("The generation throughput (token/s).", stats.last_gen_throughput),
        "sglang:token_usage": ("The token usage.", context.engine.token_usage()),
        "sglang:num_used_tokens": ("The number of used tokens.", context.engine.scheduler.used),
        "sglang:new_token_ratio": ("The new token ratio.", context.engine.scheduler.ratio.current),
        "sglang:spec_accept_length": (
            "The average acceptance length of speculative decoding.",
            stats.avg_spec_accept_length,
        ),
        "sglang:max_total_num_tokens": (
            "Maximum total tokens in the KV cache.",
            context.plan.max_total_num_tokens,
        ),
    }
    counters = {
        "sglang:prompt_tokens_total": ("Number of prefill tokens processed.", stats.prompt_tokens_total),
        "sglang:generation_tokens_total": (
            "Number of generation tokens processed.",
            stats.generation_tokens_total,
        ),
        "sglang:cached_tokens_total": ("Number of cached prompt tokens.", stats.cached_tokens_total),
        "sglang:num_requests_total": ("Number of requests processed.", stats.requests_total),
        "sglang:num_retracted_requests_total": (
            "Total number of retracted requests.",
            stats.retracted_requests_total,
        ),
        "sglang:num_retracted_input_tokens_total": (
            "Total number of retracted input tokens.",
            stats.retracted_input_tokens_total,
        ),
        "sglang:num_retracted_output_tokens_total": (
            "Total number of retracted output tokens.",
            stats.retracted_output_tokens_total,
        ),
    }
    histograms = {
        "sglang:time_to_first_token_seconds": (
            "Histogram of time to first token in seconds.",
            stats.ttft,
        ),
        "sglang:e2e_request_latency_seconds": (
            "Histogram of End-to-end request latency in seconds",
            stats.e2e,
        ),
        "sglang:inter_token_latency_seconds": (
            "Histogram of inter-token latency in seconds.",
            stats.inter_token,
        ),
    }
    text = render_metrics(context.config.served_model_name, gauges, counters, histograms)
    handler._send(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")


def models(handler: GenerateRoute) -> None:
    context = handler.server.context
    model = {
        "id": context.config.served_model_name,
        "object": "model",
        "created": int(context.started_s),
        "owned_by": "sglang",
        "root": context.config.model_path,
        "max_model_len": context.config.context_length,
    }
    handler._json(200, {"object": "list", "data": [model]})
