"""Workload profiles: the load a benchmark puts on a server. Pure values and their parser.

The built-in profiles and a user's ``--profile-file`` go through one parser (``parse_profiles``).
The built-in two are the reference study's (``vllm bench serve --dataset-name random``); at
concurrency 100 autotune sends 200 requests, two waves (`benchmarks/experiments/wave_spread.py`).
The rest: docs/workloads.md#built-in-profiles."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from autotune.core.metrics.slo import Slo, parse_limit
from autotune.core.workload.capacity_spec import CapacitySpec
from autotune.errors import ConfigError

BUILTIN_YAML = """
low-concurrency:
  max_concurrency: 2
high-concurrency:
  max_concurrency: 100
  num_prompts: 200             # two waves: one wave's runs spread 47%, two waves' 0.4% (docs/noise.md)
  warmup_requests: 4
capacity:
  num_prompts: 100            # per probe; at least 2 per concurrent slot
  warmup_requests: 4
  capacity: {load: concurrency, low: 1, high: 256}
"""


@dataclass(frozen=True)
class DatasetSpec:
    """A profile's ``dataset:``: the format, the file (absolute once read, with its content
    hash), and the format's options."""

    format: str
    path: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)
    sha256: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": self.format, **self.options}
        if self.path:
            out |= {"path": self.path, "sha256": self.sha256}
        return out


@dataclass(frozen=True)
class WorkloadProfile:
    """One workload: what is sent, how much of it, and at which concurrency and rate. With
    ``capacity`` set, the load is searched instead (``max_concurrency``/``request_rate`` are
    then the axis being searched)."""

    name: str
    input_len: int = 512
    output_len: int = 256
    range_ratio: float = 0.0  # lengths uniform in [len x (1 - r), len x (1 + r)], as vLLM's
    num_prompts: int = 100
    max_concurrency: int = 2
    request_rate: float = math.inf  # requests/s; inf sends as fast as concurrency allows
    burstiness: float = 1.0  # gamma shape of the arrival process; 1.0 is Poisson
    temperature: float = 0.0
    warmup_requests: int = 2  # sent before the measured run, never counted
    timeout_s: float = 600.0  # limit for the whole measured run
    capacity: CapacitySpec | None = None
    dataset: DatasetSpec | None = None  # None: random text of the lengths above
    token_ids: bool = False  # without a dataset: random token ids instead of text

    def __post_init__(self) -> None:
        for name in ("input_len", "output_len", "num_prompts", "max_concurrency"):
            if getattr(self, name) < 1:
                raise ConfigError(
                    f"profile {self.name!r}: {name} must be >= 1, got {getattr(self, name)}"
                )
        if self.request_rate <= 0 or self.burstiness <= 0:
            raise ConfigError(
                f"profile {self.name!r}: request_rate and burstiness must be > 0"
            )
        if self.warmup_requests < 0 or self.timeout_s <= 0:
            raise ConfigError(
                f"profile {self.name!r}: warmup_requests must be >= 0 and timeout_s > 0"
            )
        if not 0 <= self.range_ratio < 1:
            raise ConfigError(f"profile {self.name!r}: range_ratio must be in [0, 1), got "
                              f"{self.range_ratio}")
        if not isinstance(self.token_ids, bool):
            raise ConfigError(f"profile {self.name!r}: token_ids must be true or false, got "
                              f"{self.token_ids!r}")
        if self.token_ids and self.dataset is not None:
            raise ConfigError(f"profile {self.name!r}: token_ids is for a profile without a "
                              "dataset; a dataset sets its own, e.g. dataset: {format: random, "
                              "token_ids: true}")

    @property
    def warmups(self) -> int:
        """Requests sent before the measured ones: ``warmup_requests``, and at least one full
        wave at the profile's concurrency (as many as it measures at most), so the server has
        run the batch sizes the measured run will."""
        return max(self.warmup_requests, min(self.max_concurrency, self.num_prompts))

    @property
    def load(self) -> float:
        """The concurrency it runs at (a capacity profile: the highest it searches)."""
        if self.capacity is not None and self.capacity.load == "concurrency":
            return float(self.capacity.high)
        return float(self.max_concurrency if self.capacity is None else math.inf)

    def at_load(self, load: float) -> WorkloadProfile:
        """This capacity profile as a fixed workload at ``load``: enough requests that every
        concurrent slot sees at least two (percentiles of fewer mean little)."""
        assert self.capacity is not None
        if self.capacity.load == "concurrency":
            c = int(load)
            return dataclasses.replace(self, capacity=None, max_concurrency=c,
                                       num_prompts=max(self.num_prompts, 2 * c),
                                       warmup_requests=max(self.warmup_requests, min(c, 16)))
        return dataclasses.replace(self, capacity=None, request_rate=float(load),
                                   max_concurrency=max(self.max_concurrency, 1024))

    def with_limits(self, limits: tuple[Slo, ...]) -> WorkloadProfile:
        assert self.capacity is not None
        return dataclasses.replace(self, capacity=dataclasses.replace(
            self.capacity, limits=self.capacity.limits + limits))

    def to_dict(self) -> dict[str, Any]:
        """The profile as plain data (stored in a study's plan); ``profile_from_dict`` reads it."""
        out = dataclasses.asdict(self)
        if self.dataset is not None:
            out["dataset"] = self.dataset.to_dict()
        if self.capacity is not None:
            out["capacity"]["slo"] = [lim.text for lim in self.capacity.limits]
            del out["capacity"]["limits"]
        return out


