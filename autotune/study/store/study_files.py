"""Deleting a study: what it holds outside its trials' rows (``StudyFiles``: the artifact files
the dashboard's store keeps for it and its trials, its trials' working folders, its default
report folder), and the deletion itself. Asking the user is the CLI's; nothing here prints."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.artifacts import FileSystemArtifactStore, get_all_artifact_meta
from optuna.artifacts.exceptions import ArtifactNotFound
from optuna.trial import TrialState

from autotune.errors import ConfigError
from autotune.study.store import optuna_internals
from autotune.study.store.storage import storage_errors

# Under the workdir: the artifact store shared by every study, and the per-study folders that
# `run`/`confirm` (trials/<study>/) and `report` (reports/<study>/) write.
ARTIFACTS = "artifacts"
STUDY_FOLDERS = ("trials", "reports")


@dataclass(frozen=True)
class StudyFiles:
    """What deleting the study ``name`` removes besides its rows in the storage."""

    name: str
    trials: int
    running: tuple[int, ...]  # trials a worker may still be running (or a dead one left)
    artifact_ids: tuple[str, ...]  # in the workdir's artifact store, each a file there
    artifacts: Path  # the artifact store's folder
    folders: tuple[Path, ...]  # the study's own folders under the workdir that exist

    @property
    def text(self) -> str:
        """'6 trials (1 running), 31 artifact files in studies/artifacts, studies/trials/s'."""
        running = f" ({len(self.running)} running: stop their workers first)" if self.running else ""
        files = sum((self.artifacts / a).is_file() for a in self.artifact_ids)
        parts = [f"{self.trials} trial{'s' * (self.trials != 1)}{running}",
                 f"{files} artifact file{'s' * (files != 1)} in {self.artifacts}",
                 *(f"{f}/" for f in self.folders)]
        return ", ".join(parts)


def study_files(study: optuna.Study, workdir: Path) -> StudyFiles:
    """What ``study`` keeps under ``workdir`` (read only)."""
    storage = optuna_internals.storage_of(study)
    trials = study.get_trials(deepcopy=False)
    ids = [m.artifact_id for m in get_all_artifact_meta(study)]
    for t in trials:
        ids += [m.artifact_id for m in get_all_artifact_meta(t, storage=storage)]
    folders = []
    for kind in STUDY_FOLDERS:
        base, folder = workdir / kind, workdir / kind / study.study_name
        # A name with a path in it ("../x") never reaches outside its kind's folder.
        if folder.is_dir() and folder.resolve().parent == base.resolve():
            folders.append(folder)
    return StudyFiles(study.study_name, len(trials),
                      tuple(t.number for t in trials if t.state == TrialState.RUNNING),
                      tuple(dict.fromkeys(ids)), workdir / ARTIFACTS, tuple(folders))


def refuse_running(files: StudyFiles, *, force: bool) -> None:
    """Refuse (``ConfigError``, nothing deleted) to delete a study whose trials are still
    running, unless ``force``: a live worker would go on writing to a study that is gone. A
    worker that died leaves its trials running too: ``force`` is for that."""
    if files.running and not force:
        numbers = ", ".join(f"#{n}" for n in files.running)
        raise ConfigError(
            f"delete-study --study {files.name!r}: {len(files.running)} trial(s) still running "
            f"({numbers}); stop their workers first, or pass --force where none is alive "
            "(nothing deleted)")


def delete_study(study: optuna.Study, files: StudyFiles, *, force: bool = False) -> None:
    """Delete ``study`` from its storage, then the files ``files`` lists (an artifact file
    already gone is skipped); refused while trials are running, unless ``force``
    (``refuse_running``). The rows go first: files left by an interruption are unreferenced,
    never a study pointing at files that are gone."""
    refuse_running(files, force=force)
    storage = optuna_internals.storage_of(study)
    with storage_errors(f"--study {files.name!r}: cannot delete it"):
        optuna.delete_study(study_name=files.name, storage=storage)
    if files.artifacts.is_dir():
        store = FileSystemArtifactStore(str(files.artifacts))
        for artifact_id in files.artifact_ids:
            try:
                store.remove(artifact_id)
            except ArtifactNotFound:
                pass
    for folder in files.folders:
        shutil.rmtree(folder)
