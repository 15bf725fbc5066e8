"""Scale-out without processes: the budget arithmetic, duplicates, seeds, slots from flags,
storage URLs. The plan a study carries is in test_plans.py; real workers are in test_workers.py."""

from __future__ import annotations

import os
import sqlite3
import time

import optuna
import pytest

from autotune.core.deployment.slots import Slot, slots_for
from autotune.core.plan.scheduling import (
    Claim,
    Counts,
    Step,
    duplicate_of,
    next_step,
    over_budget,
    position,
    stop_text,
    worker_seed,
)
from autotune.errors import ConfigError, StudyError
from autotune.shell.server.worker_pool import worker_argv
from autotune.study.store import optuna_internals
from autotune.study.store.storage import (
    Heartbeat,
    engine_url,
    open_storage,
    redact,
    refuse_shared_sqlite,
    storage_url,
)
from tests.helpers import age_heartbeats

# ------------------------------------------------------------------ the study-wide budget


def test_a_worker_asks_while_the_budget_has_room_waits_while_running_trials_may_fail_then_stops():
    assert next_step(Counts(finished=2, running=[5]), budget=4) is Step.ASK
    assert next_step(Counts(finished=2, running=[5, 6]), budget=4) is Step.WAIT
    assert next_step(Counts(finished=4, running=[]), budget=4) is Step.STOP
    assert next_step(Counts(finished=4, running=[9]), budget=4) is Step.STOP


def test_rejected_trials_stay_out_of_the_budget_until_three_times_it_have_ended():
    # vLLM's rejection costs a validation: the budget of 4 still has room after 5 of them.
    assert next_step(Counts(finished=3, running=[], rejected=5), budget=4) is Step.ASK
    assert next_step(Counts(finished=3, running=[12], rejected=8), budget=4) is Step.WAIT
    stopped = Counts(finished=3, running=[], rejected=9)
    assert next_step(stopped, budget=4) is Step.STOP
    assert stop_text(stopped, 4) == ("12 trials ended, 9 of them rejected by vLLM: the cap of "
                                     "3 x --trials (12) is reached with 3 of 4 counted")
    assert stop_text(Counts(finished=4, running=[]), 4) == "the budget is met: 4 of 4 trial(s) finished"


def test_of_two_simultaneous_claims_on_the_last_place_only_the_later_backs_out():
    seen = Counts(finished=3, running=[7, 8])  # both workers read this after their ask
    assert not over_budget(7, seen, budget=4)
    assert over_budget(8, seen, budget=4)
    assert position(7, seen) == 4 and position(8, seen) == 5
    # The earlier claimant may not see the later one yet: it still stays.
    assert not over_budget(7, Counts(finished=3, running=[7]), budget=4)


def test_duplicates_are_found_among_running_and_finished_trials_but_not_the_trial_itself():
    claims = [Claim(0, "a", running=False, failed=True), Claim(2, "a", running=True, failed=False),
              Claim(3, "b", running=True, failed=False)]
    assert duplicate_of(5, "a", claims).number == 0
    assert duplicate_of(3, "b", claims) is None
    assert duplicate_of(5, "c", claims) is None


def test_worker_seeds_are_reproducible_and_differ_between_workers():
    assert worker_seed(1, "slot0") == worker_seed(1, "slot0")
    seeds = {worker_seed(1, f"slot{i}") for i in range(8)} | {worker_seed(1, "nodeB/slot0")}
    assert len(seeds) == 9 and all(0 <= s < 2**31 for s in seeds)
    assert worker_seed(None, "slot0") is None


# ------------------------------------------------------------------ slots from the flags


ALLOWED = range(4)  # the cores this process may use, as the CLI passes them


