"""Results of a study of real CPU runs: pareto, recommend, export, report, import-results."""

from __future__ import annotations

import json
import re
import shlex

import pytest
import yaml

from autotune.core.deployment.baseline import command_words, options_to_argv
from autotune.core.deployment.flags import argv_to_options
from tests.helpers import GLM_MOE_MTP_CONFIG, SPACES, autotune, load

# Two of the reference configurations, measured elsewhere (the reference space: TP 2, 81920).
RESULTS = """reference,profile,output_throughput,mean_e2el_ms
opt3-baseline,low-concurrency,264.9,1930.8
opt3-baseline,high-concurrency,1663.3,9120.0
opt0,low-concurrency,43.4,11796.9
opt0,high-concurrency,1390.0,10950.0
"""


def test_argv_round_trips_through_options():
    argv = ["--tensor-parallel-size", "2", "--no-enable-expert-parallel", "--speculative-config",
            '{"method":"mtp","num_speculative_tokens":1}', "--performance-mode", "throughput"]
    assert options_to_argv(argv_to_options(argv)) == argv


def test_importing_the_reference_studys_numbers_creates_the_expected_trials_and_a_report(
        tmp_path, cli, pyplot_imported):
    root = tmp_path
    code, _, err = cli("--workdir", str(root / "studies"), "import-results",
                       str(SPACES / "reference-results.csv"), "--study", "published")
    assert code == 0, err
    study = load(root, "published")
    by_ref = {t.user_attrs["reference"]: t for t in study.trials}
    # opt1 and opt2 lack high-concurrency output throughput: derived from req/s x 256 tokens.
    assert sorted(by_ref) == ["no-mtp", "opt0", "opt1", "opt2", "opt3-baseline"]
    assert by_ref["opt3-baseline"].values == [1930.785, 1663.33]
    assert by_ref["opt1"].values[1] == pytest.approx(6.523 * 256)
    assert by_ref["opt1"].user_attrs["derived"] == ["low-concurrency:output_throughput",
                                                    "high-concurrency:output_throughput"]
    assert by_ref["no-mtp"].params["mtp"] is False and by_ref["opt0"].params["optimization_level"] == 0
    code, _, err = cli("--workdir", str(root / "studies"), "report", "--study", "published",
                       "--out", str(root / "rep"))
    assert code == 0, err
    md = (root / "rep" / "report.md").read_text()
    # The reference study's conclusions from its own numbers, with the honesty a file without
    # repeats allows (assumed noise): opt0's loss and MTP's gain at low concurrency are beyond
    # it; MTP's loss at high concurrency is not, so the sign flip is not claimed.
    assert "| optimization_level | 3 → 0 | low-concurrency | output_throughput | -83.6% [" in md
    assert "| mtp | True → False | low-concurrency | output_throughput | -22.9% [" in md
    assert "| mtp | True → False | high-concurrency | output_throughput | no effect detected (+7.3% [" in md
    assert "change sign between profiles (both intervals exclude zero): none." in md
    assert "mtp=False (output_throughput)" in md  # listed as opposite point estimates only
    assert "Noise per objective: low-concurrency:mean_e2el_ms: 8.0% (assumed)" in md
    assert (root / "rep" / "front.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def cli(cli, tmp_path):
    """The shared in-process command line, in a folder holding ``results.csv``."""
    (tmp_path / "results.csv").write_text(RESULTS)
    return cli


def test_an_import_with_its_model_exports_the_launch_flags_of_each_configuration(tmp_path, cli):
    model = tmp_path / "model"  # native context 32768: the space's 81920 needs YaRN x2.5
    model.mkdir()
    (model / "config.json").write_text(json.dumps(GLM_MOE_MTP_CONFIG))
    assert cli("import-results", "results.csv", "--study", "measured", "--model", str(model))[0] == 0
    code, shell, err = cli("export", "--study", "measured", "--for", "interactive")
    assert code == 0, err
    words = [w for w in shlex.split(shell, comments=True) if w != "\n"]
    assert words[:3] == ["vllm", "serve", str(model)]  # opt3-baseline: the lower E2EL at low load
    options = argv_to_options(words[3:])
    assert {k: options[k] for k in ("--tensor-parallel-size", "--max-model-len", "--optimization-level",
                                    "--performance-mode", "--enable-expert-parallel")} == {
        "--tensor-parallel-size": 2, "--max-model-len": 81920, "--optimization-level": 3,
        "--performance-mode": "throughput", "--enable-expert-parallel": True}
    assert options["--hf-overrides"]["rope_parameters"]["factor"] == 2.5
    assert options["--speculative-config"] == {"method": "mtp", "num_speculative_tokens": 1}
    code, text, err = cli("export", "--study", "measured", "--trial", "1", "--format", "yaml")
    assert code == 0, err
    config = yaml.safe_load(text)
    assert config["model"] == str(model) and config["optimization-level"] == 0  # opt0


@pytest.mark.parametrize("pick", [["--for", "throughput"], ["--trial", "0"]], ids=["for-use", "trial"])
def test_an_import_without_its_model_is_refused_by_export_in_one_line_naming_the_flag(cli, pick):
    assert cli("import-results", "results.csv", "--study", "measured")[0] == 0
    code, out, err = cli("export", "--study", "measured", *pick)
    assert (code, out) == (2, "")  # never a `vllm serve ''` with no flags
    [line] = err.strip().splitlines()
    assert line.startswith(f"autotune: error: {' '.join(pick)}: trial #") and "results.csv without its " \
        "model, so it has no launch flags" in line and "with --model PATH" in line


@pytest.mark.slow
def test_pareto_recommend_and_report_on_a_study_of_real_runs(four_trials):
    root, _, _ = four_trials
    from autotune.study.store.records import study_data

    pareto = autotune(root, "pareto", "--study", "s4")
    assert pareto.returncode == 0, pareto.stderr
    title = " ".join(pareto.stdout.split())  # the title wraps at the terminal's width
    assert "the front (s4): mean E2EL at low-concurrency (ms) against output throughput" in title
    front = study_data(load(root, "s4")).front()
    assert front and all(f"#{t.number}" in pareto.stdout for t in front)
    for use in ("interactive", "throughput", "balanced"):
        r = autotune(root, "recommend", "--study", "s4", "--for", use, "--explain")
        assert r.returncode == 0 and f"{use}: Trial #" in r.stdout, r.stderr
        assert "[" in r.stdout  # every number with its interval
    rep = autotune(root, "report", "--study", "s4", "--out", str(root / "report-s4"))
    assert rep.returncode == 0, rep.stderr
    html = (root / "report-s4" / "report.html").read_text()
    assert "<img src=\"front.png\"" in html and "engine_died" in html
    # vLLM's sampling seed does nothing at temperature 0: no effect is claimed for it (where the
    # sampler drew no pair differing in it alone, there is no row at all: the synthetic tests of
    # core/analysis/effects.py show a null parameter coming out as "no effect").
    md = (root / "report-s4" / "report.md").read_text()
    seed_rows = [row for row in md.splitlines() if row.startswith("| sampling_seed |")]
    assert all("| no effect detected" in row or "| withheld:" in row for row in seed_rows), seed_rows
    png = root / "report-s4" / "front.png"
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_exports_carry_no_secret_and_the_yaml_is_what_vllm_parses_back_to_the_same_argv(four_trials):
    from autotune.shell.server.validation import VllmValidator

    root, model, _ = four_trials
    shell = autotune(root, "export", "--study", "s4", "--trial", "0", "--format", "shell").stdout
    command = command_words([w for w in shlex.split(shell, comments=True) if w != "\n"])
    assert command.words[:2] == ("--model", model)  # the CPU build's module entry point
    words = ["x", "x", "x", *command.words[2:]]
    js = json.loads(autotune(root, "export", "--study", "s4", "--trial", "0", "--format", "json").stdout)
    assert js["flags"] == words[3:]
    out = root / "serve.yaml"
    r = autotune(root, "export", "--study", "s4", "--trial", "0", "--format", "yaml", "--output", str(out))
    assert r.returncode == 0, r.stderr
    config = yaml.safe_load(out.read_text())
    assert config["model"] == model and "api-key" not in config and "port" not in config
    validator = VllmValidator()
    from_file = validator.config_file_argv(str(out))
    i = from_file.index("--model")
    assert vars(validator.engine_args(from_file[i + 1], from_file[:i] + from_file[i + 2:])) == \
        vars(validator.engine_args(model, words[3:]))
    key = re.compile(r"at-[A-Za-z0-9_-]{32}")  # the form of autotune's per-deployment API keys
    artifacts = [p.read_text(errors="replace") for p in (root / "studies" / "artifacts").rglob("*")
                 if p.is_file()]
    for text in (shell, out.read_text(), json.dumps(js), *artifacts):
        assert not key.search(text) and "--api-key" not in text


@pytest.mark.slow
def test_export_verify_relaunches_and_reports_the_difference(four_trials):
    root, _, _ = four_trials
    r = autotune(root, "export", "--study", "s4", "--trial", "0", "--verify")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "stored vs relaunched" in r.stdout
    assert "low-concurrency" in r.stdout and "output_throughput" in r.stdout and "%" in r.stdout
    assert len(load(root, "s4").trials) >= 4


@pytest.mark.slow
def test_confirm_redeploys_the_finalists_in_rounds_and_the_report_uses_them(four_trials):
    from autotune.study.store.state import read_confirmed
    from tests.helpers import vllm_processes

    root, model, _ = four_trials
    r = autotune(root, "confirm", "--study", "s4", "--finalists", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    # Every finalist is deployed once; later steps only where a pick is still undecided.
    assert "confirm step 1 of up to" in r.stderr and "deployment 1 of 2: trial #" in r.stderr
    confirmed = read_confirmed(load(root, "s4"))
    assert 0 in confirmed  # the baseline, o0
    assert all(by for by in confirmed.values())
    # Stored one group per deployment, each deployment's runs together; two finalists and two
    # rounds allow four deployments in all, at least one each.
    deployments = {n: max(len(res.deployment_sizes) for res in by.values())
                   for n, by in confirmed.items()}
    assert all(n >= 1 for n in deployments.values()) and sum(deployments.values()) <= 4
    assert all(sum(res.deployment_sizes) == len(res.runs)
               for by in confirmed.values() for res in by.values())
    rep = autotune(root, "report", "--study", "s4", "--out", str(root / "report-confirmed"))
    assert rep.returncode == 0, rep.stderr
    assert "confirmed by redeployment" in (root / "report-confirmed" / "report.md").read_text()
    assert vllm_processes(model) == []
