"""How long an update's work lives: as long as its engine listens."""

from __future__ import annotations

import socket

from sglang_stacks.hostops import lifetime


def test_the_engine_address_is_the_providers_argument() -> None:
    argv = ["-m", "127.0.0.1:35587"]
    assert lifetime.engine_address(["python", *argv]) == ("127.0.0.1", 35587)
    assert lifetime.engine_address(["python", "--logtostderr", "[::1]:4000"]) == ("::1", 4000)
    assert lifetime.engine_address(["pytest", "tests/test_lifetime.py"]) is None


def test_an_engine_that_stopped_listening_is_gone() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = listener.getsockname()
        assert lifetime.engine_alive(address)
    assert not lifetime.engine_alive(address)


def test_outside_a_provider_the_update_lives_with_the_first_parent() -> None:
    assert lifetime.update_alive()
    lifetime.watch_engine()  # no engine address here: nothing is watched, nothing ends
    assert lifetime.update_alive()
