"""Stand-in profiles: a workload's profile from another device of the same kind, where two workloads of a pair
were profiled on different devices (a user's machine next to the machine that measured the shipped data).

The rule, for a workload ``b`` wanted on device ``d`` (a pair with a workload profiled on ``d``):

1. ``b``'s own profile on ``d`` where it has one;
2. else its profile from another device of ``d``'s kind (``device_kind``: a CPU for a CPU, a GPU for a GPU)
   stands in for it on ``d``: preferably from a device the model was trained on, else the newest; the
   prediction is then an extrapolation across hardware, and the caller says so in one line
   (``stand_in_note``) with the command that profiles ``b`` on ``d`` (``profile_command``);
3. else (``b`` is profiled only on another kind of device, or a kind is unknown) nothing stands in, and
   the caller says which command profiles ``b`` on ``d``.

The device name itself moves nothing: a model trained on the shipped ``reference`` gives its 36 pairs the same
p50 slowdowns (in-sample MAPE 3.3%) with every profile relabelled to a device it never saw; what a stand-in
changes is that its features were measured on other hardware.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import pandas as pd

#: Device kinds that are not a kind: a profile imported without one (``sharewise import csv``) matches nothing.
UNKNOWN_KINDS = ("", "unknown", "nan", "none")
#: The ``--size`` that ``sharewise profile`` uses by default; the command leaves it out.
DEFAULT_SIZE = "small"


@dataclass(frozen=True)
class StandIn:
    """A workload's profile measured on ``source`` standing in for it on ``device_name``, where it has none.

    Example: ``StandIn(workload="resnet18", device_name="Intel(R) Xeon(R) Processor (2 cores)",
    source="AMD EPYC (2 cores)")``.
    """

    workload: str
    device_name: str
    source: str

    def to_dict(self) -> dict:
        """Return plain JSON types."""
        return asdict(self)


def device_kinds(profiles: pd.DataFrame) -> dict[str, str]:
    """Return each device's kind from the profiles' ``device_kind`` column, ``""`` where unknown.

    Example: ``{"AMD EPYC (2 cores)": "cpu", "NVIDIA H200": "cuda", "unknown": ""}``.
    """
    if "device_name" not in profiles.columns:
        return {}
    kinds = profiles["device_kind"] if "device_kind" in profiles else pd.Series("", index=profiles.index)
    frame = pd.DataFrame(
        {"d": profiles["device_name"].astype(str), "k": kinds.fillna("").astype(str).str.strip().str.lower()}
    )
    frame.loc[frame["k"].isin(UNKNOWN_KINDS), "k"] = ""
    # A device with a known kind in any row has that kind.
    frame = frame.sort_values("k", ascending=False, kind="stable").drop_duplicates("d")
    out = dict(zip(frame["d"], frame["k"], strict=True))
    return out


def profiled_devices(profiles: pd.DataFrame) -> dict[str, set[str]]:
    """Return the devices each workload is profiled on, e.g. ``{"resnet18": {"AMD EPYC (2 cores)"}}``."""
    if profiles.empty:
        return {}
    grouped = profiles.groupby(profiles["workload"].astype(str))["device_name"]
    return {str(w): set(s.astype(str)) for w, s in grouped}


def stand_in_source(
    profiles: pd.DataFrame,
    workload: str,
    device: str,
    prefer: Sequence[str] = (),
    kinds: dict[str, str] | None = None,
) -> str | None:
    """Return the device whose profile of ``workload`` stands in on ``device`` (module rule 2), or None where
    it has a profile on ``device`` or none of the same kind. ``kinds`` is ``device_kinds(profiles)``, where
    the caller has it."""
    kinds = device_kinds(profiles) if kinds is None else kinds
    kind = kinds.get(str(device), "")
    mine = profiles[profiles["workload"].astype(str) == str(workload)]
    devices = set(mine["device_name"].astype(str))
    if not kind or str(device) in devices:
        return None
    same = [d for d in devices if kinds.get(d, "") == kind]
    if not same:
        return None
    preferred = [d for d in same if d in set(map(str, prefer))] or same
    rows = mine[mine["device_name"].astype(str).isin(preferred)]
    if "created_at" in rows.columns:
        rows = rows.sort_values("created_at", kind="stable")
    return str(rows["device_name"].astype(str).iloc[-1])


def with_stand_ins(
    profiles: pd.DataFrame, wanted: Iterable[tuple[str, str]], prefer: Sequence[str] = ()
) -> tuple[pd.DataFrame, list[StandIn]]:
    """Return ``profiles`` with a stand-in row for each ``(workload, device)`` of ``wanted`` that has no profile
    on that device but one on another device of its kind (module rule), and the stand-ins, in ``wanted`` order.

    A stand-in row is the source device's newest profile of the workload with ``device_name`` set to the device
    it stands in on; every other column (features, ``device_kind``, ``mode``) is as measured. ``prefer`` names
    devices whose profiles stand in first (a model's training devices: it knows their partners).

    Example: ``with_stand_ins(profiles, [("resnet18", "Intel(R) Xeon(R) Processor (2 cores)")])`` gives the
    profiles plus resnet18's ``AMD EPYC (2 cores)`` row relabelled, and ``[StandIn("resnet18", "Intel(R)
    Xeon(R) Processor (2 cores)", "AMD EPYC (2 cores)")]``.
    """
    out: list[StandIn] = []
    rows = []
    seen = set()
    kinds = device_kinds(profiles)
    for workload, device in wanted:
        key = (str(workload), str(device))
        if key in seen:
            continue
        seen.add(key)
        source = stand_in_source(profiles, *key, prefer=prefer, kinds=kinds)
        if source is None:
            continue
        mine = profiles[(profiles["workload"].astype(str) == key[0]) & (profiles["device_name"].astype(str) == source)]
        if "created_at" in mine.columns:
            mine = mine.sort_values("created_at", kind="stable")
        rows.append(mine.tail(1).assign(device_name=key[1]))
        out.append(StandIn(key[0], key[1], source))
    if not rows:
        return profiles, []
    return pd.concat([profiles, *rows], ignore_index=True), out


def profile_command(profiles: pd.DataFrame, workloads: Sequence[str], device: str, out: str) -> str:
    """Return the command that profiles ``workloads`` on ``device`` (this machine's), as they are profiled in
    ``profiles`` elsewhere: ``sharewise profile lstm_lm resnet18 --out runs/cpu``; ``--device cuda`` for a GPU,
    ``--size`` where their profiles have one size that is not the default."""
    names = sorted(dict.fromkeys(map(str, workloads)))
    parts = ["sharewise", "profile", *names]
    if device_kinds(profiles).get(str(device), "") == "cuda":
        parts += ["--device", "cuda"]
    if "size" in profiles.columns:
        mine = profiles.loc[profiles["workload"].astype(str).isin(names), "size"]
        sizes = set(mine.dropna().astype(str)) - {""}
        if len(sizes) == 1 and sizes != {DEFAULT_SIZE}:
            parts += ["--size", sizes.pop()]
    return shlex.join([*parts, "--out", str(out)])


def _names(workloads: Sequence[str], limit: int = 8) -> str:
    names = sorted(dict.fromkeys(map(str, workloads)))
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _devices(devices) -> str:
    return " and ".join(repr(d) for d in sorted(set(devices)))


def _is(workloads: Sequence[str]) -> str:
    return "is" if len(set(workloads)) == 1 else "are"


def stand_in_note(
    stand_ins: Sequence[StandIn],
    subjects: Sequence[str],
    command: str,
    trained: Sequence[str] = (),
    why: str = "",
) -> str | None:
    """Return the one line that says which profiles stand in where, and what to do instead; None without any.

    ``subjects`` are the workloads profiled on the device the stand-ins serve, ``command`` the one that profiles
    the stand-in workloads there (``profile_command``), ``trained`` the model's training devices (a device
    outside them is said to extrapolate), ``why`` a clause after the stand-in statement. Example::

        transformer is profiled on 'Intel(R) Xeon(R) Processor (2 cores)', a3c, bert, ... only on
        'AMD EPYC (2 cores)': their profiles from there stand in, and the model has no training pair on
        'Intel(R) Xeon(R) Processor (2 cores)' (it extrapolates); to predict from profiles measured there,
        run: sharewise profile a3c bert ... --out runs/new
    """
    if not stand_ins:
        return None
    devices = {s.device_name for s in stand_ins}
    who = [s.workload for s in stand_ins]
    their = "its profile" if len(set(who)) == 1 else "their profiles"
    stand = "stands" if len(set(who)) == 1 else "stand"
    line = (
        f"{_names(subjects)} {_is(subjects)} profiled on {_devices(devices)}, {_names(who)} only on "
        f"{_devices(s.source for s in stand_ins)}: {their} from there {stand} in{why}"
    )
    trained = set(map(str, trained))
    unseen = [d for d in devices if trained and d not in trained]
    if unseen:
        line += f", and the model has no training pair on {_devices(unseen)} (it extrapolates)"
    return f"{line}; to predict from profiles measured there, run: {command}"


def missing_note(subjects: Sequence[str], device: str, others: dict[str, set[str]], command: str) -> str:
    """Return the one line that says ``others`` (workload -> the devices it is profiled on) have no profile on
    ``device`` that could stand in (another kind of device), and the command that profiles them there."""
    return (
        f"{_names(subjects)} {_is(subjects)} profiled on {device!r}, {_names(list(others))} only on "
        f"{_devices(d for ds in others.values() for d in ds)} (another kind of device: no profile of theirs can "
        f"stand in); profile them on {device!r}: {command}"
    )
