"""Smoke test of the benchmark package: one tiny benchmark runs and the RESULTS table renders."""

from bench import expansion
from bench.common import Figure, not_measured
from bench.results import figure_row, render_results


def test_expansion_benchmark_gives_one_ratio_per_run_and_length():
    figures = expansion.run((3,), count=2, runs=2)
    assert [f.name for f in figures] == ["3a. all-turn / 1-turn characters tokenized, 3 turns",
                                         "3b. all-turn / 1-turn time inside the tokenizer, 3 turns",
                                         "3c. all-turn / 1-turn total build time, 3 turns"]
    assert [f.target for f in figures] == [1.3, 1.3, None]
    assert figures[0].ratios[0] == figures[0].ratios[1]  # characters are a deterministic measure
    assert all(len(f.ratios) == 2 and all(r > 0 for r in f.ratios) for f in figures)


def test_long_trajectories_have_the_asked_length():
    trajs = expansion.long_trajectories(7, 3)
    assert [len(t.turns) for t in trajs] == [7, 7, 7]
    assert len({t.observation for t in trajs[0].turns}) > 1


def test_rows_say_met_and_not_met_against_the_target():
    lower = Figure("a", [1.0, 3.0, 1.5], 2.0, False)
    higher = Figure("b", [1.0, 3.0, 1.5], 2.0, True)
    assert figure_row(lower) == "| a | 1.50× | 1.00× – 3.00× | ≤ 2.00× | met |  |"
    assert figure_row(higher) == "| b | 1.50× | 1.00× – 3.00× | ≥ 2.00× | not met |  |"


def test_results_page_lists_machine_versions_and_unmeasured_figures():
    text = render_results(
        [Figure("x", [0.25], 0.2, True, unit="%"), not_measured("y", 1000, True, "absent", "/s")],
        "python -m bench --quick", 3, {"x": "ncalls tottime"},
        host={"cores": "2"}, libs={"pyarrow": "1"},
    )
    assert "- cores: 2" in text and "- pyarrow: 1" in text
    assert "| x | 25% | 25% – 25% | ≥ 20% | met |" in text
    assert "| y | — | — | ≥ 1,000/s | not measured: absent |" in text
    assert "### x" in text
