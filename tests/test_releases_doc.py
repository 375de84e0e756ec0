"""docs/releases.md is generated from the tables and kept up to date."""

from sglang_flags.releases_doc import BEGIN, DOC, END, main, render_generated, update_text


def test_docs_releases_md_is_up_to_date():
    # Fails after a regeneration or a rename until `python -m sglang_flags.releases_doc` is run.
    assert main(["--check"]) == 0


def test_the_doc_shows_the_cuda_graph_spelling_of_every_release():
    text = render_generated()
    assert "| 0.5.13.post1 | `0.5.13.json` | 396 | `--cuda-graph-max-bs` | `--tensor-parallel-size` |" in text
    assert "| 0.5.14 | `0.5.14.json` | 398 | `--cuda-graph-max-bs-decode` | `--tp-size` |" in text
    assert "| `--cuda-graph-max-bs` | `--cuda-graph-max-bs-decode` | 0.5.14 | 0.5.19 |" in text


def test_only_the_generated_part_is_replaced():
    text = update_text(f"# Title\n\nBy hand.\n\n{BEGIN}\nSTALE\n{END}\n\nAfter.\n")
    assert text.startswith("# Title\n\nBy hand.\n\n" + BEGIN)
    assert text.endswith(END + "\n\nAfter.\n")
    assert "STALE" not in text
    assert DOC.name == "releases.md"
