"""Reading a finished study: trial records for analysis, baseline, and exported launch flags.

The bridge between Optuna's storage and the pure analysis in ``core.analysis``.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

import optuna
import yaml
from optuna.trial import FrozenTrial

from autotune.core.analysis import recommend
from autotune.core.flags import argv_to_options, options_to_config
from autotune.errors import ConfigError, StudyError
from autotune.study.records import baseline_of, profiles_of, records
from autotune.study.storage import redact

FORMATS = ("shell", "yaml", "json")


def load_existing(study_name: str, storage: str) -> optuna.Study:
    """An existing study; a one-line error listing the studies there otherwise."""
    try:
        names = optuna.get_all_study_names(storage)
    except Exception as exc:  # noqa: BLE001 - any storage error is the user's URL or file
        raise StudyError(f"--storage {redact(storage)!r}: cannot open: {exc}") from exc
    if study_name not in names:
        raise ConfigError(f"--study {study_name!r}: no such study in {redact(storage)}; "
                          f"studies there: {', '.join(names) or 'none'}")
    return optuna.load_study(study_name=study_name, storage=storage)


@dataclass(frozen=True)
class Export:
    """One trial's launch configuration, ready to paste or hand to ``vllm serve --config``."""

    trial: int
    model: str
    argv: list[str]

    def render(self, fmt: str) -> str:
        if fmt == "shell":
            return shlex.join(["vllm", "serve", self.model, *self.argv]) + "\n"
        config = options_to_config(self.model, argv_to_options(self.argv))
        if fmt == "yaml":
            header = f"# autotune: trial {self.trial}; use with: vllm serve --config FILE\n"
            return header + yaml.safe_dump(config, sort_keys=False)
        if fmt == "json":
            return json.dumps({"trial": self.trial, "model": self.model, "argv": self.argv,
                               "config": config}, indent=2) + "\n"
        raise ConfigError(f"--format {fmt!r}: valid: {', '.join(FORMATS)}")


def pick_trial(study: optuna.Study, *, number: int | None, use: str | None) -> FrozenTrial:
    """The trial named by ``--trial N`` or recommended ``--for USE``."""
    if number is not None:
        trials = {t.number: t for t in study.trials}
        if number not in trials or not trials[number].user_attrs.get("argv"):
            raise ConfigError(f"--trial {number}: no such trial with launch flags in the study")
        return trials[number]
    recs = records(study)
    rec = recommend(recs, profiles_of(study), use or "balanced", baseline_of(study, recs))
    return study.trials[rec.trial.number]


def export_of(t: FrozenTrial) -> Export:
    return Export(trial=t.number, model=t.user_attrs["model"], argv=list(t.user_attrs["argv"]))
