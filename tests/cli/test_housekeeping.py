"""Housekeeping: --study may be left out where the storage holds one study; `delete-study`
deletes a study with its artifacts and folders, only when the user said so; the dashboard
saves notes into an existing storage and never creates one."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from wsgiref.util import setup_testing_defaults

import optuna
import pytest
from optuna.artifacts import FileSystemArtifactStore, upload_artifact
from optuna.trial import TrialState

from autotune.core.maths.durations import duration_text
from autotune.study.store.storage import Heartbeat, close_readers, open_storage
from tests.helpers import files, make_plan, one_line, served, store

TRIALS = [served(e2el_ms=1000, throughput=2000, reference="default"),
          served(e2el_ms=900, throughput=1800, params={"max_num_seqs": 128})]


@pytest.fixture
def one_study(tmp_path, built_once) -> Path:
    """studies/autotune.db holding the study 's' (the baseline #0 and #1), stored once per
    process and copied into the test's folder (conftest's ``built_once``)."""
    built_once("housekeeping: s", lambda f: store(f / "studies", TRIALS, baseline="default"),
               tmp_path)
    return tmp_path / "studies"


@pytest.fixture
def two_studies(tmp_path, built_once) -> Path:
    """``one_study`` with a second study, 'other', of the same trials."""
    def build(folder: Path) -> None:
        store(folder / "studies", TRIALS, baseline="default")
        store(folder / "studies", TRIALS, name="other", baseline="default")
    built_once("housekeeping: s, other", build, tmp_path)
    return tmp_path / "studies"


@pytest.fixture
def with_artifacts_of_s(tmp_path, built_once) -> Path:
    """``one_study`` where 's' has an artifact, a failed trial #2 with one, and its trials' and
    report folders (``with_artifacts``)."""
    def build(folder: Path) -> None:
        store(folder / "studies", TRIALS, baseline="default")
        with_artifacts(folder / "studies", "s")
    built_once("housekeeping: s with artifacts", build, tmp_path)
    return tmp_path / "studies"


def with_artifacts(folder: Path, name: str) -> list[str]:
    """Give study ``name`` in ``folder`` an artifact of its own and a failed trial #2 with one, and
    its trials' and report folders, as `run` and `report` leave them; the artifact ids."""
    rdb = open_storage(f"sqlite:///{folder / 'autotune.db'}", Heartbeat())
    study = optuna.load_study(study_name=name, storage=rdb)
    (folder / "artifacts").mkdir(exist_ok=True)
    artifacts = FileSystemArtifactStore(str(folder / "artifacts"))
    ids = []
    crashed = study.ask()  # a trial's artifacts are uploaded while it runs
    for owner, text in ((study, "front.png"), (crashed, "server.log")):
        source = folder / text
        source.write_text(f"{name} {text}")
        ids.append(upload_artifact(artifact_store=artifacts, file_path=str(source),
                                   study_or_trial=owner))
        source.unlink()
    study.tell(crashed, state=TrialState.FAIL)
    rdb.engine.dispose()
    for kind in ("trials", "reports"):
        (folder / kind / name).mkdir(parents=True)
        (folder / kind / name / "kept.txt").write_text(name)
    return ids


# ---------------------------------------------------------------- --study left out

@pytest.mark.parametrize("command", [["pareto"], ["trials", "--format", "json"], ["recommend"],
                                     ["export", "--trial", "1"]],
                         ids=["pareto", "trials", "recommend", "export"])
def test_without_study_a_reading_command_reads_the_storages_only_study_and_writes_nothing(
        cli, one_study, tmp_path, command):
    before = files(tmp_path)
    code, named, err = cli(*command, "--study", "s")
    assert code == 0, err
    code, unnamed, err = cli(*command)
    assert code == 0, err
    assert unnamed == named
    assert files(tmp_path) == before  # no byte changed, no -wal or -shm left


