"""Prints the SGLang release a Python environment holds, from its installed metadata, after checking
that its package is there and that every requirement it declares without a condition is installed
(those under a marker, an extra's or another platform's, are not checked).

Runs with the environment's own python on every refresh, so it reads metadata and never imports
SGLang: ``import sglang`` loads numpy, requests, pydantic, aiohttp and IPython, most of a second,
and still proves nothing of torch, which the server needs. Exits 1 naming what is missing.
"""

import re
import sys
from importlib import metadata, util

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def main() -> int:
    try:
        dist = metadata.distribution("sglang")
    except metadata.PackageNotFoundError:
        print("No module named 'sglang': no sglang distribution is installed", file=sys.stderr)
        return 1
    if util.find_spec("sglang") is None:
        print(f"sglang {dist.version} is recorded as installed, but its package is missing", file=sys.stderr)
        return 1
    missing = []
    for text in dist.requires or []:
        name = _NAME.match(text)
        if name is None or ";" in text:
            continue
        try:
            metadata.distribution(name.group(0))
        except metadata.PackageNotFoundError:
            missing.append(name.group(0))
    if missing:
        named = ", ".join(sorted(missing)[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        print(f"sglang {dist.version} requires {named}, not installed", file=sys.stderr)
        return 1
    print(dist.version)
    return 0


if __name__ == "__main__":
    sys.exit(main())
