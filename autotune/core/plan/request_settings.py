"""The settings of a study's request, one record each: the flag, the ``StudyRequest`` field it
sets, its default (the record's own), how its text is read, its help. `run`'s parser and the
request made from its flags are both derived from ``REQUEST_SETTINGS``, so that a setting is
defined once. Pure: argparse itself stays in the CLI."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from autotune.core.analysis.recommendation import SMALLEST_DIFFERENCE, parse_smallest_difference
from autotune.core.deployment.baseline import VLLM_DEFAULTS
from autotune.core.maths.durations import parse_duration
from autotune.core.plan.confirmation import CONFIRM_ROUNDS
from autotune.core.plan.estimate import UNBOUNDED_TRIALS
from autotune.core.plan.study_request import DEFAULT_REFERENCES, DEFAULT_SPACE, SAMPLERS, StudyRequest
from autotune.core.space.exploration import EXPLORATIONS
from autotune.core.trial.precision import parse_precision

DEFAULTS = StudyRequest(profiles=())
_FIELDS = {f.name for f in fields(StudyRequest)}
_OWN = object()  # a setting's default: its field's in StudyRequest


@dataclass(frozen=True)
class Setting:
    """One flag of `run`. ``field`` None: a flag the CLI reads itself (where the references
    go). ``kind`` bool is a switch (``negatable``: --x/--no-x); ``parse`` reads the flag's text
    into the field's value (a duration, a percentage); ``many``: repeatable, a tuple."""

    flag: str
    field: str | None
    help: str
    kind: type = str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    many: bool = False
    negatable: bool = False
    parse: Callable[[str], Any] | None = None
    default: Any = _OWN

    def __post_init__(self) -> None:
        assert self.field is None or self.field in _FIELDS, self.field
        if self.default is _OWN:
            object.__setattr__(self, "default", getattr(DEFAULTS, self.field) if self.field else None)

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")

    def value(self, given: Any) -> Any:
        """The field's value from what the flag was given (None: not given, the default)."""
        if given is None:
            return self.default
        if self.parse is not None:
            return self.parse(given)
        return tuple(given) if self.many else given


