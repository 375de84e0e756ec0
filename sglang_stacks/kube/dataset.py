"""A ShareGPT dataset for a benchmark Job (``benchmark.dataset_path``, a file on this machine): what
the load generator draws from it, gzipped into a ConfigMap the Job mounts.

A ShareGPT file is often hundreds of MB, far more than a ConfigMap holds (1 MiB), and a run draws
only from the first `SHAREGPT_SAMPLE` conversations of the file's seeded shuffle. Those are what is
shipped, placed so that the pod's reader, shuffling them with the same seed, puts them back in the
same order: the Job sends exactly the prompts a run on an SSH host sends.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

from sglang_stacks.errors import BenchmarkError

__all__ = ["DATASET_DIR", "DATASET_FILE", "LIMIT_BYTES", "sharegpt_sample"]

DATASET_DIR = "/opt/sglang-stacks/dataset"
"""Where the benchmark's pod finds the dataset."""
DATASET_FILE = "sharegpt.json.gz"
LIMIT_BYTES = 1_000_000
"""What one ConfigMap may hold (the API server refuses objects above 1 MiB), with room to spare."""


def sharegpt_sample(path: str, seed: int) -> bytes:
    """The conversations a run with ``seed`` draws from the ShareGPT file ``path``, as gzipped JSON
    whose seeded shuffle gives them in the order the run uses; BenchmarkError naming the key when the
    file cannot be read or the sample does not fit a ConfigMap."""
    from sglang_loadgen.contract import LoadgenError
    from sglang_loadgen.prompts import SHAREGPT_SAMPLE, read_sharegpt

    shown = str(Path(path).expanduser())
    try:
        drawn = read_sharegpt(shown, seed)[:SHAREGPT_SAMPLE]
    except LoadgenError as error:
        raise BenchmarkError(
            f"sglang-stacks:benchmark.dataset_path: {error} Point it at a ShareGPT-format JSON file on "
            "this machine; nothing was applied."
        ) from None
    # The reader shuffles what it reads with the seed: position i of its result is the file's entry
    # order[i], so the file holds drawn[i] there.
    order = list(range(len(drawn)))
    random.Random(seed).shuffle(order)
    placed = [drawn[0]] * len(drawn)
    for position, index in enumerate(order):
        placed[index] = drawn[position]
    entries = [
        {"conversations": [{"from": "human", "value": c.prompt}, {"from": "gpt", "value": c.answer}]}
        for c in placed
    ]
    data = gzip.compress(json.dumps(entries).encode(), mtime=0)
    if len(data) > LIMIT_BYTES:
        raise BenchmarkError(
            f"sglang-stacks:benchmark.dataset_path: the {len(drawn)} conversations a run draws from "
            f"{shown} take {len(data) / 1e6:.1f} MB compressed, more than a ConfigMap holds "
            f"({LIMIT_BYTES / 1e6:.0f} MB), so the benchmark's pod cannot get them. Use a file of shorter "
            "conversations, or dataset: random; nothing was applied."
        )
    return data