def test_with_several_studies_a_missing_study_is_one_line_naming_them(cli, two_studies, tmp_path):
    before = files(tmp_path)
    code, out, err = cli("pareto")
    assert (code, out) == (2, "")
    assert one_line(err) == ("--study: sqlite:///studies/autotune.db holds 2 studies, name one: "
                             "other, s")
    assert files(tmp_path) == before


@pytest.mark.parametrize("command", [["pareto"], ["report"], ["confirm"], ["worker"]])
def test_without_study_or_storage_nothing_is_created(cli, tmp_path, command):
    code, out, err = cli(*command)
    assert (code, out) == (2, "")
    assert one_line(err).startswith("--storage sqlite:///studies/autotune.db: no such file")
    assert list(tmp_path.iterdir()) == []


def test_the_confirmation_of_a_storage_with_several_studies_needs_study(cli, two_studies):
    code, _, err = cli("confirm")
    assert code == 2 and "holds 2 studies, name one: other, s" in one_line(err)


# ---------------------------------------------------------------- delete-study

def test_delete_study_with_yes_deletes_the_study_its_artifacts_and_folders_and_no_other(
        cli, two_studies):
    gone, kept = with_artifacts(two_studies, "s"), with_artifacts(two_studies, "other")
    code, out, err = cli("delete-study", "--study", "s", "--yes")
    assert code == 0, err
    assert out.split() == ("deleted study 's' in sqlite:///studies/autotune.db: 3 trials, 2 "
                           "artifact files in studies/artifacts, studies/trials/s/, "
                           "studies/reports/s/").split()
    assert [s.study_name for s in optuna.get_all_study_summaries(
        f"sqlite:///{two_studies / 'autotune.db'}")] == ["other"]
    assert sorted(p.name for p in (two_studies / "artifacts").iterdir()) == sorted(kept)
    assert not set(gone) & {p.name for p in (two_studies / "artifacts").iterdir()}
    assert [p.name for p in (two_studies / "trials").iterdir()] == ["other"]
    assert [p.name for p in (two_studies / "reports").iterdir()] == ["other"]
    code, out, err = cli("pareto")  # the one study left is read without --study
    assert code == 0 and "the front (other)" in out


def test_delete_study_without_a_terminal_or_yes_is_one_line_and_deletes_nothing(
        cli, with_artifacts_of_s, tmp_path):
    before = files(tmp_path)
    code, out, err = cli("delete-study", "--study", "s")  # pytest's stdin is no terminal
    assert (code, out) == (2, "")
    assert one_line(err) == ("delete-study --study 's': no terminal to confirm on; pass --yes "
                             "to delete without asking (nothing deleted)")
    assert files(tmp_path) == before


def test_delete_study_of_a_missing_study_is_one_line_naming_those_there(cli, one_study, tmp_path):
    before = files(tmp_path)
    code, out, err = cli("delete-study", "--study", "nope", "--yes")
    assert (code, out) == (2, "")
    assert one_line(err) == ("--study 'nope': no such study in sqlite:///studies/autotune.db; "
                             "studies there: s")
    assert files(tmp_path) == before


def test_delete_study_refuses_while_trials_run_unless_forced(cli, with_artifacts_of_s, tmp_path):
    """A worker still running a trial would go on writing to a study that is gone: --yes alone
    deletes nothing; --force (the worker died) deletes it."""
    running = optuna.load_study(study_name="s", storage=f"sqlite:///{with_artifacts_of_s / 'autotune.db'}")
    number = running.ask().number
    close_readers()
    before = files(tmp_path)
    code, out, err = cli("delete-study", "--study", "s", "--yes")
    assert (code, out) == (2, "")
    assert one_line(err) == (f"delete-study --study 's': 1 trial(s) still running (#{number}); "
                             "stop their workers first, or pass --force where none is alive "
                             "(nothing deleted)")
    assert files(tmp_path) == before
    code, out, err = cli("delete-study", "--study", "s", "--yes", "--force")
    assert code == 0, err
    assert optuna.get_all_study_summaries(f"sqlite:///{with_artifacts_of_s / 'autotune.db'}") == []


