"""`autotune validate`'s checks as records: references and random samples put to a validator.
The validator here is a stand-in (said so): it rejects every flag set holding one flag, so that
what the checks count is known; vLLM's own parser is tested in test_validation.py."""

from __future__ import annotations

import pytest

from autotune.core.space.search_space import ModelContext, resolve_references
from autotune.errors import ValidationError
from autotune.shell.bench.files import read_references, read_space
from autotune.study.run.space_check import (
    EngineCount,
    ReferenceCheck,
    check_references,
    check_samples,
    count_engines,
)
from tests.helpers import SPACES


class RejectsFlag:
    """Stand-in validator: rejects any argv holding ``flag``; records what it was asked."""

    def __init__(self, flag: str) -> None:
        self.flag, self.asked = flag, []

    def check(self, model: str, options) -> None:
        self.asked.append((model, tuple(options)))
        if self.flag in options:
            raise ValidationError(f"{self.flag} is not supported here")


@pytest.fixture
def space():
    return read_space(SPACES / "reference.yaml")


def test_each_reference_is_accepted_rejected_or_skipped_with_vllms_reason(space, moe_mtp_info):
    ctx = ModelContext(moe_mtp_info, 81920)
    refs = read_references(SPACES / "references.yaml", space).configs
    resolved = resolve_references(space, ctx, refs)
    found = check_references(RejectsFlag("--no-enable-expert-parallel"), space, ctx, refs)
    assert [r.name for r in found] == [r.name for r in resolved]
    for check, ref in zip(found, resolved, strict=True):
        if ref.skipped:
            assert check == ReferenceCheck(ref.name, skipped=True, accepted=False, reason=ref.skipped)
        elif ref.name == "no-ep":
            assert check == ReferenceCheck("no-ep", skipped=False, accepted=False,
                                           reason="--no-enable-expert-parallel is not supported here")
        else:
            assert check == ReferenceCheck(ref.name, skipped=False, accepted=True)
    assert [r.name for r in found if r.rejected] == ["no-ep"]


def test_random_samples_are_counted_by_vllms_message_and_reproducible_from_the_seed(space, moe_mtp_info):
    ctx = ModelContext(moe_mtp_info, 81920)
    validator = RejectsFlag("--no-enable-expert-parallel")
    drawn = check_samples(validator, space, ctx, samples=40, seed=3)
    rejected = sum("--no-enable-expert-parallel" in argv for _, argv in validator.asked)
    assert len(validator.asked) == 40 and 0 < rejected < 40
    assert drawn.samples == 40 and drawn.rejected == (("--no-enable-expert-parallel is not supported here", rejected),)
    assert drawn.rejected_count == rejected
    again = RejectsFlag("--no-enable-expert-parallel")
    assert check_samples(again, space, ctx, samples=40, seed=3) == drawn and again.asked == validator.asked


def o3_is_o2_and_no_yarn_is_rejected(argv):
    """Stand-in for vLLM's resolution (shell.server.validation.engine_identity, tested in
    test_validation.py): -O3 is the -O2 engine; without YaRN 81920 tokens are rejected."""
    if "--hf-overrides" not in argv:
        raise ValidationError("max_model_len too long")
    return " ".join(argv).replace("--optimization-level 3", "--optimization-level 2")


def test_the_engine_count_holds_combinations_drawable_configurations_and_distinct_engines(
    space, moe_mtp_info
):
    count = count_engines(space, ModelContext(moe_mtp_info, 81920), o3_is_o2_and_no_yarn_is_rejected)
    # 4 x 3 x 2^4 combinations; the interleave is drawn only with decode context parallel;
    # YaRN is fixed on beyond the native context (none drawn without it, so none rejected);
    # of the 48, -O2 and -O3 are one engine: 3 x 3 x 2 x 2.
    assert count == EngineCount(combinations=192, drawable=48, engines=36, rejected=0)
    assert count.text == "192 combinations, 48 drawable, 36 distinct engines (0 rejected by vLLM)"


def test_a_space_too_large_to_resolve_is_counted_without_resolving(space, moe_mtp_info):
    asked = []
    count = count_engines(space, ModelContext(moe_mtp_info, 81920), asked.append, limit=47)
    assert count == EngineCount(combinations=192, drawable=48, engines=None, rejected=0)
    assert not asked
