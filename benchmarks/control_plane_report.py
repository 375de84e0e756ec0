"""The control-plane benchmark's tables, printed: our commands' medians against the floors', with
the SSH connections and sessions they opened; their CPU seconds; the one-flag change with its
physical work; and the floors themselves."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator

from pulumi_floors import FLOOR_NAMES
from pulumi_timing import Timing

__all__ = ["report"]

_HOSTS = ("loopback", "50ms", "emulator")


def _commands(rows: dict[str, list[Timing]]) -> Iterator[tuple[str, str, str]]:
    """Each of our measured commands, as (host, verb, row name), in the tables' order."""
    for host in _HOSTS:
        for verb in ("preview", "up"):
            name = f"{host} {verb}"
            if name in rows:
                yield host, verb, name


def report(
    rows: dict[str, list[Timing]],
    change: dict[str, tuple[Timing, float]],
    proxied: int,
    floors: list[str],
) -> None:
    def median(name: str, column: int = 0) -> float:
        return statistics.median(timing[column] for timing in rows[name])

    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()}")
    print(
        "| command | host | sglang-stacks (s) | empty (s) | ratio | one dynamic resource (s) | ratio "
        "| SSH connections | SSH sessions |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for host, verb, name in _commands(rows):
        ours, empty, dynamic = median(name), median(f"empty {verb}"), median(f"dynamic {verb}")
        opened = max(timing[1] for timing in rows[name])
        sessions = max(timing[2] for timing in rows[name])
        label = "up, nothing changed" if verb == "up" else "preview (refresh: always)"
        print(
            f"| {label} | {host} | {ours:.2f} | {empty:.2f} | {ours / empty:.2f}x | {dynamic:.2f} "
            f"| {ours / dynamic:.2f}x | {opened} | {sessions} |"
        )
    for host, ((took, opened, sessions, _), work_s) in change.items():
        print(
            f"| up after one flag change | {host} | {took:.2f} | physical work {work_s:.1f} "
            f"| overhead {took - work_s:.1f} s | | | {opened} | {sessions} |"
        )
    print(f"(the 50 ms proxy accepted {proxied} connections in all)")
    print()
    print("CPU seconds on this machine (medians; the commands' process trees):")
    print("| command | host | sglang-stacks | empty | ratio | one dynamic resource | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for host, verb, name in _commands(rows):
        ours, empty, dynamic = (median(key, 3) for key in (name, f"empty {verb}", f"dynamic {verb}"))
        print(
            f"| {verb} | {host} | {ours:.2f} | {empty:.2f} | {ours / empty:.2f}x | {dynamic:.2f} "
            f"| {ours / dynamic:.2f}x |"
        )
    print()
    print("The floors (medians; ratios to the empty program's):")
    print("| program | preview (s) | ratio | no-op up (s) | ratio | CPU preview (s) | CPU up (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for floor in floors:
        preview, up = median(f"{floor} preview"), median(f"{floor} up")
        print(
            f"| {FLOOR_NAMES[floor]} | {preview:.2f} | {preview / median('empty preview'):.2f}x | {up:.2f} "
            f"| {up / median('empty up'):.2f}x | {median(f'{floor} preview', 3):.2f} "
            f"| {median(f'{floor} up', 3):.2f} |"
        )
