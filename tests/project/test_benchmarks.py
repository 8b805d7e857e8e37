"""The benchmarks folder stays in order: every program in ``benchmarks/`` answers ``--help`` without doing work and
is listed on both benchmark pages, and ``benchmarks/results/`` holds outputs only (no programs, no databases; a
script kept with the commit it ran on is a ``.py.txt`` that its folder's README names with that commit)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
RESULTS = BENCHMARKS / "results"
PROGRAMS = sorted(BENCHMARKS.glob("*.py"))
#: Far above an import of torch on a busy 2-core machine (2-8 s), far below any program's real work (minutes).
HELP_TIMEOUT_S = 120
#: What Prometheus writes under ``--storage.tsdb.path`` (bench_observed_pairs and bench_run_metrics put it under
#: their ``--out``), and any other database file.
DATABASE_DIRS = {"wal", "chunks_head"}
DATABASE_FILES = re.compile(r"(^queries\.active$|^lock$|\.(db|sqlite|sqlite3|duckdb)$)")
COMMIT = re.compile(r"`[0-9a-f]{7,40}`|\bcommit [0-9a-f]{7,40}\b")


def test_programs_found():
    assert PROGRAMS, f"no program found in {BENCHMARKS}: every test below would pass for nothing"


@pytest.mark.slow
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_program_answers_help_without_work(program: Path, tmp_path: Path):
    # From an empty folder, so a program that starts its work (or writes anything) instead of answering is seen.
    proc = subprocess.run([sys.executable, str(program), "--help"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=HELP_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(f"usage: {program.name}"), proc.stdout[:500]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("page", [BENCHMARKS / "README.md", REPO / "docs" / "benchmarks" / "index.md"],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_every_program_listed(page: Path):
    text = page.read_text()
    missing = [p.name for p in PROGRAMS if f"`{p.name}" not in text]
    assert missing == [], f"{page.relative_to(REPO)} does not list {missing}"


def test_results_hold_outputs_only():
    programs, databases = [], []
    for path in RESULTS.rglob("*"):
        rel = str(path.relative_to(REPO))
        if path.is_dir() and path.name in DATABASE_DIRS:
            databases.append(rel)
        elif path.is_file() and DATABASE_FILES.search(path.name):
            databases.append(rel)
        elif path.is_file() and path.suffix == ".py":
            programs.append(rel)
    assert programs == [], (f"programs in results/: {programs}; make each a living program in benchmarks/ (with "
                            "--help), or keep it as NAME.py.txt with the commit it ran on in its folder's README")
    assert databases == [], f"databases in results/: {databases}; keep what was read from them (CSV, plots), not them"


def test_kept_scripts_named_with_their_commit():
    kept = sorted(RESULTS.rglob("*.py.txt"))
    assert kept, "no kept script found: the check below would pass for nothing"
    for script in kept:
        readme = script.parent / "README.md"
        assert readme.is_file(), f"{script.relative_to(REPO)} has no README beside it"
        text = readme.read_text()
        assert f"`{script.name}`" in text, f"{readme.relative_to(REPO)} does not name {script.name}"
        assert COMMIT.search(text), f"{readme.relative_to(REPO)} names no commit for {script.name}"