def test_eight_gpus_with_tensor_parallel_2_are_four_slots_each_pinned_to_its_pair():
    slots = slots_for("gpu", 2, ALLOWED, gpus="0-7")
    assert [s.env() for s in slots] == [{"CUDA_VISIBLE_DEVICES": p} for p in ("0,1", "2,3", "4,5", "6,7")]
    assert len(slots_for("gpu", 2, ALLOWED, gpus="0,1,2")) == 1  # the odd GPU stays idle
    assert [s.devices for s in slots_for("gpu", 4, ALLOWED, gpus="0-7")] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert slots_for("gpu", 2, ALLOWED)[0].devices == (0, 1)


def test_cores_make_cpu_slots_and_the_wrong_device_flag_is_a_one_line_error():
    slots = slots_for("cpu", 1, ALLOWED, cores="0,1")
    assert [s.env()["VLLM_CPU_OMP_THREADS_BIND"] for s in slots] == ["0", "1"]
    # no --cores: one slot over every allowed core, split evenly between the ranks
    assert [s.env()["VLLM_CPU_OMP_THREADS_BIND"] for s in slots_for("cpu", 2, ALLOWED)] == ["0-1|2-3"]
    with pytest.raises(ConfigError, match="--gpus 0,1: this is vLLM's CPU build"):
        slots_for("cpu", 2, ALLOWED, gpus="0,1")
    with pytest.raises(ConfigError, match="--cores is for vLLM's CPU build"):
        slots_for("gpu", 1, ALLOWED, cores="0")
    with pytest.raises(ConfigError, match="--cores 0,4096: this process may use cores 0,1,2,3"):
        slots_for("cpu", 1, ALLOWED, cores="0,4096")


def test_a_slot_worker_gets_its_devices_in_argv_and_never_the_storage_url(tmp_path):
    argv = worker_argv(tmp_path, "s", Slot("gpu", (2, 3), 2), "slot1", ["--model", "m"])
    assert argv[argv.index("--gpus") + 1] == "2,3" and argv[argv.index("--worker-label") + 1] == "slot1"
    assert not any("postgresql" in a or "sqlite" in a for a in argv)
    cpu = worker_argv(tmp_path, "s", Slot("cpu", (0, 1), 1), "slot0", [])
    assert cpu[cpu.index("--cores") + 1] == "0,1" and cpu[cpu.index("--cores-per-rank") + 1] == "2"


# ------------------------------------------------------------------ storage


def test_storage_urls_hide_passwords_as_typed_and_open_with_the_installed_postgres_driver(monkeypatch):
    assert redact("postgresql+psycopg://u:s3cret@db:5432/x") == "postgresql+psycopg://u:***@db:5432/x"
    assert redact("postgresql://u:p%40ss@db/x?sslmode=require") == "postgresql://u:***@db/x?sslmode=require"
    assert redact("sqlite:///a:b@c.db") == "sqlite:///a:b@c.db"  # no password in a file path
    # an unescaped @ in the password hides it whole; a password in the query too
    assert redact("postgresql://u:pa@ss@db/x") == "postgresql://u:***@db/x"
    assert redact("postgresql://db/x?user=u&password=s3cret") == "postgresql://db/x?user=u&password=***"
    assert storage_url("postgresql://u:p@h/db", "x") == "postgresql://u:p@h/db"  # as typed
    assert engine_url("postgresql://u:p@h/db") == "postgresql+psycopg://u:p@h/db"
    monkeypatch.setenv("AUTOTUNE_STORAGE", "postgres://u@h/db")
    assert engine_url(storage_url(None, "sqlite:///d.db")) == "postgresql+psycopg://u@h/db"
    monkeypatch.delenv("AUTOTUNE_STORAGE")
    assert storage_url(None, "sqlite:///d.db") == "sqlite:///d.db"


def test_unsupported_or_unreachable_storages_are_clear_errors_without_the_password():
    with pytest.raises(ConfigError, match="'mysql' is not supported"):
        open_storage("mysql://u:pw@h/db", Heartbeat())
    with pytest.raises(ConfigError) as err:  # bad input: exit 2, before anything runs
        open_storage("postgresql+psycopg://u:topsecret@127.0.0.1:1/db", Heartbeat())
    assert "topsecret" not in str(err.value) and "cannot open it" in str(err.value)
    with pytest.raises(ConfigError, match="grace period > interval"):
        Heartbeat(interval_s=10, grace_s=5)


