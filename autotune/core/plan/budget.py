"""A study's time budget as one record: what is used and left, whether one more deployment
fits beside the confirmation's reserve, and the lines that say so. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.core.maths.durations import duration_text


@dataclass(frozen=True)
class TimeLeft:
    """Where a study stands against its time budget (seconds of wall clock, every slot's trials
    included): whether one more trial fits, and about how many do."""

    used_s: float
    budget_s: float
    trial_s: float | None  # expected cost of one more trial: a deployment's (None: none measured)
    reserve_s: float  # kept for the confirmation at the end

    @property
    def left_s(self) -> float:
        return max(self.budget_s - self.used_s, 0.0)

    @property
    def fits(self) -> bool:
        """A new trial starts only when its expected cost fits beside the reserve; the first
        one, whose cost nothing predicts yet, starts while any time is left."""
        if self.trial_s is None:
            return self.left_s > self.reserve_s
        return self.used_s + self.trial_s + self.reserve_s <= self.budget_s

    @property
    def trials_to_come(self) -> int:
        if not self.trial_s:
            return 0
        return max(int((self.left_s - self.reserve_s) // self.trial_s), 0)

    @property
    def text(self) -> str:
        more = (f"about {self.trials_to_come} more trial(s) of ~{duration_text(self.trial_s)}"
                if self.trial_s else "no deployment measured yet, so the next trial's cost is "
                "unknown: it starts while time is left")
        used, budget = duration_text(self.used_s), duration_text(self.budget_s)
        return (f"time used {used} of {budget}, {duration_text(self.left_s)} left: {more}, "
                f"{duration_text(self.reserve_s)} kept for confirmation")

    @property
    def kept_text(self) -> str:
        """The study's last line on its budget: kept, or by how much it was not and why."""
        said = f"time budget {duration_text(self.budget_s)}: the study took {duration_text(self.used_s)}"
        if self.used_s <= self.budget_s:
            return f"{said}, {duration_text(self.budget_s - self.used_s)} to spare"
        return (f"{said}, {duration_text(self.used_s - self.budget_s)} over: a deployment outlasted its "
                "expected cost (the first one has none: nothing was measured before it)")
