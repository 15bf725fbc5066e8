"""Tables at 80 columns (a narrow terminal, or output piped): no line longer than the terminal
and no word split across lines; names break only at a space, `-` or `_`. Each table is rendered
to a rich Console of the width under test, and its words are checked against the same table
rendered wide, where nothing is broken."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console

import autotune.cli.common as common
from autotune.core.analysis.study_data import StudyData, noise_of
from autotune.core.deployment.failures import ENGINE_DIED
from autotune.core.trial.objectives import Objective
from autotune.core.trial.outcome import ProfileResult, TrialOutcome
from autotune.study.output.tables import breakable
from tests.helpers import GLM_MOE_MTP_CONFIG, REPO

LONG = "long-profile-name-of-a-chat-workload"  # 36 characters
# The longest built-in names: the profiles, the default objectives' metrics, and the profiles
# and metric of a data study (shared-prefix, no-prefix-cache, median TTFT).
OBJECTIVES = (Objective("low-concurrency", "mean_e2el_ms", "minimize"),
              Objective("high-concurrency", "output_throughput", "maximize"),
              Objective("shared-prefix", "median_ttft_ms", "minimize"),
              Objective("no-prefix-cache", "median_ttft_ms", "minimize"),
              Objective(LONG, "output_throughput", "maximize"))
CHANGED = {"cp_kv_cache_interleave_size": 16, "max_num_batched_tokens": 8192,
           "speculative_mtp": True, "performance_mode": "interactivity"}
BOX = re.compile("[\u2500-\u257f]")  # rich's borders


def study() -> StudyData:
    def results(scale: float) -> dict:
        runs = ({"mean_e2el_ms": 1234.5 / scale, "output_throughput": 1700.0 * scale,
                 "median_ttft_ms": 88.0 / scale}, {"mean_e2el_ms": 1250.5 / scale,
                                                  "output_throughput": 1690.0 * scale,
                                                  "median_ttft_ms": 91.0 / scale})
        return {o.profile: ProfileResult(o.profile, runs) for o in OBJECTIVES}

    base = TrialOutcome(0, params={k: None for k in CHANGED}, results=results(1.0),
                        reference="opt3-baseline")
    trials = [base,
              TrialOutcome(1, params=CHANGED, results=results(1.3), reference="cp-interleave-16"),
              TrialOutcome(2, params=dict(CHANGED, speculative_mtp=False), results=results(1.1)),
              TrialOutcome(3, state="fail", params=CHANGED, failure=ENGINE_DIED)]
    return StudyData(tuple(trials), OBJECTIVES, noise_of(trials), base, {k: None for k in CHANGED})


def render(monkeypatch, width: int, show) -> str:
    """What ``show()`` prints on a terminal ``width`` columns wide."""
    import autotune.cli.deploy as deploy
    import autotune.cli.results as results

    screen = io.StringIO()
    console = Console(width=width, file=screen, highlight=False, soft_wrap=True)
    for module in (common, results, deploy):
        monkeypatch.setattr(module, "out", console)
    show()
    return screen.getvalue()


def pieces(word: str) -> set[str]:
    """Every run of a word's consecutive pieces, a piece ending at a `-` or `_`."""
    parts = re.findall(r"[^-_]*[-_]+|[^-_]+", word)
    return {"".join(parts[i:j]) for i in range(len(parts)) for j in range(i + 1, len(parts) + 1)}


# What only a narrow terminal shows: the headings of a table split in two, and of the list of
# changes below a table too narrow for them.
NARROW_ONLY = "(continued) what each trial front member changes from baseline:"


def assert_unbroken(narrow: str, wide: str, width: int) -> None:
    words = set().union({""}, *(pieces(w.strip("#:")) for w in f"{BOX.sub(' ', wide)} {NARROW_ONLY}".split()))
    lines = narrow.splitlines()
    assert lines and max(map(len, lines)) <= width, narrow
    broken = [w for line in lines for w in BOX.sub(" ", line).split() if w.strip("#:") not in words]
    assert not broken, (broken, narrow)


def trial_table():
    from autotune.cli.results import print_trials

    data = study()
    print_trials(data)


def pareto():
    from autotune.cli.results import print_front

    print_front(study(), "a-study-with-a-long-name")


def validate(tmp_path):
    """`validate`'s table of the extended space (its longest parameter and flag names)."""
    from autotune.core.space.search_space import ModelContext, inapplicable
    from autotune.shell.bench.files import read_model_info, read_space
    from autotune.study.output.tables import space_table

    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(GLM_MOE_MTP_CONFIG))
    space = read_space(str(REPO / "search_spaces" / "extended.yaml"))
    ctx = ModelContext(read_model_info(str(model)), 4096)
    skip = inapplicable(space, ctx)
    return lambda: common.print_table(lambda width: space_table(space, skip, width))


@pytest.mark.parametrize("table", ["trials", "pareto", "validate"])
@pytest.mark.parametrize("width", [80, 100])
def test_no_table_breaks_a_word_at_80_columns(monkeypatch, tmp_path, table, width):
    show = {"trials": trial_table, "pareto": pareto, "validate": validate(tmp_path)}[table]
    narrow, wide = render(monkeypatch, width, show), render(monkeypatch, 10_000, show)
    assert_unbroken(narrow, wide, width)
    for name in ("low-concurrency", "high-concurrency", "shared-prefix", "no-prefix-cache", LONG,
                 "output throughput", "median TTFT") if table != "validate" else (
                     "optimization_level", "--optimization-level", "cp_kv_cache_interleave_size"):
        assert name in wide  # the wide table holds every name whole


def test_the_trial_and_front_tables_label_a_metric_by_its_registry_label_under_its_profile(
        monkeypatch):
    wide = render(monkeypatch, 10_000, pareto)
    assert "output throughput" in wide and "output_throughput" not in wide
    narrow = render(monkeypatch, 80, pareto)
    assert "low-" in narrow and "concurrency" in narrow and "…" not in narrow


@pytest.mark.parametrize("text, width, lines", [
    ("low-concurrency", 12, ["low-", "concurrency"]),
    ("output_throughput", 8, ["output_", "throughput"]),  # "throughput": 10
    ("--max-num-batched-tokens", 12, ["--max-num-", "batched-", "tokens"]),
    ("output throughput", 12, ["output", "throughput"]),
    ("mean E2EL", 16, ["mean E2EL"]),
    ("cp_kv_cache_interleave_size", None, ["cp_kv_cache_interleave_size"]),
], ids=["profile", "metric-key", "flag", "label", "fits", "whole"])
def test_a_name_breaks_only_after_a_dash_an_underscore_or_at_a_space(text, width, lines):
    assert breakable(text, width).split("\n") == lines  # a piece longer than width stays whole
