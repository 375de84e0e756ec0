"""The load generator against a real HTTP server that streams tokens on a known schedule, its
contract with the stack's benchmark section, and the package as the host runs it."""

from __future__ import annotations

import ast
import asyncio
import io
import itertools
import json
import random
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from pydantic import ValidationError

import sglang_loadgen as loadgen
from sglang_loadgen import client, contract, health, streaming
from sglang_loadgen.document import SCHEMA, Document
from sglang_loadgen.progress import Progress
from sglang_loadgen.prompts import PromptSource
from sglang_loadgen.settings import WorkloadSettings
from sglang_loadgen.shapes import arrival_gaps_s
from sglang_loadgen.streaming import RequestRecord
from sglang_stacks.config.spec import BenchmarkSpec
from sglang_stacks.results import stats, summary

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Schedule:
    """How the fake server streams: first chunk after ``ttft_s``, then one chunk per ``interval_s``."""

    ttft_s: float = 0.1
    interval_s: float = 0.04
    tokens_per_chunk: int = 3
    speculative: bool = True
    fail_every: int = 0  # answer HTTP 500 to every n-th request (0: never)
    extra_prompt_tokens: int = 0  # a server that adds tokens (a BOS) to what it was sent
    health: int | None = None  # what GET /health answers (None: the route is missing, 404)


