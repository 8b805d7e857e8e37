"""The step-progress protocol: a writer appends ``<step> <time>`` lines, a reader picks up only new ones."""

from __future__ import annotations

from sharewise.profiler.progress import ENV_PATH, ENV_START_STEP, ProgressReader, ProgressWriter, read_progress


def test_reader_sees_each_step_once_and_keeps_a_partial_line(tmp_path):
    path = tmp_path / "job.progress"
    reader = ProgressReader(str(path))
    assert reader.poll() == [] and reader.steps == 0  # no file yet
    with ProgressWriter(path) as w:
        w.step(10.0)
        w.step(10.5)
        assert reader.poll() == [(1, 10.0), (2, 10.5)]
        assert reader.poll() == []
        with open(path, "ab") as fh:  # a writer caught in the middle of a line
            fh.write(b"3 11.2")
        assert reader.poll() == [] and reader.steps == 2
        with open(path, "ab") as fh:
            fh.write(b"5\n")
        assert reader.poll() == [(3, 11.25)]
    assert (reader.steps, reader.first_t, reader.last_t) == (3, 10.0, 11.25)


def test_a_restart_continues_the_count_from_the_environment(tmp_path):
    path = tmp_path / "job.progress"
    env = {ENV_PATH: str(path), ENV_START_STEP: "40"}
    w = ProgressWriter.from_env(env)
    assert w is not None and w.step(1.0) == 41
    w.close()
    assert ProgressWriter.from_env({}) is None
    assert read_progress(path) == [(41, 1.0)]
