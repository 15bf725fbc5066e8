"""Bad input as a new user types it: one line naming the flag and what is valid, exit code 2,
nothing written. Commands that only read never create a file, folder or database."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from autotune.cli import main
from tests.helpers import REPO


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def autotune_in(monkeypatch, capsys):
    """The real command line, in this process, run from a folder of the test's choosing."""
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)

    def run(cwd: Path, *args: str) -> Result:
        monkeypatch.chdir(cwd)
        code = main(list(args))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


DRY = ["run", "--dry-run", "--profile", "low-concurrency", "--profile", "high-concurrency"]


@pytest.mark.parametrize("args, message", [
    ([*DRY, "--storage", "mysql://x"], "--storage mysql://x: 'mysql' is not supported"),
    ([*DRY, "--storage", "sqlite:///missing/dir/x.db"], "folder missing/dir/ does not exist"),
    ([*DRY, "--slo", "low-concurrency:p99_ttft_ms<=-5"], "the limit must be a positive number"),
    ([*DRY, "--objective", "low-concurrency:speed"], "unknown metric 'speed'"),
    ([*DRY, "--trials", "0"], "--trials and --repeats must be >= 1"),
    ([*DRY, "--time-budget", "20 minutes"], "--time-budget '20 minutes': expected a duration such as 20m"),
    (["run", "--dry-run", "--profile", "capacity"], "a capacity profile needs at least one SLO"),
    ([*DRY, "--slo", "p99_ttft_ms<=500"], "--slo 'p99_ttft_ms<=500': name the profile it applies to"),
    (["run", "--dry-run", "--profile", "capacity", "--slo", "p99_tpot_ms<=50", "--load-range", "8,2"],
     "--load-range 8,2: capacity: need 0 < low < high"),
    (["run", "--dry-run", "--profile", "chat"], "--profile 'chat': unknown profile; valid: low-concurrency"),
    (["run", "--dry-run", "--profile", "chat", "--profile-file", "nowhere.yaml"], "nowhere.yaml"),
    (["run", "--dry-run", "--references", "nowhere-refs.yaml"], "--references nowhere-refs.yaml: no such file"),
    (["bench", "--url", "http://127.0.0.1:1", "--model", "m", "--vocab-size", "512", "--profile",
      "capacity"], "bench runs fixed workloads; a capacity profile searches its load"),
    (["pareto", "--study", "missing"], "autotune.db: no such file"),
    (["recommend", "--study", "missing", "--for", "balanced"], "no such file"),
    (["export", "--study", "missing"], "no such file"),
    (["report", "--study", "missing"], "no such file"),
    (["dashboard", "--study", "missing"], "no such file"),
    (["worker", "--study", "missing"], "no such file"),
    (["confirm", "--study", "missing", "--rounds", "0"], "--rounds 0: must be >= 1"),
    (["import-results", "missing.json", "--study", "s"], "missing.json: cannot read"),
    (["import-results", "results.txt", "--study", "s"], "results.txt: expected a .csv or .json file"),
    # argparse's own errors: its message, where help is, and no usage block
    (["run", "--trials", "abc"], "argument --trials: invalid int value: 'abc'; try autotune run --help"),
    (["pareto", "--no-such-flag"], "unrecognized arguments: --no-such-flag; try autotune pareto --help"),
    (["recommend", "--for", "fast"], "argument --for: invalid choice: 'fast' (choose from "
     "'interactive', 'throughput', 'balanced'); try autotune recommend --help"),
    (["bench", "--model", "m"], "the following arguments are required: --url, --profile; try "
     "autotune bench --help"),
    (["no-such-command"], "argument command: invalid choice: 'no-such-command'"),
], ids=["storage-dialect", "sqlite-missing-folder", "negative-slo", "bad-objective", "zero-trials", "bad-time-budget",
        "capacity-without-slo", "slo-without-profile", "bad-load-range", "unknown-profile",
        "missing-profile-file", "missing-references", "bench-capacity", "pareto", "recommend",
        "export", "report", "dashboard", "worker",
        "confirm-zero-rounds", "import-missing-file", "import-wrong-format", "argparse-bad-int",
        "argparse-unknown-flag", "argparse-bad-choice", "argparse-missing", "argparse-no-command"])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(autotune_in, tmp_path, args, message):
    result = autotune_in(tmp_path, *args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: error: ") and message in lines[0]
    assert list(tmp_path.iterdir()) == []  # no studies/, no database, no model


def test_help_is_argparses_own_usage_and_exits_0(autotune_in, tmp_path):
    result = autotune_in(tmp_path, "run", "--help")
    assert result.returncode == 0 and result.stdout.startswith("usage: autotune run")
    assert "--time-budget DURATION" in result.stdout and result.stderr == ""


def test_a_read_only_command_on_an_existing_storage_names_the_studies_there(autotune_in, tmp_path):
    created = autotune_in(tmp_path, "import-results", str(REPO / "search_spaces" / "reference-results.csv"),
                          "--study", "published")
    assert created.returncode == 0, created.stderr
    before = sorted(p.name for p in (tmp_path / "studies").iterdir())
    result = autotune_in(tmp_path, "pareto", "--study", "other")
    assert result.returncode == 2
    assert "no such study" in result.stderr and "studies there: published" in result.stderr
    assert sorted(p.name for p in (tmp_path / "studies").iterdir()) == before


@pytest.mark.parametrize("url", ["not-a-url", "localhost:8000", "ftp://host", "http://host:port",
                                 "http://127.0.0.1:8000/v1"],
                         ids=["no-scheme", "no-scheme-with-port", "ftp", "port-not-a-number", "path"])
def test_bench_takes_only_a_url_of_http_host_and_port(autotune_in, tmp_path, url):
    result = autotune_in(tmp_path, "bench", "--url", url, "--model", "m", "--vocab-size", "512",
                         "--profile", "low-concurrency")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"autotune: error: --url {url!r}: expected http(s)://host[:port], e.g. http://127.0.0.1:8000"]
    assert result.stdout == "" and list(tmp_path.iterdir()) == []


