"""The README's demo table and headline claims, and the study rows in docs/how-it-works.md
and docs/policies.md, are what results/ renders (reproduction/paper/docblocks.py), never
numbers typed by hand."""

from __future__ import annotations

import pytest

from reproduction.paper import docblocks as D


def test_the_readme_says_what_results_renders():
    text = D.README.read_text()
    assert D.render(text, D.blocks()) == text, "README.md is stale: run `make docs`"
    assert "static:k=3" in D.demo_table() and "adaptive" in D.demo_table()


def test_the_cli_page_lists_every_registered_policy():
    from powertrip.core.policies import REGISTRY

    text = D.CLI_DOC.read_text()
    assert D.render(text, D.pages()[D.CLI_DOC]) == text, "docs/cli.md is stale: run `make docs`"
    assert all(f"* `{name}`:" in text for name in REGISTRY)


@pytest.mark.parametrize("page", ["HOW_DOC", "POLICIES_DOC"])
def test_the_study_rows_in_the_docs_are_what_claims_md_says(page):
    """docs/how-it-works.md quotes figure outer's rows, docs/policies.md figure regions':
    rendered, never typed."""
    path = getattr(D, page)
    text = path.read_text()
    assert D.render(text, D.pages()[path]) == text, f"{path.name} is stale: run `make docs`"
    assert "(not run yet)" not in text


def test_a_block_is_replaced_between_its_markers_and_a_missing_one_is_an_error():
    text = "a\n<!-- x:begin -->\nold\n<!-- x:end -->\nb\n"
    assert D.render(text, {"x": "new\n"}) == "a\n<!-- x:begin -->\nnew\n<!-- x:end -->\nb\n"
    with pytest.raises(ValueError, match="no '<!-- y:begin -->'"):
        D.render(text, {"y": "z\n"})
