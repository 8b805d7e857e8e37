"""Application function of ``sharewise suggest``: the pair runs that would most improve a new workload's pairings."""

from __future__ import annotations

from dataclasses import dataclass, field
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
    """The suggestions, in the order to measure them per workload, and what they were chosen among.

    ``notes`` holds at most one line per device gap (the partners' profiles that stood in, and the command that
    profiles them on the new workloads' device); ``empty_reason`` says why nothing is suggested, where nothing is.
    """

    suggestions: list
    workloads: list[str]
    budget: int
    notes: list[str] = field(default_factory=list)
    empty_reason: str | None = None

    def to_json(self) -> dict:
        """Example: ``{"budget": 2, "workloads": ["vit"], "suggestions": [{"workload": "vit", "partner":
        "resnet18", "device_name": "v100", "rank": 1, "score": 0.41, "speed_sum": [0.9, 1.0, 1.2],
        "straddles": true, "reason": "...", "stand_in": null}], "notes": [], "empty_reason": null}``."""
        return {
            "budget": self.budget,
            "workloads": self.workloads,
            "suggestions": [s.to_dict() for s in self.suggestions],
            "notes": list(self.notes),
            "empty_reason": self.empty_reason,
        }


def suggest(options: SuggestOptions) -> SuggestResult:
    """Load the model and the datasets, refit cheaply on the new workloads' measured pairs, and suggest.

    Pair runs go on the new workloads' devices; a partner profiled only on another device of the same kind is
    predicted with that profile standing in (``sharewise.predictor.suggest``), and ``notes`` says so in one line
    with the ``sharewise profile`` command that profiles the partners on this device, into ``profile_folder``.
    """
    from sharewise.command_spec import recorded_names
    from sharewise.datasets import read_datasets
    from sharewise.predictor import SlowdownRegressor, suggest_pairs
    from sharewise.predictor.api import unseen_device_note
    from sharewise.predictor.stand_in import profile_command, stand_in_note
    from sharewise.predictor.suggest import candidate_stand_ins, nothing_to_suggest

    model = SlowdownRegressor.load(options.model)
    profiles, pairs = read_datasets(list(options.data))
    # A command spec names its workload by the name it is recorded under.
    workloads = recorded_names(options.workloads)
    against = recorded_names(options.against) or None
    picks = suggest_pairs(
        model, profiles, pairs, workloads, against=against, budget=options.budget, device=options.device
    )
    stand_ins = candidate_stand_ins(model, profiles, pairs, workloads, against=against, device=options.device)
    trained = (model.training_summary_ or {}).get("devices", [])
    notes = []
    for device in sorted({s.device_name for s in stand_ins}):
        here = [s for s in stand_ins if s.device_name == device]
        on_device = profiles["device_name"].astype(str) == device
        subjects = [w for w in workloads if (on_device & (profiles["workload"].astype(str) == w)).any()]
        out = profile_folder(options.data, profiles, device)
        command = profile_command(profiles, [s.workload for s in here], device, out)
        why = " to rank the pair runs (which measure both jobs there anyway)"
        notes.append(stand_in_note(here, subjects, command, trained, why))
    # Profiles of their own on a device the model has no pair on: the model extrapolates there (one line).
    unseen = unseen_device_note(model, sorted({p.device_name for p in picks} - {s.device_name for s in stand_ins}))
    if unseen is not None:
        notes.append(unseen)
    reason = None
    if not picks:
        # The command of a reason profiles partners next to the new workloads' profiles.
        mine = profiles.loc[profiles["workload"].astype(str).isin(workloads), "device_name"].astype(str)
        out = profile_folder(options.data, profiles, options.device or (sorted(mine)[0] if len(mine) else None))
        reason = nothing_to_suggest(
            profiles, pairs, workloads, against=against, budget=options.budget, device=options.device, out=out
        )
    return SuggestResult(
        suggestions=picks, workloads=workloads, budget=options.budget, notes=notes, empty_reason=reason
    )


def profile_folder(data, profiles, device: str | None = None) -> str:
    """The folder a ``sharewise profile`` command of a note writes to: the first dataset folder given that holds
    profiles on ``device`` (the user's own, next to the profiles measured there), else the first that is not a
    shipped dataset, else ``runs/KIND``.
    """
    from sharewise.datasets.store import SHIPPED_DATASETS, Dataset
    from sharewise.predictor.stand_in import device_kinds

    own = [str(folder) for folder in data if str(folder) not in SHIPPED_DATASETS]
    if device is not None and len(own) > 1:
        for folder in own:
            ds = Dataset(folder)
            if ds.profiles_dir.is_dir() and (ds.read_profiles()["device_name"].astype(str) == str(device)).any():
                return folder
    if own:
        return own[0]
    return f"runs/{device_kinds(profiles).get(str(device), '') or 'cpu'}"
