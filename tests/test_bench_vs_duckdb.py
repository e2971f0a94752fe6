"""bench/pipeline_vs_duckdb.py's closing table: the warm ratio is taken against the peer timed on
both sides of the pipeline, and the machine's drift between the two is shown."""

from __future__ import annotations

from bench.pipeline_vs_duckdb import (
    Figures,
    markdown_table,
    median_pair_ratio,
    peer_spread,
    peer_warm_mean,
)


def _row(table: str, name: str) -> str:
    (line,) = [line for line in table.splitlines() if line.startswith(f"| {name} |")]
    return line.removeprefix(f"| {name} | ").removesuffix(" |")


def test_the_warm_ratio_is_against_the_peers_mean_before_and_after_the_pipeline():
    # The peer took 20 s before and 30 s after (the machine slowed meanwhile): the pipeline's
    # 125 s are 5.0x their mean, not 6.2x the one before.
    figures = Figures(events=10_000_000, pipeline_warm_s=125.0, peer_warm_s=20.0, peer_after_s=30.0)
    assert peer_warm_mean(figures) == 25.0
    table = markdown_table(figures)
    assert _row(table, "ratio pipeline / DuckDB, warm (peer's mean before and after)") == "5.0x"
    assert (
        _row(table, "the machine's drift over the pipeline's run (peer)") == "after / before 1.50"
    )
    assert _row(table, "DuckDB peer warm, after the pipeline") == "30.0 s (333,333 events/s)"
    assert _row(table, "class-data-sharing archive the driver mapped") == "n/a"  # not recorded


def test_without_a_peer_run_after_the_pipeline_the_ratio_is_against_the_one_before():
    figures = Figures(events=1_000, pipeline_warm_s=30.0, peer_warm_s=10.0, class_archive="none")
    assert peer_warm_mean(figures) == 10.0 and peer_spread(figures) == "n/a"
    table = markdown_table(figures)
    assert _row(table, "ratio pipeline / DuckDB, warm (peer's mean before and after)") == "3.0x"
    assert _row(table, "DuckDB peer warm, after the pipeline") == "n/a"
    assert _row(table, "class-data-sharing archive the driver mapped") == "none"


def test_warm_pairs_each_take_the_peer_run_right_after_them_and_the_median_is_shown():
    # The machine slows over the pairs (the peer 20 -> 30 s) as the JVM warms (90 -> 66 s):
    # each round is set against its own peer run, and the median of the three ratios is 3.0x.
    pairs = [(90.0, 20.0), (75.0, 25.0), (66.0, 30.0)]
    figures = Figures(events=10_000_000, pipeline_warm_s=90.0, peer_warm_s=20.0, warm_pairs=pairs)
    assert median_pair_ratio(figures) == 3.0
    table = markdown_table(figures)
    assert _row(table, "warm pair 1: pipeline round / the peer right after") == (
        "90.0 s / 20.0 s: 4.5x"
    )
    assert _row(table, "warm pair 3: pipeline round / the peer right after") == (
        "66.0 s / 30.0 s: 2.2x"
    )
    assert _row(table, "ratio pipeline / DuckDB, warm pairs (median)") == "3.0x"


def test_without_warm_pairs_the_table_has_no_pair_rows():
    table = markdown_table(Figures(events=1_000, pipeline_warm_s=30.0, peer_warm_s=10.0))
    assert "warm pair" not in table
    assert median_pair_ratio(Figures()) != median_pair_ratio(Figures())  # nan: no pairs