def test_bench_where_nothing_answers_stops_at_the_first_failure_in_one_line(autotune_in, tmp_path):
    from autotune.shell.server.processes import free_port

    url = f"http://127.0.0.1:{free_port()}"
    result = autotune_in(tmp_path, "bench", "--url", url, "--model", "m", "--vocab-size", "512",
                         "--token-ids", "--profile", "low-concurrency")
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"autotune: BenchmarkError: {url}: nothing answers (") and "is the " \
        "server up" in line
    assert result.stdout == ""  # no table of zeros


def test_bench_against_a_server_that_hangs_up_stops_at_its_first_connection(
        autotune_in, tmp_path):
    import socket
    import threading

    # A stand-in for a broken server (fault injection): it accepts and closes at once.
    listener = socket.create_server(("127.0.0.1", 0))
    connections = []

    def hang_up() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            connections.append(conn)
            conn.close()

    threading.Thread(target=hang_up, daemon=True).start()
    try:
        result = autotune_in(tmp_path, "bench", "--url", f"http://127.0.0.1:{listener.getsockname()[1]}",
                             "--model", "m", "--vocab-size", "512", "--token-ids",
                             "--profile", "low-concurrency")
    finally:
        listener.close()
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1
    # Disconnected, or reset where the close overtakes the request: either way, one line.
    assert "nothing answers (" in result.stderr and "is the server up" in result.stderr
    # aiohttp tries a GET again once on a closed connection; the profile would have sent 102.
    assert len(connections) <= 2


@pytest.mark.vllm
def test_a_profile_file_defines_workloads_and_its_errors_name_file_profile_and_field(
        autotune_in, tmp_path, tmp_path_factory):
    files = tmp_path_factory.mktemp("profiles")
    (files / "good.yaml").write_text("profiles:\n  chat: {input_len: 128, max_concurrency: 4}\n"
                                     "  peak: {capacity: {load: rate, slo: ['p99_ttft_ms<=900']}}\n")
    (files / "bad.yaml").write_text("chat: {input_len: 128, concurrency: 4}\n")
    result = autotune_in(tmp_path, "run", "--dry-run", "--profile", "chat", "--profile", "peak",
                         "--profile-file", str(files / "good.yaml"))
    assert result.returncode == 0, result.stderr
    assert "dry run: nothing launched, nothing written" in result.stdout  # both profiles known
    result = autotune_in(tmp_path, "run", "--dry-run", "--profile", "chat",
                         "--profile-file", str(files / "bad.yaml"))
    assert result.returncode == 2
    assert f"{files / 'bad.yaml'}: profile 'chat': unknown field(s) concurrency" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("width", [80, 200])