def test_sqlite_is_opened_with_the_write_ahead_log_and_refused_across_machines(tmp_path):
    db = tmp_path / "s.db"
    open_storage(f"sqlite:///{db}", Heartbeat())
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    refuse_shared_sqlite(f"sqlite:///{db}", set())  # nothing running elsewhere
    with pytest.raises(ConfigError, match="running on other-node; SQLite cannot be shared"):
        refuse_shared_sqlite(f"sqlite:///{db}", {"other-node"})
    refuse_shared_sqlite("postgresql+psycopg://h/db", {"other-node"})


# ------------------------------------------------------------------ a dead worker's leftovers


def test_leftover_server_processes_of_a_finished_trial_are_killed_and_running_ones_kept(tmp_path):
    """Fault injection: `sleep` processes stand in for servers whose worker died without
    taking them along (what PR_SET_PDEATHSIG normally prevents); the marker is real."""
    import subprocess

    from autotune.study.run.worker_upkeep import reap_dead_workers
    from autotune.study.store.records import TRIAL_ENV
    from autotune.study.store.state import make_uid, uid

    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'r.db'}", Heartbeat()))
    make_uid(study)
    dead = study.ask()
    study.tell(dead, state=optuna.trial.TrialState.FAIL)
    alive = study.ask()  # RUNNING, its worker alive: its server must stay
    procs = {
        name: subprocess.Popen(["sleep", "300"], env={**os.environ, TRIAL_ENV: marker},
                               start_new_session=True)
        for name, marker in (("dead", f"{uid(study)}:{dead.number}"),
                             ("alive", f"{uid(study)}:{alive.number}"), ("other study", f"u2:{dead.number}"))
    }
    said = []
    try:
        reap_dead_workers(study, said.append)
        assert procs["dead"].wait(timeout=10) == -9
        time.sleep(0.5)
        assert procs["alive"].poll() is None and procs["other study"].poll() is None
        assert said == [f"trial #{dead.number}: killed 1 leftover server process(es) of its dead worker"]
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


def test_a_trial_without_heartbeats_past_the_grace_period_is_failed_and_re_enqueued(tmp_path):
    from autotune.study.run.worker_upkeep import reap_dead_workers

    storage = open_storage(f"sqlite:///{tmp_path / 'h.db'}", Heartbeat(interval_s=1, grace_s=2))
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    trial.suggest_int("max_num_seqs", 4, 64)
    optuna_internals.record_heartbeat(study, trial)  # then its worker dies
    said = []
    reap_dead_workers(study, said.append)
    assert study.trials[0].state == optuna.trial.TrialState.RUNNING and said == []  # not yet
    age_heartbeats(tmp_path / "h.db", 3)  # it died 3 s ago, past the 2 s grace
    reap_dead_workers(study, said.append)
    assert study.trials[0].state == optuna.trial.TrialState.FAIL
    retry = study.trials[1]
    assert retry.state == optuna.trial.TrialState.WAITING and retry.params == study.trials[0].params
    assert said == ["trial #0: its worker stopped sending heartbeats; failed and re-enqueued for a live worker"]


def test_a_storage_outage_is_retried_and_then_names_what_was_lost():
    """Fault injection: an action that raises the database's own error twice stands in for a
    restarting database."""
    from sqlalchemy.exc import OperationalError

    from autotune.study.run.worker_upkeep import riding_out_outages

    def flaky(failures: int):
        calls = []

        def action() -> int:
            calls.append(1)
            if len(calls) <= failures:
                raise OperationalError("SELECT 1", {}, Exception("connection refused"))
            return len(calls)
        return action

    said: list[str] = []
    assert riding_out_outages(flaky(2), said.append, retries=2, retry_s=0) == 3
    assert len(said) == 2 and all(m.startswith("storage unavailable (lost the study storage: ")
                                  and m.endswith("retrying in 0 s") for m in said)
    with pytest.raises(StudyError, match="^lost the study storage: "):
        riding_out_outages(flaky(3), said.append, retries=2, retry_s=0)


