"""Regenerate ``trace_cpu_mlp.json``: a real CPU profiler trace of two steps of a tiny MLP.

Run from the repository root: ``.venv/bin/python tests/data/make_trace_fixture.py``. The file also stores
what ``trace_features`` returned when it was made, which the tests check against.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from sharewise.profiler.trace import collect_events, trace_features, window_seconds
from sharewise.profiler.workloads.base import Workload

STEPS = 2


class FixtureMLP(Workload):
    name = "fixture_mlp"
    family = "mlp"
    default_batch_size = 8
    sizes = ("tiny",)

    def build(self, device):
        torch.manual_seed(0)
        self.device = torch.device(device)
        self.model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.x = torch.randn(self.batch_size, 32, device=device)
        self.y = torch.randint(0, 10, (self.batch_size,), device=device)

    def step(self):
        self.optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(self.model(self.x), self.y).backward()
        self.optimizer.step()


def main() -> None:
    # One thread: on a shared machine, OpenMP workers spinning against other processes blow up op times.
    torch.set_num_threads(1)
    workload = FixtureMLP(size="tiny")
    workload.build("cpu")
    for _ in range(3):
        workload.step()
    events = collect_events(workload, STEPS, "cpu")
    wall_s = window_seconds(events)
    # Rounded so the file stays small and diffs stay readable; the expected values use the rounded events.
    for e in events:
        e["start_us"] = round(e["start_us"], 3)
        e["dur_us"] = round(e["dur_us"], 3)
    payload = {
        "made_by": "tests/data/make_trace_fixture.py: FixtureMLP (32-64-10, Adam, batch 8) on CPU",
        "torch_version": torch.__version__,
        "device_kind": "cpu",
        "steps": STEPS,
        "wall_s": wall_s,
        "expected": trace_features(events, wall_s, STEPS, "cpu"),
        "events": events,
    }
    out = Path(__file__).with_name("trace_cpu_mlp.json")
    out.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out} ({len(events)} events)")


if __name__ == "__main__":
    main()