def test_the_trial_table_never_breaks_a_parameter_name_in_any_terminal(monkeypatch, width):
    import io

    from rich.console import Console

    import autotune.cli.common as common
    from autotune.cli.results import print_trials
    from autotune.core.analysis.study_data import StudyData, noise_of
    from autotune.core.trial.objectives import default_objectives
    from autotune.core.trial.outcome import ProfileResult, TrialOutcome
    from autotune.core.workload.profiles import get_profile

    screen = io.StringIO()
    monkeypatch.setattr(common, "out", Console(width=width, file=screen))
    run = {"mean_e2el_ms": 1234.5, "output_throughput": 1700.0}
    results = {p: ProfileResult(p, (run,)) for p in ("low-concurrency", "high-concurrency")}
    changed = {"cp_kv_cache_interleave_size": 16, "max_num_batched_tokens": 8192,
               "speculative_mtp": True}
    trials = [TrialOutcome(0, params={k: None for k in changed}, results=results),
              TrialOutcome(1, params=changed, results=results, reference="mtp-only")]
    objectives = default_objectives((get_profile("low-concurrency"), get_profile("high-concurrency")))
    defaults = {k: None for k in changed}
    print_trials(StudyData(tuple(trials), objectives, noise_of(trials), defaults=defaults))
    lines = screen.getvalue().splitlines()
    assert lines and max(len(line) for line in lines) <= width
    for name in changed:
        assert any(name in line for line in lines), (name, screen.getvalue())


@pytest.mark.parametrize("text, seconds", [("90s", 90.0), ("20m", 1200.0), ("2h", 7200.0),
                                           ("1h30m", 5400.0), (" 1.5H ", 5400.0)])
def test_a_duration_reads_in_hours_minutes_and_seconds(text, seconds):
    from autotune.core.maths.durations import parse_duration

    assert parse_duration(text, "--time-budget") == seconds


@pytest.mark.parametrize("text, message", [("", "expected a duration"), ("20", "expected a duration"),
                                           ("m", "expected a duration"), ("0m", "must be more than zero")])
def test_a_bad_duration_names_the_flag(text, message):
    from autotune.core.maths.durations import parse_duration
    from autotune.errors import ConfigError

    with pytest.raises(ConfigError, match=f"--time-budget {text!r}: {message}"):
        parse_duration(text, "--time-budget")


@pytest.mark.parametrize("boundary, cell", [((16, 32), "16 of 32"), ((64, None), "64+"),
                                            ((None, 1), "none")], ids=["bracketed", "top", "none"])
def test_a_capacity_cell_shows_the_load_met_and_the_one_missed(boundary, cell):
    from autotune.core.trial.capacity_search import Boundary, CapacitySearch
    from autotune.study.output.tables import capacity_cell

    load, fail = boundary
    found = CapacitySearch("cap", "concurrency", ("p99_ttft_ms<=2000",), Boundary(load, fail, load, "", 3))
    assert capacity_cell(found) == cell


JSONL = {"format": "jsonl", "path": "data.jsonl"}
BAD_DATA = {  # id: (dataset of profile 'data', the file's bytes or None for no file, message)
    "bad-json": (JSONL, b'{"prompt": "a b", "output_len": 4}\n{not json\n', "data.jsonl: line 2: not JSON"),
    "missing-prompt": (JSONL, b'{"output_len": 4}\n', "line 1: no prompt"),
    "negative-output-len": (JSONL, b'{"prompt": "a b", "output_len": -3}\n',
                            "line 1: output_len must be an integer >= 1, got -3"),
    "timestamps-on-some-lines": (JSONL, b'{"prompt": "a", "output_len": 4, "timestamp_ms": 0}\n'
                                        b'{"prompt": "b", "output_len": 4}\n',
                                 "line 2: timestamp_ms must be on every line or on none"),
    "not-utf8": (JSONL, b'{"prompt": "\xff\xfe", "output_len": 4}\n', "data.jsonl is not UTF-8 text"),
    "missing-file": (JSONL, None, "cannot read"),
    "unknown-format": ({"format": "csv", "path": "data.jsonl"}, b"", "dataset format 'csv' is not known"),
    "unknown-option": ({**JSONL, "block_size": 8}, b'{"prompt": "a", "output_len": 4}\n',
                       "dataset option(s) block_size are not jsonl's"),
    "malformed-sharegpt": ({"format": "sharegpt", "path": "data.jsonl"}, b'[{"turns": []}]',
                           "entry 1: no conversations list"),
    "malformed-mooncake": ({"format": "mooncake", "path": "data.jsonl"}, b'{"timestamp": 0, "input_length": 5}\n',
                           "line 1: missing field(s) output_length, hash_ids"),
}


def _data_profile(folder: Path, dataset: dict, content: bytes | None) -> Path:
    import json

    if content is not None:
        (folder / "data.jsonl").write_bytes(content)
    (folder / "p.yaml").write_text("data:\n  num_prompts: 4\n  warmup_requests: 1\n"
                                   f"  dataset: {json.dumps(dataset)}\n")
    return folder / "p.yaml"