def test_counting_a_study_sees_finished_and_running_trials(tmp_path):
    from autotune.study.run.worker_upkeep import count_trials

    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'c.db'}", Heartbeat()))
    study.tell(study.ask(), 1.0)
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)
    running = study.ask()
    found = count_trials(study)
    assert found.finished == 1 and list(found.running) == [running.number]


class DroppingRelay:
    """Fault injection: a TCP relay in front of the real PostgreSQL that can drop every
    connection and refuse new ones, as a database restart does (the shared test server itself
    cannot be restarted under the other tests)."""

    def __init__(self, port: int) -> None:
        import socket
        import threading

        self.target, self.up, self.conns = port, True, []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            client, _ = self.listener.accept()
            if not self.up:
                client.close()
                continue
            server = socket.create_connection(("127.0.0.1", self.target))
            self.conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            s.close()

    def drop(self) -> None:
        import socket

        self.up = False
        for s in self.conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.conns = []


@pytest.mark.slow  # starts a PostgreSQL server: the fast suite needs none (docs/testing.md)
def test_a_worker_rides_out_a_database_restart_between_trials_and_then_gives_up(postgres_url):
    import threading
    import uuid

    from sqlalchemy.engine import make_url

    from autotune.study.run.worker_upkeep import count_trials, riding_out_outages

    real = make_url(postgres_url)
    relay = DroppingRelay(real.port or 5432)
    url = real.set(host="127.0.0.1", port=relay.port).render_as_string(hide_password=False)
    study = optuna.create_study(storage=open_storage(url, Heartbeat()), study_name=f"outage-{uuid.uuid4().hex[:8]}")
    study.enqueue_trial({"x": 1})
    relay.drop()
    said = []
    # The database is back after 0.6 s: the retries 0.2 s apart fail until then (three here).
    threading.Timer(0.6, lambda: setattr(relay, "up", True)).start()
    assert riding_out_outages(lambda: count_trials(study), said.append, retries=10, retry_s=0.2).finished == 0
    assert said and all(m.startswith("storage unavailable (") for m in said)
    relay.drop()
    with pytest.raises(StudyError, match="lost the study storage"):
        riding_out_outages(lambda: count_trials(study), said.append, retries=2, retry_s=0.1)


# The confirmation inside the time left (core.plan.confirmation): pure.

def test_a_confirmation_that_fits_is_planned_as_asked():
    from autotune.core.plan.confirmation import schedule_confirmation

    p = schedule_confirmation([4, 9, 0], 2, left_s=700.0, deployment_s=100.0)
    assert (p.trials, p.rounds, p.deployments) == ((4, 9, 0), 2, 6)
    assert p.message == "confirmation: 3 trial(s) x 2 round(s), about 10 min of 11 min 40 s left"


@pytest.mark.parametrize("left_s, trials, rounds, opening", [
    (350.0, (4, 9, 0), 1, "confirmation shrunk to 3 trial(s) x 1 round(s): "),
    (250.0, (4, 9), 1, "confirmation shrunk to 2 trial(s) x 1 round(s) (#4, #9): "),
    (99.0, (), 0, "confirmation skipped: "),
], ids=["fewer-rounds", "fewer-finalists", "skipped"])
def test_a_confirmation_that_does_not_fit_is_cut_rounds_first_then_finalists_and_says_so(
        left_s, trials, rounds, opening):
    from autotune.core.maths.durations import duration_text
    from autotune.core.plan.confirmation import schedule_confirmation

    p = schedule_confirmation([4, 9, 0], 2, left_s=left_s, deployment_s=100.0)
    assert (p.trials, p.rounds) == (trials, rounds)
    assert p.deployments * 100.0 <= left_s  # what is planned fits
    assert p.message == (f"{opening}the full confirmation (3 trial(s) x 2 round(s)) would take "
                         f"10 min at ~1 min 40 s a deployment; {duration_text(left_s)} of the time budget "
                         "is left")


