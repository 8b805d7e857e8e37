"""A campaign on a budget: K pair runs per new workload, each picked by ``suggest_pairs`` after the last one.

``sharewise pairs -w NEW,KNOWN,... --budget K --model M`` measures, for every listed workload without a
measured pair here (the new ones), only the K pairs the predictor expects to teach most, one at a time:
each pick is made after the previous pair's row is written, and ``suggest_pairs`` refits on it
(``refit_on_pairs``: the new workload's measured pairs shift its predictions), so the second pick knows
the first's outcome. The partners are the other listed workloads. Then the campaign stops.
"""

from __future__ import annotations

from collections.abc import Iterator

from sharewise.errors import ConfigError
from sharewise.profiler.config import RunConfig
from sharewise.profiler.pair import PairTask


def check_budget(budget: int, model, executor_factory) -> None:
    """Refuse a budget that cannot run, before anything does: no model, a negative K, or a batch executor."""
    if budget < 0:
        raise ConfigError(f"--budget must be a non-negative number of pair runs per new workload, got {budget}")
    if model is None:
        raise ConfigError("--budget needs a model to pick pairs with: --model MODEL.json (see 'sharewise train')")
    name = getattr(getattr(executor_factory, "func", None), "name", "local")
    if name != "local":
        raise ConfigError(
            f"--budget picks each pair after the previous one is measured; the {name} executor runs pairs "
            "all at once: use the local executor"
        )


class BudgetPlan:
    """The pair tasks of a budgeted campaign, made one at a time (an iterable the executor consumes lazily).

    ``new``: the listed workloads without an ok pair on this device and mode; ``total``: the most pairs it
    will yield (``budget`` per new workload, fewer when the partners run out).
    """

    def __init__(self, dataset, resolved, config: RunConfig, device_name: str, budget: int, model, broken) -> None:
        self.dataset = dataset
        self.config = config
        self.device_name = device_name
        self.budget = int(budget)
        self.model = model
        self.specs = {name: spec for spec, name in resolved if name not in broken}
        pairs = self._pairs()
        ok = pairs[pairs["status"] == "ok"]
        measured = set(ok["workload_a"]) | set(ok["workload_b"])
        self.new = [n for n in self.specs if n not in measured]
        self.against = [n for n in self.specs if n not in self.new]
        if self.new and not self.against:
            self.against = list(self.specs)  # nothing measured yet: the new ones pair among themselves
        self.total = self.budget * len(self.new) if len(self.specs) > 1 else 0

    def _pairs(self):
        pairs = self.dataset.read_pairs()
        return pairs[(pairs["mode"] == self.config.mode) & (pairs["device_name"] == self.device_name)]

    def _profiles(self):
        profiles = self.dataset.read_profiles()
        return profiles[(profiles["mode"] == self.config.mode) & (profiles["device_name"] == self.device_name)]

    def __iter__(self) -> Iterator[PairTask]:
        from sharewise.predictor.suggest import suggest_pairs

        for _ in range(self.budget):
            for name in self.new:
                against = [a for a in self.against if a != name]
                if not against:
                    continue
                # Read back what was written: the pairs measured so far, this campaign's included.
                picks = suggest_pairs(
                    self.model, self._profiles(), self._pairs(), [name], against=against, budget=1,
                    device=self.device_name,
                )
                if picks:
                    partner = picks[0].partner
                    yield PairTask(self.specs[name], self.specs[partner], name, partner)
