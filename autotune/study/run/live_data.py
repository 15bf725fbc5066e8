"""A study's data kept in memory while a worker runs it: read in full once, at open, then
updated with each trial this worker finishes and each confirmation it stores; read in full
again only where another worker may have written (``sync``). Before, the runner rebuilt the
study's data from storage 2-3 times per deployed trial (docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import optuna
from optuna.trial import FrozenTrial

from autotune.core.analysis.study_data import StudyData
from autotune.core.plan.scheduling import Counts
from autotune.core.trial.outcome import TrialOutcome
from autotune.study.store.records import FINISHED, OthersNoise, data_of, outcomes, read_outcome


@dataclass
class LiveData:
    """The finished trials (copies of a measured engine aside, as ``records.outcomes``), the
    study's attributes and the spreads other studies stored, as of the last read."""

    study: optuna.Study
    others: OthersNoise = field(default_factory=OthersNoise)
    _search: dict[int, TrialOutcome] = field(default_factory=dict)
    _attrs: Mapping = field(default_factory=dict)
    _copies: set[int] = field(default_factory=set)  # finished copies: known, but not data
    _others_ran: bool = False  # the last sync saw another worker's trial running

    @classmethod
    def open(cls, study: optuna.Study, others: OthersNoise | None = None) -> LiveData:
        live = cls(study, OthersNoise.read(study) if others is None else others)
        live.reload()
        return live

    def reload(self) -> None:
        """Read the finished trials and the study's attributes again (one full read)."""
        self._search = {t.number: t for t in outcomes(self.study)}
        self._copies = set()
        self._attrs = self.study.user_attrs

    def attrs_changed(self) -> None:
        """The study's attributes were written (a confirmation's runs, the noise): read them."""
        self._attrs = self.study.user_attrs

    def finished(self, trial: FrozenTrial) -> None:
        """One trial this worker finished, as stored."""
        if trial.state not in FINISHED:
            return
        outcome = read_outcome(trial)
        if outcome.same_engine_as is None:
            self._search[trial.number] = outcome
        else:
            self._copies.add(trial.number)

    def sync(self, now: Counts) -> None:
        """Read again where another worker may have written: a trial runs that is not this
        worker's (between trials it has none) or ran at the last sync (it may have ended as a
        failure, which ``now`` does not count), or the storage holds complete trials that this
        worker does not know of."""
        complete = sum(1 for t in self._search.values() if t.state == "complete")
        if now.running or self._others_ran or now.finished + now.rejected != complete:
            self.reload()
        self._others_ran = bool(now.running)

    def data(self, *, confirmed: bool = True, others: OthersNoise | None = None) -> StudyData:
        """``records.study_data``'s record from memory: reads nothing."""
        return data_of(self.study, [self._search[n] for n in sorted(self._search)], self._attrs,
                       confirmed=confirmed, others=self.others if others is None else others)