class FakeSGLang(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.schedule = Schedule()
        self.count = 0
        self.lock = threading.Lock()
        self.delivered_s: list[float] = []
        """Per streamed request, the server's own time from its answer's start to its last chunk."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeSGLang

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        status = self.server.schedule.health if self.path == "/health" else None
        self.send_response(404 if status is None else status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        schedule = self.server.schedule
        with self.server.lock:
            self.server.count += 1
            number = self.server.count
        if self.path != "/generate" or (schedule.fail_every and number % schedule.fail_every == 0):
            self.send_response(500)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"injected failure")
            return
        wanted = body["sampling_params"]["max_new_tokens"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        start = time.perf_counter()
        due = start + schedule.ttft_s
        sent, verify = 0, 0
        while sent < wanted:
            time.sleep(max(0.0, due - time.perf_counter()))
            sent = min(wanted, sent + schedule.tokens_per_chunk)
            verify += 1
            # A tokenizer-backed server counts token ids as they are.
            prompt_tokens = len(body["input_ids"]) + schedule.extra_prompt_tokens
            meta: dict[str, object] = {"prompt_tokens": prompt_tokens, "completion_tokens": sent}
            if schedule.speculative:
                meta["spec_verify_ct"] = verify
            if sent == wanted:
                meta["finish_reason"] = {"type": "length", "length": wanted}
                delivered_s = time.perf_counter() - start
                meta["e2e_latency"] = delivered_s
                with self.server.lock:
                    self.server.delivered_s.append(delivered_s)
            chunk = {"text": "x" * sent, "meta_info": meta}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            due += schedule.interval_s
        self.wfile.write(b"data: [DONE]\n\n")


@pytest.fixture(scope="module")
def server() -> Iterator[FakeSGLang]:
    fake = FakeSGLang()
    thread = threading.Thread(target=fake.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.shutdown()
    fake.server_close()


@pytest.fixture(autouse=True)
def fresh_schedule(server: FakeSGLang) -> None:
    server.schedule = Schedule()
    server.count = 0
    server.delivered_s = []


def _workload(server: FakeSGLang, **changes: object) -> contract.Workload:
    settings: dict[str, object] = {
        "url": server.url,
        "input_len": 16,
        "output_len": 30,
        "warmup_requests": 1,
        "repetitions": 3,
        "requests_per_repetition": 2,
    }
    settings.update(changes)
    return contract.Workload(**settings)  # type: ignore[arg-type]


def test_single_stream_tok_s_and_latencies_match_the_schedule(server: FakeSGLang) -> None:
    document = client.run(_workload(server, requests_per_repetition=1))
    (level,) = document.levels
    # 30 tokens in chunks of 3: the first chunk at 100 ms, nine more 40 ms apart. On a busy
    # machine chunks can only arrive late, never early: no run is faster than the schedule.
    expected_tok_s = 30 / (0.1 + 9 * 0.04)
    assert len(level.tok_s_runs) == 3
    assert max(level.tok_s_runs) < expected_tok_s * 1.01
    # Each run is its tokens over its request's time, as the tool measured it.
    for record in level.records:
        assert level.tok_s_runs[record.repetition] == pytest.approx(30_000 / record.e2e_ms, rel=1e-3)
    # How late is the machine's doing: by the tool's own verdict (Welch's test with its launch floor
    # and margin) the runs are within noise of what the server itself delivered, its own time from
    # answering to its last chunk. Beside two busy processes a run read 12 % under the schedule.
    delivered = [30 / seconds for seconds in server.delivered_s[-3:]]  # after the warmup's
    verdict = stats.compare_runs(level.tok_s_runs, delivered)
    assert verdict.within_noise, (level.tok_s_runs, delivered, verdict.describe())
    assert level.requests == 3 and level.errors == 0
    assert level.spec_completion_tokens / level.spec_verify_ct == 3.0
    assert level.spec_verify_ct == 3 * 10
    ttft_ms = sorted(row.ttft_ms for row in level.records)
    tpot_ms = sorted(row.tpot_ms for row in level.records if row.tpot_ms is not None)
    assert 100 <= ttft_ms[1] < 130  # the whole stream would take 460 ms
    assert tpot_ms[1] == pytest.approx(360 / 29, rel=0.06)
    # nine chunk gaps of 40 ms, each carrying 3 tokens: 27 gaps of 13.3 ms per request
    assert len(level.itl_ms) == 3 * 27
    assert sorted(level.itl_ms)[len(level.itl_ms) // 2] == pytest.approx(40 / 3, rel=0.06)
    assert level.prompt_tokens_mean == 16  # exactly input_len
    # What the stack output will show.
    (result,) = summary.summarize_levels(document)
    assert result.accept_length == 3.0
    assert result.tok_s_mean == pytest.approx(stats.mean(level.tok_s_runs), abs=0.01)
    assert result.tok_s_ci95[0] <= result.tok_s_mean <= result.tok_s_ci95[1]
    assert (result.requests, result.errors, result.repetitions) == (3, 0, 3)


def test_concurrent_streams_multiply_throughput(server: FakeSGLang) -> None:
    document = client.run(
        _workload(
            server,
            output_len=9,
            concurrency=(1, 4),
            warmup_requests=0,
            repetitions=5,
            requests_per_repetition=4,
        )
    )
    one, four = document.levels
    assert (one.concurrency, four.concurrency) == (1, 4)
    assert one.requests == four.requests == 4 * 5
    assert one.completion_tokens == four.completion_tokens == 4 * 5 * 9  # each token counted once
    # Four streams at once: by the tool's own verdict (Welch's test with the launch floor, its
    # margin), significantly more than two streams' worth of one stream, which one or two at a time
    # would give. A loaded machine slows each level by its own amount (one stream's level was once
    # slowed 15 % more than four's), so no fixed ratio holds.
    doubled = stats.compare_runs(four.tok_s_runs, [2 * tok_s for tok_s in one.tok_s_runs])
    assert doubled.significant and doubled.change_pct > 0, doubled.describe()
    # Nor more than four streams of the schedule give (9 tokens in 180 ms each): a busy machine
    # only delays chunks, so the interval of the mean cannot lie above it unless tokens or time
    # were miscounted.
    assert stats.ci95(four.tok_s_runs)[0] <= 4 * 9 / (0.1 + 2 * 0.04)


def test_failed_requests_are_counted_not_fatal(server: FakeSGLang) -> None:
    server.schedule.fail_every = 3
    document = client.run(
        _workload(server, output_len=9, warmup_requests=0, repetitions=3, requests_per_repetition=3)
    )
    (level,) = document.levels
    assert level.requests == 9
    assert level.errors == 3
    assert level.error_samples == ["HTTP 500: injected failure"]
    assert len(level.records) == 6
    # Counted by kind, and read back so: the server itself answered these with an error.
    read = summary.read_document(json.loads(json.dumps(document.to_json())))
    assert read.levels[0].error_kinds == {"server_status": 3}
    assert read.levels[0].answered_by_the_server == 3 and read.levels[0].name == "concurrency 1"


def test_a_level_where_every_request_failed_says_how_and_ends_the_run(server: FakeSGLang) -> None:
    server.schedule.fail_every = 1
    document = client.run(
        _workload(server, concurrency=(1, 2), warmup_requests=0, repetitions=1, requests_per_repetition=3)
    )
    # The run stops at that level (the next would only fail the same way), and its document still
    # says how each request failed: here the server answered each with an error.
    (level,) = document.levels
    assert level.every_request_failed and (level.requests, level.errors) == (3, 3)
    assert level.error_kinds == {"server_status": 3} and level.answered_by_the_server == 3
    assert level.error_samples == ["HTTP 500: injected failure"] and level.records == []


def test_without_speculative_decoding_there_is_no_verify_count(server: FakeSGLang) -> None:
    server.schedule.speculative = False
    server.schedule.tokens_per_chunk = 1
    document = client.run(
        _workload(server, output_len=5, warmup_requests=0, repetitions=1, requests_per_repetition=1)
    )
    (level,) = document.levels
    assert level.spec_verify_ct == 0
    assert level.completion_tokens == 5


def test_a_bad_workload_names_the_setting(server: FakeSGLang) -> None:
    with pytest.raises(contract.LoadgenError, match="repetitions is 0, but it must be at least 1"):
        client.run(_workload(server, repetitions=0))
    with pytest.raises(contract.LoadgenError, match=r"concurrency is \[0\], but it must be at least 1"):
        client.run(_workload(server, concurrency=(0,)))
    with pytest.raises(contract.LoadgenError, match="request_timeout_s is 0, but it must be more than 0"):
        client.run(_workload(server, request_timeout_s=0))
    with pytest.raises(
        contract.LoadgenError, match="requests_per_repetition is 2, but concurrency 8 needs at least 8"
    ):
        client.run(_workload(server, concurrency=(1, 8)))


def _unpacked(folder: Path) -> Path:
    """The load generator as the host gets it: the package's tar stream, unpacked into ``folder``."""
    with tarfile.open(fileobj=io.BytesIO(loadgen.bundle())) as archive:
        archive.extractall(folder, filter="data")
    return folder


@pytest.mark.parametrize("uvloop_installed", [True, False])
def test_runs_as_the_host_runs_it_outside_the_project(
    server: FakeSGLang, tmp_path: Path, uvloop_installed: bool
) -> None:
    folder = _unpacked(tmp_path)
    if not uvloop_installed:  # a host environment without uvloop: the module found first fails to import
        (folder / "uvloop.py").write_text("raise ImportError('uvloop is not installed on this host')\n")
    workload = contract.Workload(
        url=server.url,
        input_len=8,
        output_len=6,
        concurrency=(1, 2),
        warmup_requests=1,
        repetitions=2,
        requests_per_repetition=2,
    )
    argv = [sys.executable, "-E", "-s", "-m", loadgen.PACKAGE_NAME, *workload.argv()]
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # The document as the host prints it, read back into the types it was written with.
    document = summary.read_document(done.stdout)
    assert document.schema == SCHEMA
    assert [level.concurrency for level in document.levels] == [1, 2]
    assert document.workload.output_len == 6
    assert document.workload.requests_per_repetition == 2


def test_the_script_prints_its_document_and_a_sentence_when_nothing_answers(tmp_path: Path) -> None:
    argv = [sys.executable, "-E", "-s", "-m", loadgen.PACKAGE_NAME, "--url", "http://127.0.0.1:9"]
    argv += ["--warmup-requests", "0", "--repetitions", "1", "--requests-per-repetition", "1"]
    argv += ["--request-timeout-s", "5"]
    done = subprocess.run(argv, cwd=_unpacked(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == contract.LoadgenExit.EVERY_REQUEST_FAILED
    (level,) = summary.read_document(done.stdout).levels
    assert level.every_request_failed and level.error_kinds == {"connection": 1}
    assert "All 1 requests at concurrency 1 failed" in done.stderr
    assert "Check that the server at http://127.0.0.1:9 is ready" in done.stderr


def test_the_package_imports_only_the_standard_library_aiohttp_uvloop_and_itself() -> None:
    for module in Path(loadgen.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue  # not an import, or a relative one: the package itself
            for name in names:
                top = name.split(".")[0]
                allowed = top in sys.stdlib_module_names or top in ("__future__", "aiohttp", "uvloop")
                assert allowed, (module.name, name)


def test_a_stack_benchmark_section_is_a_workload_and_its_command_line() -> None:
    section = BenchmarkSpec().settings()
    options = {option.name for option in fields(contract.Workload)}
    # The limit of the whole run is kept by the host; the SLO only reads the numbers.
    assert set(section) - options == {"timeout_s", "slo"}
    # Numbers come back from Pulumi as floats; the command line carries them as the script reads them.
    through_pulumi = {key: float(value) if type(value) is int else value for key, value in section.items()}
    workload = contract.Workload.from_settings("http://127.0.0.1:30000", through_pulumi)
    assert workload == contract.Workload()  # one set of defaults
    assert "--requests-per-repetition=4" in workload.argv()
    assert contract.parse_args(workload.argv()) == workload
    rates = contract.Workload.from_settings("http://h:1", {"arrival": "gamma", "request_rate": [0.5, 2]})
    assert "--request-rate=0.5,2" in rates.argv() and contract.parse_args(rates.argv()) == rates
    changed = contract.Workload.from_settings(
        "http://h:1/", {**section, "ignore_eos": False, "concurrency": [1, 8]}
    )
    assert "--no-ignore-eos" in changed.argv() and "--concurrency=1,8" in changed.argv()
    assert contract.parse_args(changed.argv()) == contract.Workload(**{**vars(changed), "url": "http://h:1"})


def test_the_stack_section_and_the_load_generator_are_one_declaration() -> None:
    # The spec is built on the load generator's settings; it adds only what the host keeps.
    assert issubclass(BenchmarkSpec, WorkloadSettings)
    shared = {option.name for option in fields(WorkloadSettings)}
    assert {option.name for option in fields(BenchmarkSpec)} - shared == {"timeout_s", "slo"}
    assert {option.name for option in fields(contract.Workload)} - shared == {"url", "progress_file"}
    # One limit, kept on both sides: by pydantic reading the metadata, and on the host.
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        BenchmarkSpec(input_len=0)
    with pytest.raises(contract.LoadgenError, match="input_len is 0, but it must be at least 1; raise it"):
        contract.Workload(input_len=0).check()
    with pytest.raises(ValidationError, match="Input should be 'generate', 'completions' or 'chat'"):
        BenchmarkSpec.from_section({"endpoint": "embeddings"})
    with pytest.raises(contract.LoadgenError, match="endpoint is 'embeddings', but it must be one of"):
        contract.Workload(endpoint="embeddings").check()  # type: ignore[arg-type]
    # One rule across fields, one wording.
    crowded = {"concurrency": (1, 8), "requests_per_repetition": 2}
    with pytest.raises(ValidationError, match="requests_per_repetition is 2, but concurrency 8 needs"):
        BenchmarkSpec.from_section(crowded)
    with pytest.raises(contract.LoadgenError, match="requests_per_repetition is 2, but concurrency 8 needs"):
        contract.Workload(concurrency=(1, 8), requests_per_repetition=2).check()


def test_a_rank_sample_keeps_percentiles_and_bounds_the_size() -> None:
    gaps = [float(v % 997) for v in range(100_000)]
    sample = client._rank_sample(gaps, 1_000)
    assert len(sample) == 1_000
    assert sample[0] == min(gaps) and sample[-1] == max(gaps)
    assert sample[500] == pytest.approx(sorted(gaps)[50_000], abs=2)
    assert client._rank_sample([3.0, 1.0], 1_000) == [3.0, 1.0]


def test_a_prompt_the_server_counts_differently_is_an_error(server: FakeSGLang) -> None:
    server.schedule.extra_prompt_tokens = 1
    document = client.run(
        _workload(server, output_len=3, warmup_requests=0, repetitions=1, requests_per_repetition=1)
    )
    (level,) = document.levels
    assert level.every_request_failed and level.error_kinds == {"protocol": 1}
    assert "the server counted 17 prompt tokens where the workload sent 16" in level.error_samples[0]


def _arrival_gaps_s(document: Document) -> list[float]:
    (level,) = document.levels
    sent = sorted(row.sent_s for row in level.records)
    return [b - a for a, b in itertools.pairwise(sent)]


def test_an_open_loop_run_arrives_at_the_declared_rate(server: FakeSGLang) -> None:
    from scipy import stats as scipy_stats

    # Gaps of 50 ms on average and few chunks (the fake server's threads share this process's
    # GIL with the client): a loaded machine delays a send by milliseconds, which neither the
    # mean gap nor the shape of the distribution notices at this scale.
    server.schedule = Schedule(ttft_s=0.1, interval_s=0.04, tokens_per_chunk=1, speculative=False)
    rate = 20.0
    workload = _workload(
        server, output_len=10, arrival="poisson", request_rate=(rate,), warmup_requests=0,
        repetitions=1, requests_per_repetition=80,
    )  # fmt: skip
    document = client.run(workload)
    gaps = _arrival_gaps_s(document)
    (level,) = document.levels
    assert level.request_rate == rate and level.concurrency is None
    assert level.errors == 0
    # Requests overlap (each takes about 460 ms, one arrives every 50 ms): nothing waited for a stream.
    assert level.repetitions[0].concurrency_measured > 4
    # Sends are due at times drawn ahead, so a late one moves no other: the 95 % interval of the
    # mean drawn gap (the tool's) holds the declared 1 / rate, and the sent gaps' interval meets it
    # (a loaded machine sends late by milliseconds to a tenth of a second; the mean sent gap moves
    # by the last send's lateness over the run, while a wrong rate would move it by its whole gap).
    drawn = arrival_gaps_s(rate, 1.0, random.Random(f"{workload.seed}/{rate:g}/0"))
    schedule = [drawn() for _ in gaps]
    low, high = stats.ci95(schedule)
    assert low <= 1 / rate <= high, (low, high)
    sent_low, sent_high = stats.ci95(gaps)
    assert sent_low <= high and low <= sent_high, ((sent_low, sent_high), (low, high))
    # The shape where it is decided: the gaps the load generator draws are exponential at the rate
    # (Kolmogorov-Smirnov at the tool's alpha, 2,000 draws of a seeded generator), and a gamma of
    # shape 0.25 is not exponential but the gamma it declares. The sent gaps themselves are not held
    # to that test: a loaded machine sends late by milliseconds to a tenth of a second, which bends
    # the small gaps of 80 sends past any alpha (p 0.000 to 0.04 in 7 of 10 runs beside two busy
    # processes on two cores, with the mean gap unchanged).
    draws = {shape: arrival_gaps_s(rate, shape, random.Random(0)) for shape in (1.0, 0.25)}
    poisson, gamma = ([draw() for _ in range(2000)] for draw in draws.values())
    exponential = (0, 1 / rate)
    assert scipy_stats.kstest(poisson, "expon", args=exponential).pvalue > stats.ALPHA
    assert scipy_stats.kstest(gamma, "expon", args=exponential).pvalue < stats.ALPHA
    assert scipy_stats.kstest(gamma, "gamma", args=(0.25, 0, 1 / (rate * 0.25))).pvalue > stats.ALPHA
    # The run sends by those draws: its gaps rise and fall with the ones its seeded generator drew
    # for it (Spearman's test at the same alpha; constant gaps or another process would not).
    assert scipy_stats.spearmanr(gaps, schedule).pvalue < stats.ALPHA
    # End to end, the runs send as their processes differ: a gamma run of shape 0.25 (its gaps' CV
    # 2, Poisson's 1) is told apart from the Poisson run by a two-sample test at the same alpha.
    bursty = client.run(contract.Workload(**{**vars(workload), "arrival": "gamma", "burstiness": 0.25}))
    bursty_gaps = _arrival_gaps_s(bursty)
    assert scipy_stats.ks_2samp(gaps, bursty_gaps).pvalue < stats.ALPHA
    assert scipy_stats.variation(bursty_gaps) > scipy_stats.variation(gaps)


def test_a_duration_bounded_run_stops_sending_when_the_time_is_up(server: FakeSGLang) -> None:
    server.schedule = Schedule(ttft_s=0.02, interval_s=0.01, tokens_per_chunk=1, speculative=False)
    document = client.run(
        _workload(server, output_len=5, concurrency=(2,), duration_s=0.5, warmup_requests=0, repetitions=1)
    )
    (level,) = document.levels
    # Each request takes about 60 ms: two streams send about 16 in half a second, fewer on a loaded
    # machine, where each takes longer. Whatever their length, none is sent after the half second,
    # and the streams sent until then: the last request went out within a request's time of the end
    # (twice the longest, for the loop's own turn between two requests).
    sent = [row.sent_s for row in level.records]
    longest_s = max(row.e2e_ms for row in level.records) / 1000
    assert max(sent) < 0.5 and level.requests <= 18
    assert max(sent) >= 0.5 - 2 * longest_s, (sent, longest_s)


def test_tok_s_so_far_does_not_fall_when_a_request_ends(tmp_path: Path) -> None:
    # A server steady at 50 tok/s, one stream, requests of 100 tokens (2 s each), a line a second.
    now = [0.0]
    path = tmp_path / "progress.jsonl"
    progress = Progress(str(path), clock=lambda: now[0])
    progress.phase("concurrency 1", "measure", 1, 1)
    for second in range(1, 7):
        now[0] = float(second)
        progress.streamed(50)
        if second % 2 == 0:
            progress.count(None)  # a request of 100 tokens ends
        progress.write()

    rates = [json.loads(line)["tok_s_so_far"] for line in path.read_text().splitlines()[1:]]
    done = [json.loads(line)["requests_done"] for line in path.read_text().splitlines()[1:]]
    # Counted at each request's end, this read 0, 50, 33.3, 50, 40, 50: a rate that seems to fall
    # between two completions while the server streams steadily.
    assert rates == [50.0] * 6
    assert done == [0, 1, 1, 2, 2, 3]


def test_a_request_is_timed_from_when_it_is_written_not_from_when_its_stream_asked(
    server: FakeSGLang,
) -> None:
    """When many streams start together, the event loop builds the others' requests before it writes
    one: that wait is the client's. The load generator's session times a request from its write, so
    its TTFT is what the server took (the first chunk 100 ms after the request came), not that plus
    the second the loop was kept busy."""
    workload = _workload(server, requests_per_repetition=1)
    prompt = PromptSource(workload, nonce=1).prompt(0)

    async def with_a_busy_loop() -> RequestRecord:
        async with streaming.client_session() as session:

            async def other_streams_building_their_requests() -> None:
                time.sleep(1.0)  # blocks the loop between this request's call and its write

            record, _ = await asyncio.gather(
                streaming.stream_one(session, workload, prompt), other_streams_building_their_requests()
            )
            return record

    record = asyncio.run(with_a_busy_loop())
    assert record.error is None and record.ttft_s is not None
    assert 0.1 <= record.ttft_s < 0.5


def test_a_server_whose_health_check_fails_twice_stops_the_run_instead_of_its_timeouts(
    server: FakeSGLang, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hung server: no first token for a minute, each request allowed the default 600 s, and its
    health check answering 503 (SGLang's answer when its scheduler does not answer)."""
    monkeypatch.setattr(health, "HEALTH_POLL_S", 0.05)
    server.schedule = Schedule(ttft_s=60.0, health=503)
    started = time.monotonic()
    workload = _workload(server, warmup_requests=0, repetitions=1, requests_per_repetition=1)
    assert workload.request_timeout_s == 600

    with pytest.raises(health.ServerHangs, match=r"failed 2 times in a row \(HTTP 503, HTTP 503\)"):
        client.run(workload)
    assert time.monotonic() - started < 60  # no answer, no timeout was waited for


@pytest.mark.parametrize("answer", [200, None])
def test_a_healthy_server_or_one_without_the_route_is_measured_whole(
    server: FakeSGLang, monkeypatch: pytest.MonkeyPatch, answer: int | None
) -> None:
    monkeypatch.setattr(health, "HEALTH_POLL_S", 0.05)
    server.schedule = Schedule(health=answer)
    document = client.run(_workload(server))
    (level,) = document.levels
    assert level.errors == 0 and level.requests == 6
