"""A campaign on a budget: K pair runs per new workload, each picked by ``suggest_pairs`` after the last one.

``sharewise pairs -w NEW,KNOWN,... --budget K --model M`` measures, for every listed workload without a
measured pair here (the new ones), only the K pairs the predictor expects to teach most, one at a time:
each pick is made after the previous pair's row is written, and ``suggest_pairs`` refits on it
(``refit_on_pairs``: the new workload's measured pairs shift its predictions), so the second pick knows
the first's outcome. The partners are the other listed workloads. Then the campaign stops.

``BudgetPicker`` is the campaign's pair picker (``run_campaign(..., picker=BudgetPicker(K, model))``). It
waits for each result itself (its plan has no task while one runs), so it works on any executor: on Ray
the pairs of a budget run one at a time too.
"""

from __future__ import annotations

from collections.abc import Iterator

from sharewise.errors import ConfigError
from sharewise.profiler.campaign import CampaignContext, on_device
from sharewise.profiler.pair import PairTask


class BudgetPicker:
    """Picks K pairs per new workload, one at a time, with ``model``; a budget that cannot run (no model, a
    negative K) is refused here, before anything runs."""

    def __init__(self, budget: int, model) -> None:
        if budget < 0:
            raise ConfigError(f"--budget must be a non-negative number of pair runs per new workload, got {budget}")
        if model is None:
            raise ConfigError("--budget needs a model to pick pairs with: --model MODEL.json (see 'sharewise train')")
        self.budget = int(budget)
        self.model = model

    def plan(self, context: CampaignContext) -> BudgetPlan:
        return BudgetPlan(context, self.budget, self.model)


class BudgetPlan:
    """The pair tasks of a budgeted campaign, each picked once every earlier one is written.

    ``new``: the listed workloads without an ok pair on this device and mode; ``total``: the most pairs it
    will hand out (``budget`` per new workload, fewer when the partners run out). Rows are read on the
    campaign's device and mode, every size (``on_device(..., by_size=False)``).
    """

    skipped = 0  # a budget measures new pairs only
    unrunnable: tuple = ()

    def __init__(self, context: CampaignContext, budget: int, model) -> None:
        self.context = context
        self.budget = budget
        self.model = model
        self.specs = {name: spec for spec, name in context.workloads if name not in context.broken}
        pairs = self._read("pairs")
        ok = pairs[pairs["status"] == "ok"]
        measured = set(ok["workload_a"]) | set(ok["workload_b"])
        self.new = [n for n in self.specs if n not in measured]
        self.against = [n for n in self.specs if n not in self.new]
        if self.new and not self.against:
            self.against = list(self.specs)  # nothing measured yet: the new ones pair among themselves
        self.total = self.budget * len(self.new) if len(self.specs) > 1 else 0
        self.message = f"{self.total} pairs to measure ({budget} per new workload: {', '.join(self.new) or 'none'})"
        self._picks = self._pick()

    def next_task(self, busy: int) -> PairTask | None:
        """The next pick, or None while a pick runs (the next one reads its row) or when the budget is spent."""
        return None if busy else next(self._picks, None)

    def _read(self, table: str):
        ctx = self.context
        rows = ctx.dataset.read_pairs() if table == "pairs" else ctx.dataset.read_profiles()
        return on_device(rows, ctx.config, ctx.on_device, by_size=False)

    def _pick(self) -> Iterator[PairTask]:
        from sharewise.predictor.suggest import suggest_pairs

        for _ in range(self.budget):
            for name in self.new:
                against = [a for a in self.against if a != name]
                if not against:
                    continue
                # Read back what was written: the pairs measured so far, this campaign's included.
                picks = suggest_pairs(
                    self.model, self._read("profiles"), self._read("pairs"), [name], against=against, budget=1,
                    device=self.context.on_device,
                )
                if picks:
                    partner = picks[0].partner
                    yield PairTask(self.specs[name], self.specs[partner], name, partner)
