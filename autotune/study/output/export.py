"""Exported launch flags: a trial's configuration as a shell command, a ``vllm serve --config``
YAML file, or JSON; picked by number or by the recommendation for a use. An export runs as
printed: the model by absolute path or hub id, the trial's entry point (on the CPU build, whose
``vllm`` script cannot find its package metadata, ``python -m vllm.entrypoints.openai.api_server``)
and the environment the measurement needed (never a key). A trial stored before autotune recorded
its entry point is exported as ``vllm serve`` without an environment."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import optuna
import yaml

from autotune.core.analysis.recommendation import NoFeasibleTrial, recommend
from autotune.core.deployment.failures import first_line
from autotune.core.deployment.flags import argv_to_options, options_to_config
from autotune.core.trial.outcome import TrialOutcome
from autotune.errors import ConfigError
from autotune.study.store.records import outcomes, study_data

EXPORT_FORMATS = ("shell", "yaml", "json")
# 2: ``flags`` (was ``argv``), ``entrypoint``, ``env``, ``command``; the model's absolute path
EXPORT_SCHEMA = 2
VLLM_SERVE = ("vllm", "serve")


@dataclass(frozen=True)
class Export:
    """One trial's launch configuration, ready to run or hand to ``vllm serve --config``."""

    trial: int
    model: str
    flags: tuple[str, ...]
    entrypoint: tuple[str, ...] = VLLM_SERVE  # the words before the model, as deployed
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def model_positional(self) -> bool:
        """``vllm serve MODEL``; a module entry point takes ``--model MODEL``."""
        return self.entrypoint[-1:] == ("serve",)

    @property
    def command(self) -> list[str]:
        """The server's argv, as the trial deployed it (without autotune's host, port, key)."""
        model = [self.model] if self.model_positional else ["--model", self.model]
        return [*self.entrypoint, *model, *self.flags]

    def _shell(self) -> str:
        """One command: a line per variable and per option, joined by continuations."""
        lines = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        model = [self.model] if self.model_positional else ["--model", self.model]
        lines.append(shlex.join([*self.entrypoint, *model]))
        groups: list[list[str]] = []
        for word in self.flags:  # each option with its values on a line of its own
            if word.startswith("--") or not groups:
                groups.append([word])
            else:
                groups[-1].append(word)
        lines += [shlex.join(g) for g in groups]
        indent = ["", *("  " for _ in lines[1:])]
        return f"# autotune: trial {self.trial}\n" + " \\\n".join(
            i + ln for i, ln in zip(indent, lines, strict=True)) + "\n"

    def render(self, fmt: str) -> str:
        if fmt == "shell":
            return self._shell()
        config = options_to_config(self.model, argv_to_options(self.flags))
        if fmt == "yaml":
            env = "".join(f"{k}={shlex.quote(v)} " for k, v in self.env.items())
            header = (f"# autotune: trial {self.trial}; run with:\n#   {env}"
                      f"{shlex.join(self.entrypoint)} --config FILE\n")
            return header + yaml.safe_dump(config, sort_keys=False)
        if fmt == "json":
            return json.dumps({"schema": EXPORT_SCHEMA, "trial": self.trial, "model": self.model,
                               "flags": list(self.flags), "entrypoint": list(self.entrypoint),
                               "env": dict(self.env), "command": self.command,
                               "config": config}, indent=2) + "\n"
        raise ConfigError(f"--format {fmt!r}: valid: {', '.join(EXPORT_FORMATS)}")


def writable_file(text: str, flag: str) -> Path:
    """The file ``flag`` names, checked before anything is read or written: its folder must
    exist, and it must not be a folder."""
    path = Path(text)
    if path.is_dir():
        raise ConfigError(f"{flag} {text}: a folder; give a file name, e.g. {path / 'serve.yaml'}")
    if not path.parent.is_dir():
        raise ConfigError(f"{flag} {text}: folder {path.parent}/ does not exist; create it or "
                          "write into an existing folder")
    return path


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
    return Export(trial=t.number, model=t.model, flags=tuple(t.argv),
                  entrypoint=tuple(t.entrypoint) or VLLM_SERVE, env=dict(t.server_env))

