"""Exported launch flags: a trial's configuration as a shell command, a ``vllm serve --config``
YAML file, or JSON; picked by number or by the recommendation for a use."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

import optuna
import yaml

from autotune.core.analysis.recommend import NoFeasibleTrial, recommend
from autotune.core.deployment.failures import first_line
from autotune.core.deployment.flags import argv_to_options, options_to_config
from autotune.core.trial.outcome import TrialOutcome
from autotune.errors import ConfigError
from autotune.study.store.records import outcomes, study_data

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
    """The trial named by ``--trial N`` or recommended ``--for USE`` (default balanced), with
    its launch flags: a trial imported without its model has none, and is refused."""
    flag = f"--trial {number}" if number is not None else f"--for {use or 'balanced'}"
    if number is not None:
        found = {t.number: t for t in outcomes(study)}
        if number not in found:
            raise ConfigError(f"{flag}: no such finished trial in the study")
        t = found[number]
        if not (t.feasible or t.dominated):
            why = (f"{t.failure.name}: {first_line(t.failure_message, 300)}" if t.failure
                   else t.status)
            raise ConfigError(f"{flag}: trial {t.label} is failed or infeasible ({why}); "
                              "export a feasible trial (`autotune pareto` lists the front)")
    else:
        try:
            t = recommend(study_data(study), use or "balanced").trial
        except NoFeasibleTrial as exc:
            raise ConfigError(f"{flag}: {exc}") from None
    if t.argv:
        return t
    if t.imported_from:
        raise ConfigError(f"{flag}: trial {t.label} was imported from {t.imported_from} without its "
                          f"model, so it has no launch flags; import the file again into a new study "
                          f"with --model PATH (the model the results were measured with)")
    raise ConfigError(f"{flag}: trial {t.label} has no launch flags (it never deployed)")


def export_of(t: TrialOutcome) -> Export:
    return Export(trial=t.number, model=t.model, argv=list(t.argv))

