"""What every host-side dynamic provider shares: the connection input turned back into a
`Connection`, the diff rule for it, and the short output tails that go into error messages.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import pulumi

from sglang_stacks.errors import StacksError
from sglang_stacks.hostops import lifetime
from sglang_stacks.hostops.transport import Connection

# Fields that decide which machine (and which home folder) a resource lives on: changing one
# of them means the thing is somewhere else, so the resource is replaced. The key, the pinned
# host key or the timeout can change in place.
_IDENTITY_FIELDS = ("kind", "host", "port", "user")


def connect(props: Mapping[str, Any]) -> Connection:
    """The `Connection` described by the resource's ``connection`` input.

    Numbers travel through Pulumi's protocol as floats; the port goes back to an int here so
    that it is rendered as ``22`` and not ``22.0``.
    """
    fields = dict(props["connection"])
    if "port" in fields:
        fields["port"] = int(fields["port"])
    if "connect_timeout_s" in fields:
        fields["connect_timeout_s"] = float(fields["connect_timeout_s"])
    return Connection(**fields)


def connection_diff(olds: Mapping[str, Any], news: Mapping[str, Any]) -> tuple[bool, bool]:
    """``(changed, replaces)`` for the ``connection`` input: replaced when it names another host."""
    old, new = olds.get("connection"), news.get("connection")
    if not isinstance(new, Mapping) or not isinstance(old, Mapping):
        # Unknown during a preview (it comes from another resource): an update at most.
        return old != new, False
    replaces = any(_identity(old, name) != _identity(new, name) for name in _IDENTITY_FIELDS)
    return dict(old) != dict(new), replaces


def _identity(fields: Mapping[str, Any], name: str) -> Any:
    value = fields.get(name)
    return int(value) if name == "port" and value is not None else value


def tail(text: str, lines: int = 12) -> str:
    """The last non-blank ``lines`` of ``text``, joined with `` | `` for a one-paragraph message."""
    kept = [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(kept) if kept else "(no output)"


def keep_connection_secret(opts: pulumi.ResourceOptions | None) -> pulumi.ResourceOptions:
    """`opts` plus marking the ``connection`` output secret: it may hold the SSH key."""
    return pulumi.ResourceOptions.merge(
        opts, pulumi.ResourceOptions(additional_secret_outputs=["connection"])
    )


_ProviderT = TypeVar("_ProviderT", bound=type)


def plain_errors(provider: _ProviderT) -> _ProviderT:
    """Class decorator: the project's own errors reach the user as their sentences.

    Pulumi's dynamic-provider host reports a failed call with `traceback.format_exc()`; for a
    deliberate error (a StacksError, which already says what to fix) the traceback only buries
    the message, so it is left out. Other exceptions keep theirs.
    """
    for name in ("create", "read", "update", "delete", "diff"):
        method = provider.__dict__.get(name)
        if method is not None:
            setattr(provider, name, _sentence_only(method))
    return provider


def _sentence_only(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        # Whatever a provider does on a host ends with the update that asked for it.
        lifetime.watch_engine()
        try:
            return method(*args, **kwargs)
        except StacksError:
            # format_exc() honours this limit; the process serves one update, which fails here.
            sys.tracebacklimit = 0
            raise

    return call
