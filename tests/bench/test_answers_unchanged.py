"""The before/after check of refactors (benchmarks/answers_unchanged.py): what it leaves out of a
study's dump is exactly what changes between two runs of one seed, and a study of another seed
is told apart."""

from __future__ import annotations

from benchmarks import answers_unchanged as au

VARYING = {("trials", "*", "datetime_start"), ("trials", "*", "datetime_complete"),
           ("trials", "*", "user_attrs", "worker", "host"), ("trials", "*", "user_attrs", "worker", "pid"),
           ("user_attrs", "uid")}


def test_two_runs_of_one_seed_differ_only_in_what_the_dump_leaves_out():
    first, second = au.raw_dump("tpe", trials=3), au.raw_dump("tpe", trials=3)
    _, lines = au.differences(first, second)
    changed = {tuple(line.split(":", 1)[0].split("/")) for line in lines}
    assert changed and all(au.left_out(path) for path in changed)  # the clocks and the uid
    assert {au.pattern_of(path) for path, _ in au.leaves(first)} - {None} == VARYING  # each is stored
    dumped = au.without_left_out(first)
    assert not any(au.left_out(path) for path, _ in au.leaves(dumped))
    assert au.differences(dumped, au.without_left_out(second)) == (sum(1 for _ in au.leaves(dumped)), [])


def test_another_seed_gives_other_values_and_the_comparison_names_them():
    _, lines = au.differences(au.dump("tpe", trials=3), au.dump("tpe", trials=3, seed=1))
    assert any(line.startswith("trials/0/values/0: ") for line in lines)
    assert any(line.startswith("trials/0/user_attrs/repeats/") for line in lines)
