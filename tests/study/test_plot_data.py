"""The figures' records (``study.output.plot_data``): picks starred, labels placed apart, and
each pick's latency against load from what the study measured. Records, not pixels."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from autotune.study.output.plot_data import front_plot, label_box, load_curves, place_labels
from tests.helpers import served, store, with_capacity


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    """A study in its folder's autotune.db, stored once for the module: #0 baseline; #1 and #2
    nearly the same point (their labels once overprinted); #3 with a capacity search; #4
    dominated. A test that writes copies the folder."""
    folder = tmp_path_factory.mktemp("plotted")
    trials = [served(e2el_ms=1000, throughput=2000, reference="default"),
              served(e2el_ms=800, throughput=1600, params={"max_num_seqs": 128}),
              served(e2el_ms=801, throughput=1599, params={"max_num_seqs": 96}),
              with_capacity(served(e2el_ms=900, throughput=1900, params={"max_num_seqs": 192}),
                            [(4, 800.0), (16, 1500.0), (16, 1600.0), (64, 2500.0)], met=16, missed=64),
              served(e2el_ms=1500, throughput=1000, params={"max_num_seqs": 64})]
    store(folder, trials, baseline="default",
          profiles=("low-concurrency", "high-concurrency", "capacity"))
    return folder


@pytest.fixture(scope="module")
def data(stored):
    from autotune.study.store.records import study_data
    from autotune.study.store.storage import load_existing

    return study_data(load_existing("s", f"sqlite:///{stored / 'autotune.db'}"))


def test_the_picks_are_marked_with_their_uses(data):
    plot = front_plot(data, {"interactive": 1, "throughput": 0, "balanced": 1})
    marked = {p.number: p.picked_for for p in plot.points if p.picked_for}
    assert marked == {1: ("interactive", "balanced"), 0: ("throughput",)}
    assert next(p for p in plot.points if p.number == 1).label == "#1 (interactive, balanced)"
    assert {p.number for p in plot.points if p.on_front} == {0, 1, 3}
    assert {p.number for p in plot.points} == {0, 1, 2, 3, 4}


def test_no_label_covers_another_even_for_points_on_top_of_each_other(data):
    plot = front_plot(data, {"interactive": 1})
    from autotune.study.output.plot_data import _to_points

    at = _to_points([(p.x, p.y) for p in plot.points])
    boxes = [label_box(a, p.label_at, p.label) for a, p in zip(at, plot.points, strict=True)]
    for a, b in itertools.combinations(boxes, 2):
        assert a.overlap(b) == 0


def test_a_crowd_of_labels_at_one_spot_is_spread_over_distinct_places():
    offsets = place_labels([(1.0, 1.0)] * 4 + [(0.0, 0.0), (2.0, 2.0)], ["#1", "#2", "#3", "#4", "#5", "#6"])
    assert len(set(offsets[:4])) == 4


def test_each_pick_has_its_latency_against_load_from_its_profiles_and_probes(data):
    curves = {c.number: c for c in load_curves(data, {"interactive": 3, "throughput": 0})}
    c = curves[3]
    assert c.metric == "mean_e2el_ms" and c.uses == ("interactive",)
    fixed = [(p.load, p.source) for p in c.points if p.low is not None]
    assert fixed == [(2.0, "low-concurrency"), (100.0, "high-concurrency")]
    probes = [(p.load, round(p.latency, 1)) for p in c.points if p.source == "capacity probe"]
    assert probes == [(4.0, round(800 / 1.3, 1)), (16.0, round(1500 / 1.3, 1)),
                      (16.0, round(1600 / 1.3, 1)), (64.0, round(2500 / 1.3, 1))]
    low = next(p for p in c.points if p.source == "low-concurrency")
    assert low.low < low.latency < low.high and low.latency == pytest.approx(900)
    assert [p.load for p in curves[0].points] == [2.0, 100.0]  # no capacity search: its profiles


def test_the_report_draws_the_front_and_each_picks_load_figure(stored, tmp_path, pyplot_imported):
    from autotune.study.output.report import write_report
    from autotune.study.store.storage import load_existing

    written = write_report(load_existing("s", f"sqlite:///{stored / 'autotune.db'}"), tmp_path / "r")
    names = {p.name for p in written}
    assert "front.png" in names and any(n.startswith("load-trial-") for n in names)
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## Each pick under load" in md and "load-trial-" in md


def test_the_dashboard_gets_each_figure_once_as_the_studys_artifact_replaced_when_it_changes(
        stored, data, tmp_path, pyplot_imported):
    """The notes are rewritten after every confirmation: each figure stays one artifact of the
    study, its bytes untouched when drawn the same and replaced when the numbers changed."""
    import dataclasses
    import shutil

    import optuna
    from optuna.artifacts import get_all_artifact_meta

    from autotune.core.analysis.recommendation import TieSettings
    from autotune.study.output.notes import upload_figures
    from autotune.study.store.storage import Heartbeat, open_storage

    shutil.copytree(stored, tmp_path, dirs_exist_ok=True)
    study = optuna.load_study(study_name="s", storage=open_storage(
        f"sqlite:///{tmp_path / 'autotune.db'}", Heartbeat()))
    artifacts = tmp_path / "artifacts"

    def kept() -> dict[str, tuple[str, bytes, int]]:
        return {m.filename: (m.artifact_id, (artifacts / m.artifact_id).read_bytes(),
                             (artifacts / m.artifact_id).stat().st_mtime_ns)
                for m in get_all_artifact_meta(study)}

    names = upload_figures(study, data, artifacts, TieSettings("s"))
    assert names[0] == "front.png" and all(n.startswith("load-trial-") for n in names[1:])
    first = kept()
    assert sorted(first) == sorted(names) and len(list(artifacts.iterdir())) == len(names)
    assert upload_figures(study, data, artifacts, TieSettings("s")) == names
    assert kept() == first  # the same figures: not one written again
    without_4 = dataclasses.replace(data, outcomes=data.outcomes[:4])  # #4 off the plot
    assert upload_figures(study, without_4, artifacts, TieSettings("s")) == names
    now = kept()
    assert {n: a for n, (a, _, _) in now.items()} == {n: a for n, (a, _, _) in first.items()}
    assert now["front.png"][1] != first["front.png"][1]  # the front drawn without #4
    assert all(now[n] == first[n] for n in names[1:])  # the picks' load curves: the same
    assert len(list(artifacts.iterdir())) == len(names)