PROFILE_FIELDS = {f.name for f in dataclasses.fields(WorkloadProfile)} - {"name", "capacity", "dataset"}
CAPACITY_FIELDS = {f.name for f in dataclasses.fields(CapacitySpec)} - {"limits"}


def _typed(where: str, values: Mapping[str, Any], record: type) -> dict[str, Any]:
    """``values`` of ``record``'s fields, each checked against the type of its default (a
    whole number, a number or true/false; a number may be written as text, e.g. 'inf'): a
    one-line error naming the field otherwise, never a comparison error later."""
    out = dict(values)
    for f in dataclasses.fields(record):
        if f.name not in values or values[f.name] is None and f.default is None:
            continue
        value, default = values[f.name], f.default
        if isinstance(default, bool):
            ok, kind = isinstance(value, bool), "true or false"
        elif isinstance(default, int):
            ok, kind = isinstance(value, int) and not isinstance(value, bool), "a whole number"
        elif isinstance(default, float) or f.name == "start":
            kind = "a number"
            if isinstance(value, str):
                try:
                    value = out[f.name] = float(value)
                except ValueError:
                    pass
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        else:
            continue
        if not ok:
            raise ConfigError(f"{where}: {f.name} must be {kind}, got {values[f.name]!r}")
    return out


def profile_from_dict(name: str, data: Mapping[str, Any], source: str) -> WorkloadProfile:
    """A profile from a mapping of ``WorkloadProfile`` fields; ``capacity`` a mapping of
    ``CapacitySpec`` fields with ``slo`` a list of ``METRIC<=LIMIT``."""
    where = f"{source}: profile {name!r}"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping of fields")
    unknown = set(data) - PROFILE_FIELDS - {"capacity", "dataset", "name"}
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; valid: "
                          f"{', '.join(sorted(PROFILE_FIELDS | {'capacity', 'dataset'}))}")
    kwargs: dict[str, Any] = _typed(where, {k: v for k, v in data.items() if k in PROFILE_FIELDS},
                                    WorkloadProfile)
    dataset = data.get("dataset")
    if dataset is not None:
        if not isinstance(dataset, Mapping) or not isinstance(dataset.get("format"), str):
            raise ConfigError(f"{where}: dataset must be a mapping with a format, e.g. "
                              "{format: jsonl, path: requests.jsonl}")
        kwargs["dataset"] = DatasetSpec(
            dataset["format"], str(dataset.get("path") or ""),
            {k: v for k, v in dataset.items() if k not in ("format", "path", "sha256")},
            str(dataset.get("sha256") or ""))
    capacity = data.get("capacity")
    if capacity is not None:
        if not isinstance(capacity, Mapping):
            raise ConfigError(f"{where}: capacity must be a mapping (load, low, high, slo, ...)")
        bad = set(capacity) - CAPACITY_FIELDS - {"slo"}
        if bad:
            raise ConfigError(f"{where}: unknown capacity field(s) {', '.join(sorted(bad))}; "
                              f"valid: {', '.join(sorted(CAPACITY_FIELDS | {'slo'}))}")
        limits = tuple(parse_limit(str(t), f"{where}: slo {str(t)!r}")
                       for t in capacity.get("slo") or ())
        try:
            kwargs["capacity"] = CapacitySpec(**_typed(
                f"{where}: capacity", {k: v for k, v in capacity.items() if k != "slo"},
                CapacitySpec), limits=limits)
        except TypeError as exc:
            raise ConfigError(f"{where}: capacity: {exc}") from None
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    try:
        return WorkloadProfile(name=name, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def parse_profiles(text: str, source: str) -> dict[str, WorkloadProfile]:
    """Profiles from YAML: a mapping of name to fields (optionally under ``profiles:``)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if isinstance(data, Mapping) and "profiles" in data:
        data = data["profiles"]
    if not isinstance(data, Mapping) or not data:
        raise ConfigError(f"{source}: expected a mapping of profile names to their fields")
    return {str(name): profile_from_dict(str(name), fields or {}, source)
            for name, fields in data.items()}


PROFILES: dict[str, WorkloadProfile] = parse_profiles(BUILTIN_YAML, "built-in profiles")


@dataclass(frozen=True)
class ProfileOverrides:
    """Shrinks a profile for a quick look (`--num-prompts`, `--input-len`, ...). None keeps."""

    num_prompts: int | None = None
    input_len: int | None = None
    output_len: int | None = None
    max_concurrency: int | None = None
    request_rate: float | None = None
    burstiness: float | None = None
    warmup_requests: int | None = None
    timeout_s: float | None = None
    token_ids: bool | None = None


def get_profile(name: str, overrides: ProfileOverrides | None = None,
                defined: Mapping[str, WorkloadProfile] | None = None) -> WorkloadProfile:
    """The named profile (of ``defined``, else the built-in ones) with ``overrides`` applied."""
    known = {**PROFILES, **(defined or {})}
    if name not in known:
        valid = ", ".join(known)
        raise ConfigError(f"--profile {name!r}: unknown profile; valid: {valid} "
                          "(or define it in a --profile-file)")
    profile = known[name]
    if overrides is None:
        return profile
    changes = {k: v for k, v in dataclasses.asdict(overrides).items() if v is not None}
    return dataclasses.replace(profile, **changes)


RATE_RANGE = {"low": 0.25, "high": 64.0}  # a capacity search of the request rate, by default
CONCURRENCY_RANGE = {"low": 1.0, "high": 256.0}


def with_load(profile: WorkloadProfile, load: str | None, load_range: str | None) -> WorkloadProfile:
    """A capacity profile with `--load` and `--load-range` (``LOW,HIGH``) applied."""
    if profile.capacity is None or (load is None and load_range is None):
        return profile
    changes: dict = {}
    if load is not None and load != profile.capacity.load:
        changes = {"load": load, **(RATE_RANGE if load == "rate" else CONCURRENCY_RANGE)}
    if load_range is not None:
        try:
            low, high = (float(x) for x in load_range.split(","))
        except ValueError:
            raise ConfigError(f"--load-range {load_range!r}: expected LOW,HIGH, e.g. 1,64") from None
        changes.update(low=low, high=high)
    try:
        spec = dataclasses.replace(profile.capacity, **changes)
    except ConfigError as exc:
        raise ConfigError(f"--load {load or profile.capacity.load} --load-range {load_range}: "
                          f"{exc}") from None
    return dataclasses.replace(profile, capacity=spec)


def profiles_of(names: Sequence[str], overrides: ProfileOverrides | None = None,
                defined: Mapping[str, WorkloadProfile] | None = None, *, load: str | None = None,
                load_range: str | None = None) -> tuple[WorkloadProfile, ...]:
    """The named profiles (``get_profile``) with the load flags applied (``with_load``)."""
    return tuple(with_load(get_profile(name, overrides, defined), load, load_range)
                 for name in names)
