"""The MPS daemon of the ``mps`` mode starts without hanging or leaking, and ``timeslice`` refuses to run under MPS.

``tests/fixtures/fake_mps_control.sh`` stands for NVIDIA's ``nvidia-cuda-mps-control``, which needs a GPU: it is
put first on PATH under that name, and environment variables set by each test choose how it behaves (daemonise
and create the control pipe, never create it, fail, hang). Everything else is the real code.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from sharewise.errors import DeviceError, MPSUnavailableError
from sharewise.profiler.config import RunConfig
from sharewise.profiler.modes import SHARING_MODES, mps
from sharewise.profiler.modes.mps import MpsDaemon

FAKE = Path(__file__).parents[1] / "fixtures" / "fake_mps_control.sh"
#: Generous bound for what must be prompt: the old code blocked 30 s here; a busy 2-core machine takes well under 10.
PROMPT_S = 10.0


@dataclass
class FakeMps:
    """Where the fake binary records what happened, and the folders the test points the code to."""

    state: Path  # daemons: pids it started; quits: pipe dirs it was told to quit; commands: every stdin command
    tmp: Path  # tempfile's folder: a started daemon's folder is made here
    default_pipe: Path  # CUDA_MPS_PIPE_DIRECTORY, where an already running daemon would serve

    def lines(self, name: str) -> list[str]:
        path = self.state / name
        return path.read_text().split("\n")[:-1] if path.exists() else []

    def daemons(self) -> list[int]:
        return [int(pid) for pid in self.lines("daemons")]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, which this machine's init may leave unreaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _none_alive(pids: list[int], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


@pytest.fixture
def fake_mps(tmp_path, monkeypatch):
    bin_dir, state, tmp = tmp_path / "bin", tmp_path / "state", tmp_path / "tmp"
    for folder in (bin_dir, state, tmp):
        folder.mkdir()
    binary = bin_dir / "nvidia-cuda-mps-control"
    shutil.copy(FAKE, binary)
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_MPS_STATE", str(state))
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "default-pipe"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    fake = FakeMps(state, tmp, tmp_path / "default-pipe")
    yield fake
    # A test that failed may leave a fake daemon behind: end those this test's fake started, and only those.
    for pid in fake.daemons():
        try:
            if f"FAKE_MPS_STATE={state}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _mode_env(name: str):
    return SHARING_MODES.get(name).environment(RunConfig(device="cuda:0", mode=name))


def test_a_started_daemon_serves_its_pipe_and_stopping_quits_it_and_removes_its_folder(fake_mps):
    with _mode_env("mps") as env:
        pipe = Path(env["CUDA_MPS_PIPE_DIRECTORY"])
        assert (pipe / "control").exists() and pipe.parent.parent == fake_mps.tmp
        assert env["CUDA_MPS_LOG_DIRECTORY"] == str(pipe.parent / "log")
        assert fake_mps.daemons() and all(_alive(p) for p in fake_mps.daemons())
    assert fake_mps.lines("quits") == [str(pipe)]
    assert list(fake_mps.tmp.iterdir()) == []
    assert _none_alive(fake_mps.daemons())


@pytest.mark.parametrize(
    ("start", "problem"),
    [
        ("nopipe", r"did not answer on its control pipe \S+ within 0.5 s"),
        ("hang", r"did not answer on its control pipe \S+ within 0.5 s"),
        ("fail", r"-d exited with status 1"),
    ],
)
def test_a_daemon_that_does_not_come_up_is_quit_killed_and_removed(fake_mps, monkeypatch, start, problem):
    # The old code raised without quitting (the daemon lived on) and left the folder; "hang" blocked for 30 s.
    monkeypatch.setenv("FAKE_MPS_START", start)
    if start != "fail":  # a failing -d must have time to exit however busy the machine: the full deadline
        monkeypatch.setattr(mps, "READY_TIMEOUT_S", 0.5)
    daemon = MpsDaemon()
    began = time.monotonic()
    with pytest.raises(MPSUnavailableError) as caught:
        daemon.start()
    assert time.monotonic() - began < PROMPT_S
    assert not daemon.started and daemon.env == {}
    assert len(fake_mps.lines("quits")) == 1  # quit went to the daemon's own pipe, not to the default one
    assert str(fake_mps.default_pipe) not in fake_mps.lines("quits")[0]
    assert list(fake_mps.tmp.iterdir()) == []
    if start != "fail":
        assert fake_mps.daemons()
    assert _none_alive(fake_mps.daemons())
    message = str(caught.value)
    assert re.search(problem, message)
    assert "nvidia-smi -q | grep 'Compute Mode'" in message and "--mode timeslice" in message
    expected_output = {"nopipe": "daemon starting", "hang": "starting in the foreground", "fail": "prohibits MPS"}
    assert expected_output[start] in message  # the daemon's own output says why
    daemon.stop()  # nothing left to stop
    assert len(fake_mps.lines("quits")) == 1


def test_a_daemon_that_keeps_the_inherited_output_open_does_not_block_the_start(fake_mps, monkeypatch):
    # With the output captured in pipes, the old code waited for an EOF that never came, then raised TimeoutExpired.
    monkeypatch.setenv("FAKE_MPS_KEEP_OUTPUT", "1")
    daemon = MpsDaemon()
    began = time.monotonic()
    daemon.start()
    try:
        assert time.monotonic() - began < PROMPT_S
        assert daemon.started and Path(daemon.env["CUDA_MPS_PIPE_DIRECTORY"], "control").exists()
    finally:
        daemon.stop()
    assert list(fake_mps.tmp.iterdir()) == [] and _none_alive(fake_mps.daemons())


def test_a_control_command_that_hangs_is_an_mps_error_not_a_timeout(fake_mps, monkeypatch):
    monkeypatch.setenv("FAKE_MPS_CONTROL", "hang")  # get_server_list and quit never return
    monkeypatch.setattr(mps, "CONTROL_TIMEOUT_S", 0.3)
    monkeypatch.setattr(mps, "READY_TIMEOUT_S", 0.8)
    fake_mps.default_pipe.mkdir()
    (fake_mps.default_pipe / "control").touch()  # a default pipe that does not answer: not a daemon to reuse
    began = time.monotonic()
    with pytest.raises(MPSUnavailableError, match=r"did not answer on its control pipe \S+ within 0.8 s"):
        MpsDaemon().start()
    assert time.monotonic() - began < PROMPT_S
    commands = fake_mps.lines("commands")
    assert commands[0] == f"get_server_list {fake_mps.default_pipe}" and commands[-1].startswith("quit ")
    assert list(fake_mps.tmp.iterdir()) == []
    assert fake_mps.daemons() and _none_alive(fake_mps.daemons())  # quit hung, so the daemon was killed


def test_a_daemon_already_on_the_default_pipe_serves_mps_and_stops_timeslice(fake_mps):
    fake_mps.default_pipe.mkdir()
    (fake_mps.default_pipe / "control").touch()
    with _mode_env("mps") as env:
        assert env == {"CUDA_MPS_PIPE_DIRECTORY": str(fake_mps.default_pipe)}
    daemon = MpsDaemon()
    daemon.start()
    assert not daemon.started
    daemon.stop()
    assert fake_mps.lines("quits") == [] and fake_mps.daemons() == []  # used as is, never started nor stopped
    assert (fake_mps.default_pipe / "control").exists()
    with pytest.raises(DeviceError, match=f"an MPS daemon serves {fake_mps.default_pipe}.*--mode mps") as caught:
        with _mode_env("timeslice"):
            pass
    assert "echo quit | nvidia-cuda-mps-control" in str(caught.value)


def test_timeslice_checks_cheaply_and_only_where_mps_could_be(fake_mps, monkeypatch):
    with _mode_env("timeslice") as env:  # the binary is there, but no control pipe: nothing is run
        assert env == {}
    assert fake_mps.lines("commands") == []
    fake_mps.default_pipe.mkdir()
    (fake_mps.default_pipe / "control").touch()
    monkeypatch.setenv("PATH", str(fake_mps.tmp))  # no MPS binary at all: no daemon can serve there

    def no_subprocess(*args, **kwargs):
        raise AssertionError("timeslice ran a subprocess without the MPS binary")

    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    with _mode_env("timeslice") as env:
        assert env == {}
