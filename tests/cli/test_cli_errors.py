"""Bad input to the reading commands: one line naming the flag, file or field and what is
valid, exit 2, and nothing written; reading commands never create or modify a storage."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import failed, files, one_line, served, store

REJECTION = ("Value error, max_num_batched_tokens (2048) is smaller than max_model_len (32768). "
             "This effectively limits the maximum sequence length to max_num_batched_tokens and "
             "makes vLLM reject longer sequences. Please increase max_num_batched_tokens or "
             "decrease max_model_len, or set the rope scaling so max_position_embeddings fits")


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    """A stored study: #0 the baseline, #1 served, #2 rejected by vLLM (a long message); its
    folder, stored once for the module."""
    folder = tmp_path_factory.mktemp("stored") / "studies"
    store(folder, [served(e2el_ms=1000, throughput=2000, reference="default"),
                   served(e2el_ms=900, throughput=1800, params={"max_num_seqs": 128}),
                   failed(REJECTION)], baseline="default")
    return folder


@pytest.fixture
def study(tmp_path, stored) -> str:
    """The stored study, copied into the test's folder (byte for byte); its URL."""
    shutil.copytree(stored, tmp_path / "studies")
    return f"sqlite:///{tmp_path / 'studies' / 'autotune.db'}"


def test_export_into_a_missing_folder_names_the_folder_and_writes_nothing(cli, study, tmp_path):
    before = files(tmp_path)
    code, out, err = cli("export", "--study", "s", "--storage", study, "--trial", "1",
                         "--output", "missing/serve.yaml", "--format", "yaml")
    assert (code, out) == (2, "")
    assert one_line(err) == ("--output missing/serve.yaml: folder missing/ does not exist; create "
                             "it or write into an existing folder")
    assert files(tmp_path) == before


def test_report_into_an_existing_file_is_refused_and_the_file_kept(cli, study, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    before = files(tmp_path)
    code, _, err = cli("report", "--study", "s", "--storage", study, "--out", "notes.txt")
    assert code == 2
    assert one_line(err).startswith("--out notes.txt: a file, not a folder")
    # --output, as `export` names it, is the same option
    assert cli("report", "--study", "s", "--storage", study, "--output", "notes.txt")[0] == 2
    assert files(tmp_path) == before


@pytest.mark.parametrize("command", [["studies"], ["pareto", "--study", "s"],
                                     ["trials", "--study", "s"]], ids=["studies", "pareto", "trials"])
def test_a_storage_that_is_a_text_file_is_one_line_and_left_as_it_is(cli, tmp_path, command):
    (tmp_path / "notes.txt").write_text("not a database\n")
    code, out, err = cli(*command, "--storage", "sqlite:///notes.txt")
    assert (code, out) == (2, "")
    assert one_line(err) == ("--storage sqlite:///notes.txt: notes.txt is not an SQLite database; "
                             "give the .db file that `autotune run` wrote (default "
                             "<workdir>/autotune.db)")
    assert (tmp_path / "notes.txt").read_text() == "not a database\n"


def test_studies_on_an_empty_file_writes_no_schema_into_it(cli, tmp_path):
    (tmp_path / "empty.db").touch()
    code, _, err = cli("studies", "--storage", "sqlite:///empty.db")
    assert code == 2 and "the file is empty, not a study storage" in one_line(err)
    assert (tmp_path / "empty.db").stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


@pytest.mark.parametrize("command", [
    ["studies"], ["pareto", "--study", "s"], ["recommend", "--study", "s"],
    ["trials", "--study", "s", "--format", "json"], ["export", "--study", "s", "--trial", "1"],
], ids=["studies", "pareto", "recommend", "trials", "export"])
def test_reading_commands_leave_the_storage_byte_for_byte_as_it_was(cli, study, tmp_path, command):
    before = files(tmp_path)
    assert list(before) == ["studies/autotune.db"]
    code, out, err = cli(*command, "--storage", study)
    assert code == 0, err
    assert out
    assert files(tmp_path) == before  # no -wal, -shm or journal left, no byte changed


def test_a_profile_field_of_the_wrong_type_is_named_with_what_is_valid(cli, tmp_path):
    (tmp_path / "profiles.yaml").write_text("chat:\n  num_prompts: abc\n")
    code, _, err = cli("run", "--profile", "chat", "--profile-file", "profiles.yaml", "--dry-run")
    assert code == 2
    assert one_line(err) == ("profiles.yaml: profile 'chat': num_prompts must be a whole number, "
                             "got 'abc'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profiles.yaml"]


def test_a_rate_written_as_text_is_read_as_a_number():
    from autotune.core.workload.profiles import parse_profiles

    assert parse_profiles("p:\n  request_rate: inf\n  burstiness: '2'\n", "f")["p"].burstiness == 2.0


def test_an_unreachable_postgresql_is_exit_2_with_the_url_as_typed_and_its_password_hidden(cli, tmp_path):
    typed = "postgresql://bob:s3cret@127.0.0.1:1/studies"
    code, out, err = cli("studies", "--storage", typed)
    assert (code, out) == (2, "")
    line = one_line(err)
    assert line.startswith("--storage postgresql://bob:***@127.0.0.1:1/studies: cannot open it: ")
    assert "s3cret" not in err and "psycopg" not in line.split(": cannot open it")[0]
    assert list(tmp_path.iterdir()) == []


def test_exporting_a_rejected_trial_gives_vllms_reason_whole_words_only(cli, study):
    code, out, err = cli("export", "--study", "s", "--storage", study, "--trial", "2")
    assert (code, out) == (2, "")
    line = one_line(err)
    assert line.startswith("--trial 2: trial #2 is failed or infeasible (config_rejected: Value "
                           "error, max_num_batched_tokens (2048) is smaller than max_model_len")
    why = line.split("(config_rejected: ")[1].split("); export a feasible trial")[0]
    assert why.endswith("...") and REJECTION.startswith(why.removesuffix("..."))
    assert REJECTION[len(why.removesuffix("..."))] == " "  # cut between words, never inside one


def test_a_failure_line_is_cut_between_words():
    from autotune.core.deployment.failures import first_line

    assert first_line("alpha beta gamma", 100) == "alpha beta gamma"
    assert first_line("alpha beta gamma\nsecond", 100) == "alpha beta gamma"
    assert first_line("alpha beta gamma", 14) == "alpha beta..."