def test_without_a_budget_or_a_measured_cost_the_asked_confirmation_is_planned():
    from autotune.core.plan.confirmation import schedule_confirmation

    assert schedule_confirmation([1, 2], 3, left_s=None, deployment_s=50.0).deployments == 6
    unmeasured = schedule_confirmation([1, 2], 3, left_s=60.0, deployment_s=None)
    assert unmeasured.deployments == 6 and "no served trial measured the cost" in unmeasured.message


def test_a_shrunk_confirmation_keeps_the_fronts_ends_and_the_baseline_first():
    from autotune.core.plan.confirmation import by_priority

    # finalists() lists the front along it, then the baseline.
    assert by_priority([3, 5, 8, 12, 0], baseline=0) == [3, 12, 0, 5, 8]
    assert by_priority([3], baseline=None) == [3]
    assert by_priority([3, 0], baseline=0) == [3, 0]  # the baseline on the front: itself


def test_the_cost_of_a_deployment_is_the_mean_wall_of_the_served_trials():
    from autotune.core.deployment import failures
    from autotune.core.plan.confirmation import deployment_cost_s
    from autotune.core.trial.outcome import ProfileResult, TrialOutcome

    served = {"p": ProfileResult("p", ({"output_throughput": 1.0},))}
    trials = [TrialOutcome(0, results=served, trial_wall_s=120.0),
              TrialOutcome(1, results=served, trial_wall_s=80.0),
              TrialOutcome(2, failure=failures.ENGINE_DIED, trial_wall_s=5.0),  # not served
              TrialOutcome(3, results=served, trial_wall_s=30.0, raced="beaten")]  # cut short
    assert deployment_cost_s(trials) == 100.0
    assert deployment_cost_s(trials[2:3]) is None


def test_a_redeployment_costs_a_trial_less_the_compile_it_filled_the_cache_with():
    from autotune.core.plan.confirmation import deployment_cost_s
    from autotune.core.trial.outcome import ProfileResult, TrialOutcome

    served = {"p": ProfileResult("p", ({"output_throughput": 1.0},))}
    compiled = TrialOutcome(0, results=served, trial_wall_s=94.0,
                            startup_phases={"compile_s": 30.0, "compile_cache": "miss"})
    cached = TrialOutcome(1, results=served, trial_wall_s=60.0,
                          startup_phases={"compile_s": 4.0, "compile_cache": "hit"})
    assert deployment_cost_s([compiled, cached]) == 77.0  # a new engine compiles
    assert deployment_cost_s([compiled, cached], again=True) == 62.0  # (64 + 60) / 2


def test_a_study_ends_saying_whether_it_kept_its_budget_and_by_how_much():
    from autotune.core.plan.budget import TimeLeft

    kept = TimeLeft(used_s=195.0, budget_s=240.0, trial_s=None, reserve_s=0.0).kept_text
    assert kept == "time budget 4 min: the study took 3 min 15 s, 45 s to spare"
    over = TimeLeft(used_s=68.0, budget_s=60.0, trial_s=None, reserve_s=0.0).kept_text
    assert over.startswith("time budget 1 min: the study took 1 min 8 s, 8 s over: ")


def test_before_any_deployment_is_measured_the_first_trial_starts_and_says_its_cost_is_unknown():
    from autotune.core.plan.budget import TimeLeft

    first = TimeLeft(used_s=5.0, budget_s=60.0, trial_s=None, reserve_s=0.0)
    assert first.fits and "no deployment measured yet, so the next trial's cost is unknown" in first.text
    after = TimeLeft(used_s=40.0, budget_s=60.0, trial_s=33.0, reserve_s=0.0)
    assert not after.fits  # its expected end, 73 s, passes the 60 s budget
    assert not TimeLeft(used_s=10.0, budget_s=60.0, trial_s=20.0, reserve_s=40.0).fits