REQUEST_SETTINGS = (
    Setting("--model", "model", "model folder or cached hub id (default without GPU: a generated "
            "tiny MoE+MTP model)"),
    Setting("--space", "space_path", f"search space (default {DEFAULT_SPACE})"),
    Setting("--references", None, f"reference configs (default {DEFAULT_REFERENCES})",
            default=DEFAULT_REFERENCES),
    Setting("--seed-references", None, "run the applicable reference configs after the baseline "
            "(enqueued once per study)", kind=bool, default=False),
    Setting("--baseline", "baseline", "what you run today, measured first and compared with every "
            f"pick: {VLLM_DEFAULTS} (default: no tuned flag, the model's native context); your own "
            "command ('vllm serve MODEL --max-num-seqs 128 ...') or flags ('--max-num-seqs 128'), "
            "read by vLLM's parser: the flags the space tunes set the baseline's values, every "
            "other one is kept on every trial and export; a vllm serve --config YAML, a file "
            "`autotune export` wrote; or a reference name of --references (docs/studies.md)",
            metavar="WHAT", default=VLLM_DEFAULTS),
    Setting("--exploration", "exploration", "after the baseline, measure first: order (default) "
            "the single changes the reference study's effects expect to help most, then the "
            "sampler; sampler: the sampler from the start (chosen by replay, docs/answers.md)",
            choices=EXPLORATIONS),
    Setting("--calibrate", "calibrate", "deploy the baseline a second time right after it is "
            "served, to measure the spread between deployments from the start (default off: the "
            "spread is inherited from this storage's studies of the same model, machine and vLLM, "
            "else assumed, and learned from confirmations; docs/noise.md)", kind=bool,
            negatable=True),
    Setting("--trials", "trials", f"study-wide budget of finished trials (default "
            f"{DEFAULTS.trials}; with --time-budget alone, the time decides)", kind=int),
    Setting("--time-budget", "time_budget_s", "wall clock for the study, confirmation included, "
            "e.g. 20m or 2h: no deployment starts whose expected end (at the measured cost of a "
            "deployment) passes it; a redeployment of each finalist whose verdict is in question "
            "is kept in reserve, and the confirmation is shrunk or skipped where it no longer fits",
            metavar="DURATION", parse=lambda text: parse_duration(text, "--time-budget")),
    Setting("--race", "race", "stop measuring a trial once the front beats it beyond the noise "
            "(off by default: docs/samplers.md says when it pays)", kind=bool),
    Setting("--cap-cuda-graphs", "cap_cuda_graphs", "capture CUDA graphs only up to the study's "
            "highest concurrency x (1 + speculative tokens), alike for every trial, the baseline "
            "and the export (off by default: docs/startup.md)", kind=bool),
    Setting("--study", "study_name", "study name (default: from model, space and profiles)"),
    Setting("--storage", "storage", "Optuna storage URL: sqlite:///file.db (one machine) or "
            "postgresql://user@host/db (several); default $AUTOTUNE_STORAGE, else "
            "sqlite:///<workdir>/autotune.db"),
    Setting("--repeats", "repeats", f"runs per profile per deployment (default {DEFAULTS.repeats}: "
            "a trial's interval comes from the spread between deployments, docs/noise.md)",
            kind=int),
    Setting("--seed", "seed", "sampler seed (reproducible studies)", kind=int),
    Setting("--sampler", "sampler", "tpe (default; chosen by replaying samplers against a "
            "recorded table, see docs/samplers.md), random, nsga2 or gp", choices=SAMPLERS),
    Setting("--objective", "objectives", "PROFILE:METRIC[:min|max] (repeatable; default: mean "
            "E2EL at the lowest concurrency against output throughput at the highest)", many=True),
    Setting("--slo", "slos", "repeatable: a constraint on a profile, e.g. 'high-concurrency:"
            "p99_ttft_ms<=5000', or the limits a capacity profile searches under, e.g. "
            "'p99_ttft_ms<=2000' (no profile: the capacity profile's)", many=True),
    Setting("--smallest-difference", "smallest_difference", "the smallest difference worth caring "
            "about, in percent (5% or 5: five percent): equivalent means within it; an undecided "
            "comparison says how many confirmation rounds would decide it at 80% power (default: "
            f"the study's own, else {SMALLEST_DIFFERENCE * 100:g}%)", metavar="PCT",
            parse=parse_smallest_difference),
    Setting("--precision", "precision", "a fixed profile's run stops once the 95% interval of every "
            "metric the study uses from it is within PCT of its value, at whole waves, after at "
            "least 10 requests and 2 waves, at most the profile's num_prompts (default: the "
            "balanced length, where more requests buy less than another deployment; 0: every run "
            "sends num_prompts; docs/precision.md)", metavar="PCT", parse=parse_precision),
    Setting("--confirm", "confirm", f"at the end, redeploy up to K front members and the baseline, "
            f"up to {CONFIRM_ROUNDS} interleaved rounds (default {DEFAULTS.confirm}; 0: off)",
            kind=int, metavar="K"),
    Setting("--max-model-len", "max_model_len", "override the space's deployment setting", kind=int),
    Setting("--tp", "tp", "override the space's tensor parallel size", kind=int),
)
SETTINGS_BY_FLAG = {s.flag: s for s in REQUEST_SETTINGS}


def request_fields(given: dict[str, Any]) -> dict[str, Any]:
    """``StudyRequest``'s fields from the flags' values by destination (``Setting.dest``; absent
    or None: not given). Without --trials, --time-budget alone decides the count."""
    values = {s.field: s.value(given.get(s.dest)) for s in REQUEST_SETTINGS if s.field}
    if given.get("trials") is None and values["time_budget_s"] is not None:
        values["trials"] = UNBOUNDED_TRIALS
    return values