@pytest.mark.vllm  # the dry run puts its flags to vLLM's parser
@pytest.mark.parametrize("dataset, content, message", BAD_DATA.values(), ids=BAD_DATA.keys())
def test_a_dry_run_in_a_fresh_folder_rejects_bad_data_without_the_model(
        autotune_in, tmp_path, tmp_path_factory, dataset, content, message):
    profile = _data_profile(tmp_path_factory.mktemp("data"), dataset, content)
    result = autotune_in(tmp_path, "run", "--dry-run", "--profile", "data", "--profile-file", str(profile))
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert list(tmp_path.iterdir()) == []  # no model generated, no database, no folder


@pytest.mark.vllm
def test_a_dry_run_without_the_model_passes_good_data_and_says_what_waits_for_the_model(
        autotune_in, tmp_path, tmp_path_factory):
    profile = _data_profile(tmp_path_factory.mktemp("data"), JSONL,
                            b'{"prompt": "the cache is warm", "output_len": 4}\n' * 5)
    result = autotune_in(tmp_path, "run", "--dry-run", "--profile", "data", "--profile-file", str(profile))
    assert result.returncode == 0, result.stderr
    assert "token lengths against the max model length" in result.stdout + result.stderr
    assert "dry run: nothing launched, nothing written" in result.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.vllm
def test_a_dry_run_whose_time_budget_decides_the_count_shows_the_references_and_a_few_samples(
        autotune_in, tmp_path):
    from autotune.study.run.session import DRY_RUN_SAMPLES

    result = autotune_in(tmp_path, *DRY, "--time-budget", "10m")
    assert result.returncode == 0, result.stderr
    commands = [line for line in result.stdout.splitlines() if "vllm serve" in line]
    assert 0 < len(commands) <= 10 + DRY_RUN_SAMPLES  # the reference study's ten, then samples
    assert "then sampled trials until the time budget ends" in result.stdout


def test_runs_opening_line_states_the_budget_that_will_end_it():
    from types import SimpleNamespace

    from autotune.core.plan.estimate import UNBOUNDED_TRIALS
    from autotune.study.output.progress import study_budget_text

    assert study_budget_text(SimpleNamespace(trials=5, time_budget_s=None)) == "5 trials"
    assert study_budget_text(SimpleNamespace(trials=5, time_budget_s=240.0)) == "5 trials or 4 min"
    # --time-budget without --trials: the time alone decides, not ten thousand trials
    assert study_budget_text(SimpleNamespace(trials=UNBOUNDED_TRIALS, time_budget_s=60.0)) == "1 min"


@pytest.mark.vllm
def test_a_dry_run_puts_every_planned_configuration_to_vllm_and_names_the_rejected_ones(
        autotune_in, tmp_path):
    from autotune.modelgen.checkpoints import write_config

    model = write_config(tmp_path / "model", kind="moe", mtp=True)  # native context 32768
    # The reference space (YaRN fixed on at 81920 tokens: nothing of it is rejected) and one
    # parameter whose value -1 vLLM refuses, asked for by the one reference.
    space = tmp_path / "space.yaml"
    space.write_text((REPO / "search_spaces" / "reference.yaml").read_text() + (
        "  - {name: max_num_seqs, type: categorical, choices: [8, -1], default: 8, "
        "flag: --max-num-seqs}\n"))
    refs = tmp_path / "refs.yaml"
    refs.write_text("configs:\n  - {name: too-few-seqs, params: {max_num_seqs: -1}}\n")
    result = autotune_in(tmp_path, "run", "--dry-run", "--model", str(model), "--space", str(space),
                         "--references", str(refs), "--seed-references", "--trials", "5")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert sum("(exploration " in line for line in lines) == 3  # mtp, -O3, both: then the reference
    named = next(i for i, line in enumerate(lines) if "(too-few-seqs): vllm serve" in line)
    assert lines[named + 1].startswith("  rejected by vLLM: ")
    assert "greater than or equal to 1" in lines[named + 1]
    assert sum(line.startswith("  rejected by vLLM") for line in lines) == 1
    assert ("vLLM's parser: 4 of 5 planned configuration(s) accepted, 1 rejected; a rejected one "
            "costs a validation, not one of the 5 trial(s)") in result.stdout


def test_a_malformed_space_is_one_line_exit_2_and_nothing_written(autotune_in, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("parameters:\n  - {name: mtp, type: categorical, choices: [], default: 1, flag: --a}\n")
    result = autotune_in(tmp_path, "--workdir", "work", "run", "--space", str(bad), "--model",
                         str(tmp_path), "--trials", "1")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"autotune: error: {bad}: parameter 'mtp': choices must be a non-empty list"]
    assert not (tmp_path / "work").exists()  # nothing launched, nothing written
