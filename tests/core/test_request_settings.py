"""`run`'s settings are one registry (``core.plan.request_settings``): each flag's default is the
request record's own, and the request made from no flag is ``StudyRequest``'s defaults."""

from __future__ import annotations

import dataclasses

import pytest

from autotune.core.deployment.baseline import VLLM_DEFAULTS
from autotune.core.plan.estimate import UNBOUNDED_TRIALS
from autotune.core.plan.request_settings import DEFAULTS, REQUEST_SETTINGS, request_fields
from autotune.core.plan.study_request import StudyRequest
from autotune.errors import ConfigError


def test_no_flag_gives_the_requests_own_defaults_and_measures_vllms_defaults_first():
    made = StudyRequest(profiles=(), **request_fields({}))
    assert made == dataclasses.replace(DEFAULTS, baseline=VLLM_DEFAULTS)


def test_each_flag_sets_its_field_once_and_reads_its_text_as_the_field_wants():
    fields = [s.field for s in REQUEST_SETTINGS if s.field]
    assert len(fields) == len(set(fields))
    given = request_fields({"time_budget": "1h30m", "smallest_difference": "3%", "precision": "0",
                         "objective": ["low-concurrency:mean_e2el_ms"], "trials": 4})
    assert (given["time_budget_s"], given["smallest_difference"], given["precision"],
            given["objectives"], given["trials"]) == (5400.0, pytest.approx(0.03), 0.0,
                                                      ("low-concurrency:mean_e2el_ms",), 4)


def test_a_time_budget_without_a_trial_count_lets_the_time_decide():
    assert request_fields({"time_budget": "20m"})["trials"] == UNBOUNDED_TRIALS
    assert request_fields({})["trials"] == DEFAULTS.trials


def test_a_bad_flag_value_is_one_line_naming_the_flag():
    with pytest.raises(ConfigError, match="--time-budget '20 minutes': expected a duration"):
        request_fields({"time_budget": "20 minutes"})