@pytest.mark.parametrize(("answer", "deleted"), [("y", True), ("yes\n", True), ("n", False),
                                                 ("", False)], ids=["y", "yes", "n", "enter"])
def test_delete_study_asks_and_deletes_only_on_yes(with_artifacts_of_s, tmp_path, monkeypatch,
                                                   capsys, answer, deleted):
    from autotune.cli import build_parser
    from autotune.cli.housekeeping import cmd_delete_study

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    before = files(tmp_path)
    asked = []
    args = build_parser().parse_args(["delete-study", "--study", "s"])
    code = cmd_delete_study(args, ask=lambda q: asked.append(q) or answer)
    assert asked == ["delete study 's' in sqlite:///studies/autotune.db: 3 trials, 2 artifact "
                     "files in studies/artifacts, studies/trials/s/, studies/reports/s/? [y/N] "]
    if deleted:
        assert code == 0 and list((with_artifacts_of_s / "artifacts").iterdir()) == []
        assert optuna.get_all_study_summaries(f"sqlite:///{with_artifacts_of_s / 'autotune.db'}") == []
    else:
        assert code == 1 and "nothing deleted" in capsys.readouterr().err
        assert files(tmp_path) == before


# ---------------------------------------------------------------- the dashboard

def wsgi_call(app, method: str, path: str, body: dict | None = None) -> tuple[str, bytes]:
    env: dict = {}
    setup_testing_defaults(env)
    data = json.dumps(body).encode() if body is not None else b""
    env.update(REQUEST_METHOD=method, PATH_INFO=path, CONTENT_TYPE="application/json",
               CONTENT_LENGTH=str(len(data)), **{"wsgi.input": io.BytesIO(data)})
    status = {}

    def start(s, headers, exc_info=None):
        status["s"] = s

    out = b"".join(app(env, start))
    return status["s"], out


def test_a_note_edited_in_the_dashboard_is_saved_in_the_storage(one_study, tmp_path, monkeypatch):
    """The dashboard as `autotune dashboard` opens it, served in process: the UI's note
    request is stored, and read back by a new connection."""
    from optuna_dashboard import wsgi

    from autotune.cli import build_parser
    from autotune.cli.results import cmd_dashboard

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AUTOTUNE_STORAGE", raising=False)
    answers = {}

    def serve(storage, *, host, port, artifact_store):
        app = wsgi(storage, artifact_store=artifact_store)
        status, body = wsgi_call(app, "GET", "/api/studies")
        [summary] = json.loads(body)["study_summaries"]
        answers["put"], _ = wsgi_call(app, "PUT", f"/api/studies/{summary['study_id']}/note",
                                      {"version": 1, "body": "kept: #1 for chat"})
        answers["host"] = host

    args = build_parser().parse_args(["dashboard"])
    assert cmd_dashboard(args, serve=serve) == 0
    assert answers == {"put": "204 No Content", "host": "127.0.0.1"}
    from optuna_dashboard._note import get_note_from_system_attrs

    reread = optuna.storages.RDBStorage(f"sqlite:///{one_study / 'autotune.db'}")
    attrs = reread.get_study_system_attrs(reread.get_study_id_from_name("s"))
    assert get_note_from_system_attrs(attrs, None)["body"] == "kept: #1 for chat"


@pytest.mark.parametrize("prepare", ["missing", "empty"])
def test_the_dashboard_never_creates_a_storage(cli, tmp_path, prepare):
    if prepare == "empty":
        (tmp_path / "studies").mkdir()
        (tmp_path / "studies" / "autotune.db").touch()
    before = files(tmp_path)
    code, out, err = cli("dashboard", "--port", "1")
    assert (code, out) == (2, "")
    assert one_line(err).startswith("--storage sqlite:///studies/autotune.db: ")
    assert files(tmp_path) == before and sorted(tmp_path.rglob("*")) == sorted(
        [tmp_path / "studies", tmp_path / "studies" / "autotune.db"] if prepare == "empty" else [])


