"""Exported launch flags: a trial's configuration as a shell command, a ``vllm serve --config``
YAML file, or JSON; picked by number or by the recommendation for a use."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

import optuna
import yaml

from autotune.core.analysis.recommend import NoFeasibleTrial, recommend
from autotune.core.deployment.flags import argv_to_options, options_to_config
from autotune.core.trial.outcome import TrialOutcome
from autotune.errors import ConfigError
from autotune.study.records import outcomes, study_data

EXPORT_FORMATS = ("shell", "yaml", "json")


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
        raise ConfigError(f"--format {fmt!r}: valid: {', '.join(EXPORT_FORMATS)}")


def pick_trial(study: optuna.Study, *, number: int | None, use: str | None) -> TrialOutcome:
    """The trial named by ``--trial N`` or recommended ``--for USE`` (default balanced)."""
    if number is not None:
        found = {t.number: t for t in outcomes(study)}
        if number not in found or not found[number].argv:
            raise ConfigError(f"--trial {number}: no such finished trial with launch flags in the study")
        return found[number]
    try:
        return recommend(study_data(study), use or "balanced").trial
    except NoFeasibleTrial as exc:
        raise ConfigError(f"--for {use or 'balanced'}: {exc}") from None


def export_of(t: TrialOutcome) -> Export:
    return Export(trial=t.number, model=t.model, argv=list(t.argv))
