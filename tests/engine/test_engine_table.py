"""The policies' knowledge of interference: ``SlowdownTable`` from measured pairs and from predictions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sharewise.engine.table import SlowdownTable
from sharewise.errors import ConfigError, DatasetError, SchemaError, UnknownWorkloadError


# ---- the slowdown table ------------------------------------------------------------------------------
def _pairs(rows, device="gpu-x"):
    return pd.DataFrame(
        [
            {
                "workload_a": a,
                "workload_b": b,
                "status": st,
                "slowdown_a": sa,
                "slowdown_b": sb,
                "device_name": device,
                "mode": "timeslice",
            }
            for a, b, st, sa, sb in rows
        ]
    )


def test_table_from_pairs_gives_both_directions_and_forbids_oom():
    t = SlowdownTable.from_pairs(
        _pairs(
            [
                ("a", "b", "ok", 1.2, 1.6),
                ("b", "a", "ok", 1.8, 1.4),
                ("a", "c", "oom", np.nan, np.nan),
                ("c", "c", "ok", 1.5, 1.5),
                ("a", "c", "ok", 1.1, 1.1),
            ]
        )
    )
    ids = t.ids(["a", "b", "c"])
    p10, p50, p90 = t.quantiles(ids[[0, 1]], ids[[1, 0]])
    assert p50.tolist() == pytest.approx([1.3, 1.7])  # (1.2 + 1.4) / 2 and (1.6 + 1.8) / 2
    assert p10.tolist() == p50.tolist() == p90.tolist()
    assert not t.may_share(ids[[0]], ids[[2]])[0]  # oom wins over an ok row
    assert t.may_share(ids[[2]], ids[[2]])[0]
    with pytest.raises(UnknownWorkloadError, match="known workloads: a, b, c"):
        t.ids(["zeta"])


def test_table_needs_a_device_choice_when_ambiguous():
    pairs = pd.concat([_pairs([("a", "b", "ok", 1.2, 1.3)]), _pairs([("a", "b", "ok", 1.5, 1.5)], "gpu-y")])
    with pytest.raises(ConfigError, match=r"\['gpu-x', 'gpu-y'\].*--device-name"):
        SlowdownTable.from_pairs(pairs)
    assert SlowdownTable.from_pairs(pairs, device_name="gpu-y").p50[0, 1] == 1.5
    with pytest.raises(DatasetError, match="gpu-z"):
        SlowdownTable.from_pairs(pairs, device_name="gpu-z")


def test_table_from_predictions_sorts_crossing_quantiles():
    pred = pd.DataFrame(
        {
            "workload_a": ["a"],
            "workload_b": ["b"],
            "device_name": ["gpu-x"],
            "p10_a": [1.5],
            "p50_a": [1.2],
            "p90_a": [1.9],
            "p10_b": [1.1],
            "p50_b": [1.2],
            "p90_b": [1.3],
        }
    )
    t = SlowdownTable.from_predictions(pred)
    assert (t.p10[0, 1], t.p50[0, 1], t.p90[0, 1]) == (1.2, 1.5, 1.9)
    assert not t.allowed[0, 0]  # never predicted
    with pytest.raises(SchemaError, match="missing column"):
        SlowdownTable.from_predictions(pred.drop(columns=["p90_b"]))