def test_the_dashboard_of_a_missing_study_is_one_line(cli, one_study):
    code, out, err = cli("dashboard", "--study", "nope", "--port", "1")
    assert (code, out) == (2, "")
    assert one_line(err) == ("--study 'nope': no such study in sqlite:///studies/autotune.db; "
                             "studies there: s")


# ---------------------------------------------------------------- the dry run's last lines

@pytest.mark.vllm  # vLLM's defaults as the baseline: read by vLLM's parser
def test_a_dry_run_of_a_new_study_says_it_creates_it_at_the_platforms_prior(tmp_path):
    from autotune.core.plan.estimate import assumed_cost
    from autotune.study.run.session import resume_and_length

    plan = make_plan(tmp_path, trials=6, baseline="vllm-defaults")
    first, length = resume_and_length(plan, 1)
    assert first == f"creates study 's' in sqlite:///{tmp_path / 'studies' / 'autotune.db'}"
    prior = assumed_cost(plan.ctx.platform)
    assert length.startswith("estimated length: about ")
    assert f"6 trials x ~{duration_text(prior.trial_s)} on 1 slot, confirmation" in length
    assert "calibration" not in length  # off unless asked (#46)
    assert length.endswith(f"({prior.source})")
    assert not (tmp_path / "studies").exists()  # nothing created


@pytest.mark.vllm  # vLLM's defaults as the baseline: read by vLLM's parser
def test_a_dry_run_of_a_stored_study_says_it_resumes_it_at_its_measured_cost(tmp_path):
    from autotune.study.run.session import resume_and_length

    plan = make_plan(tmp_path, trials=6, baseline="vllm-defaults")
    walls = [dataclasses.replace(t, trial_wall_s=w) for t, w in zip(TRIALS, (100.0, 120.0),
                                                                      strict=True)]
    store(tmp_path / "studies", walls, baseline="default")
    before = files(tmp_path / "studies")
    first, length = resume_and_length(plan, 2)
    assert first == (f"resumes study 's' in sqlite:///{tmp_path / 'studies' / 'autotune.db'}: "
                     "2 trials done")
    # 4 trials left in 2 waves of ~120 s (the budget's next trial: the one after the first)
    # and at most 8 confirmation deployments (3 finalists and the baseline, 2 rounds) of
    # ~110 - 29 s of compile: 2 x 120 + 8 x 81 s.
    assert length == ("estimated length: about 14 min 48 s: 4 trials x ~2 min on 2 slots, "
                      "confirmation up to 8 deployments of ~1 min 21 s "
                      "(measured: 2 served trials of this study, priced as the time budget prices "
                      "the next (the first deployment's cold start excluded), start-up ~1 min "
                      "15 s of a trial)")
    close_readers()  # as `main` does when a command ends
    assert files(tmp_path / "studies") == before


def test_a_dry_run_of_a_new_study_takes_the_cost_of_another_study_of_the_same_model(tmp_path):
    from autotune.study.run.session import resume_and_length

    plan = make_plan(tmp_path, trials=6, name="new")
    same = [dataclasses.replace(t, trial_wall_s=100.0, model=plan.model.name) for t in TRIALS]
    store(tmp_path / "studies", same, name="old", baseline="default")
    store(tmp_path / "studies", TRIALS, name="other-model", baseline="default")
    first, length = resume_and_length(plan, 1)
    assert first.startswith("creates study 'new' in ")
    assert length.endswith(f"(measured: 2 served trials of other studies of {plan.model.name} "
                           "in this storage, priced as the time budget prices the next (the first "
                           "deployment's cold start excluded), start-up ~1 min 15 s of a trial)")


@pytest.mark.vllm  # vLLM's defaults as the baseline: read by vLLM's parser
def test_a_dry_run_counts_one_trial_in_the_singular(tmp_path):
    from autotune.study.run.session import resume_and_length

    plan = make_plan(tmp_path, trials=6, baseline="vllm-defaults")
    store(tmp_path / "studies", TRIALS[:1], baseline="default")
    first, _ = resume_and_length(plan, 1)
    close_readers()
    assert first.endswith(": 1 trial done")
