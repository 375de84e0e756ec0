"""The one rename table: every pair is SGLang's own rename, and no rename SGLang declares is missing."""

import pytest

from sglang_flags import Flag, known_releases, load_table
from sglang_flags.renames import RENAMES, flag_for, spellings
from sglang_stacks.config.flags import ServerFlags
from sglang_stacks.config.render import render_argv

RELEASES = known_releases()


def _releases_with(dest: str) -> list[str]:
    """Releases where ``dest`` is an option's own dest, not only a deprecated alias's."""
    return [r for r in RELEASES if (f := load_table(r).by_dest(dest)) is not None and not f.deprecated]


def _flag(release: str, dest: str) -> Flag:
    flag = load_table(release).by_dest(dest)
    assert flag is not None, f"{release} has no {dest}"
    return flag


def _shape(flag: Flag) -> tuple[object, ...]:
    return (flag.type, flag.nargs, flag.nargs == 0)


@pytest.mark.parametrize(("old", "new"), RENAMES)
def test_every_declared_rename_is_one_flag_under_two_names(old, new):
    with_old, with_new = _releases_with(old), _releases_with(new)
    assert with_old and with_new, f"{old} or {new} is in no shipped table"
    last_old, first_new = with_old[-1], with_new[0]
    assert RELEASES.index(last_old) < RELEASES.index(first_new)
    assert _shape(_flag(last_old, old)) == _shape(_flag(first_new, new))
    old_options = set(_flag(last_old, old).flags)
    # Evidence: SGLang keeps the old option as an alias of the new dest, or the new flag
    # appears in the very release the old one disappears.
    aliased = any(f.dest == new and old_options & set(f.flags) for r in with_new for f in load_table(r).flags)
    handed_over = RELEASES.index(first_new) == RELEASES.index(last_old) + 1
    assert aliased or handed_over, f"{old} -> {new}: no alias and a gap between {last_old} and {first_new}"


def test_no_rename_sglang_declares_is_missing():
    ever = {f.dest for r in RELEASES for f in load_table(r).flags if not f.deprecated}
    missing = set()
    for release in RELEASES:
        for flag in load_table(release).flags:
            if flag.action not in ("DeprecatedAliasStoreAction", "DeprecatedStoreTrueAction"):
                continue
            for option in flag.flags:
                name = option.removeprefix("--").replace("-", "_")
                if name != flag.dest and name in ever and flag.dest not in spellings(name):
                    missing.add((name, flag.dest))
    assert not missing, f"add these to sglang_flags.renames.RENAMES: {sorted(missing)}"


def test_spellings_follow_a_flag_through_its_names_oldest_first():
    assert spellings("tp_size") == ("tensor_parallel_size", "tp_size")
    assert spellings("cuda_graph_max_bs_decode") == ("cuda_graph_max_bs", "cuda_graph_max_bs_decode")
    assert spellings("schedule_policy") == ("schedule_policy",)


@pytest.mark.parametrize(
    ("release", "dest"),
    [
        ("0.5.9", "stream_output"),
        ("0.5.10", "incremental_streaming_output"),
        ("0.5.23", "incremental_streaming_output"),
    ],
)
def test_flag_for_finds_the_releases_own_spelling(release, dest):
    for name in ("stream_output", "incremental_streaming_output"):
        flag = flag_for(load_table(release), name)
        assert flag is not None and flag.dest == dest


def test_an_extra_flag_under_an_old_name_renders_with_the_new_one():
    flags = ServerFlags(model_path="/m", extra_flags={"nsa_prefill_backend": "fa3"})
    assert render_argv(flags, "0.5.12")[2:] == ["--nsa-prefill-backend", "fa3"]
    assert render_argv(flags, "0.5.13")[2:] == ["--dsa-prefill-backend", "fa3"]
