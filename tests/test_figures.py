"""The README's and the results index's figures follow from the result files (benchmarks/figures.py)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from specs import paths

SPEC = importlib.util.spec_from_file_location("figures", paths.REPO_ROOT / "benchmarks" / "figures.py")
figures = sys.modules["figures"] = importlib.util.module_from_spec(SPEC)  # its dataclasses look it up there
SPEC.loader.exec_module(figures)


def test_every_figure_in_the_readme_and_the_index_is_what_its_files_say():
    assert figures.main(["--check"]) == 0, "run: .venv/bin/python benchmarks/figures.py"


def test_a_figure_typed_by_hand_or_left_stale_is_caught():
    headlines = {r.key: r.headline() for r in figures.RESULTS_INDEX}
    readme = figures.with_table(f"intro\n{figures.BEGIN}\n{figures.END}\nrest\n", figures.readme_table(headlines))
    index = figures.index_markdown(headlines)
    assert figures.stale_figures(readme, index, headlines) == []
    edited = readme.replace(headlines["harness_power"], headlines["harness_power"].replace("MDE", "best MDE"))
    assert figures.stale_figures(edited, index, headlines) == [headlines["harness_power"]]
    # a figure outside the table does not count
    moved = readme.replace(figures.BEGIN, "").replace(figures.END, "")
    assert figures.stale_figures(f"{figures.BEGIN}{figures.END}\n{moved}", index, headlines)


def test_a_figure_is_a_median_with_its_range_never_a_best_trial():
    assert figures.spread([0.081, 0.069, 0.149]) == "8.1% (range 6.9% to 14.9%)"
    assert figures.spread([0.1, 0.1]) == "10.0% in all 2"
    assert figures.spread([]) == "none recorded"


def test_the_readme_without_its_markers_is_one_error_naming_them():
    with pytest.raises(SystemExit, match="markers"):
        figures.with_table("no markers here\n", ["| a |"])
