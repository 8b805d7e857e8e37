"""Application function of ``sharewise suggest``: the pair runs that would most improve a new workload's pairings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SuggestOptions:
    """``sharewise suggest``: a saved model, the datasets, the new workloads, partners to choose among, K."""

    model: Path
    data: tuple[str, ...]
    workloads: tuple[str, ...]
    against: tuple[str, ...] = ()
    budget: int = 1
    device: str | None = None


@dataclass
class SuggestResult:
    """The suggestions, in the order to measure them per workload, and what they were chosen among."""

    suggestions: list
    workloads: list[str]
    budget: int

    def to_json(self) -> dict:
        """Example: ``{"budget": 2, "workloads": ["vit"], "suggestions": [{"workload": "vit", "partner":
        "resnet18", "device_name": "v100", "rank": 1, "score": 0.41, "speed_sum": [0.9, 1.0, 1.2],
        "straddles": true, "reason": "..."}]}``."""
        return {
            "budget": self.budget,
            "workloads": self.workloads,
            "suggestions": [s.to_dict() for s in self.suggestions],
        }


def suggest(options: SuggestOptions) -> SuggestResult:
    """Load the model and the datasets, refit cheaply on the new workloads' measured pairs, and suggest."""
    from sharewise.command_spec import recorded_names
    from sharewise.datasets import read_datasets
    from sharewise.predictor import SlowdownRegressor, suggest_pairs

    model = SlowdownRegressor.load(options.model)
    profiles, pairs = read_datasets(list(options.data))
    # A command spec names its workload by the name it is recorded under.
    workloads = recorded_names(options.workloads)
    picks = suggest_pairs(
        model,
        profiles,
        pairs,
        workloads,
        against=recorded_names(options.against) or None,
        budget=options.budget,
        device=options.device,
    )
    return SuggestResult(suggestions=picks, workloads=workloads, budget=options.budget)
