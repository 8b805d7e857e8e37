"""The public data in ``data/``: every file there, unmodified and with its source's licence and provenance, found
by ``public_data_root`` from a checkout, from ``$SHAREWISE_DATA`` or as given; an installed copy without the data
fails with a named error; and nothing in the project points at a folder beside the repository."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

import sharewise
from sharewise.datasets.public import ENV_VAR, SOURCES, public_data_root
from sharewise.errors import PublicDataNotFoundError, SharewiseError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10, where pytest depends on tomli, the same parser
    import tomli as tomllib

DATA = REPO / "data"
#: Files of data/ that are ours, not a source's.
OWN_FILES = {"README.md", "SHA256SUMS", ".gitattributes"}
#: A path into the shared folder beside the repository where the public data once sat; written so that this
#: file does not match it.
OUTSIDE = re.compile(r"""\.\./+shared\b|shared/+data|SHARED_?DATA|["']shared["']\s*/\s*["']data["']""")
#: The folders whose files may not name such a path, and the binary files in them that are not read.
SCANNED = ("sharewise", "tests", "benchmarks", "scripts")
BINARY = {".parquet", ".nbi", ".nbc", ".png", ".pyc"}


def _listed() -> dict[str, str]:
    """``{path relative to data/: sha256}`` from ``data/SHA256SUMS`` (``sha256sum``'s format)."""
    out = {}
    for line in (DATA / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        out[str(Path(name.lstrip("*")))] = digest
    return out


def test_every_file_is_listed_and_unmodified():
    listed = _listed()
    present = {str(p.relative_to(DATA)) for p in DATA.rglob("*") if p.is_file()} - OWN_FILES
    assert present == set(listed), f"unlisted: {sorted(present - set(listed))}; lost: {sorted(set(listed) - present)}"
    changed = [name for name, sha in listed.items() if hashlib.sha256((DATA / name).read_bytes()).hexdigest() != sha]
    assert changed == [], "changed since listed in SHA256SUMS: copy the upstream file again, or list the new one"


def test_each_source_has_its_licence_and_provenance():
    readme = DATA / "README.md"
    sections = re.split(r"^## ", readme.read_text(), flags=re.M)
    for source in SOURCES:
        assert list((DATA / source).glob("LICENSE*")), f"{source}/ lacks its licence"
        section = next((s for s in sections if s.startswith(f"{source}/")), None)
        assert section is not None, f"{readme} has no section '## {source}/'"
        assert re.search(r"\b[0-9a-f]{40}\b", section), f"{source}: no commit in its section"
        assert "Provenance:" in section and "Notice" in section and "format" in section.lower(), source


def test_the_data_is_not_packaged():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert all(pattern.startswith("sharewise") for pattern in config["packages"]["find"]["include"])
    assert set(config.get("package-data", {})) <= {"sharewise"}


def test_the_root_is_the_checkout_data_unless_named(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert public_data_root() == Path(sharewise.__file__).resolve().parents[1] / "data"
    other = tmp_path / "copy"
    for source in SOURCES:
        (other / source).mkdir(parents=True)
    monkeypatch.setenv(ENV_VAR, str(other))
    assert public_data_root() == other
    assert public_data_root(DATA) == DATA  # a folder given explicitly wins over the environment


def test_a_folder_without_the_data_says_what_is_missing_and_how_to_fix_it(monkeypatch, tmp_path):
    (tmp_path / "gavel").mkdir()
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    with pytest.raises(PublicDataNotFoundError) as caught:
        public_data_root()
    message = str(caught.value)
    assert isinstance(caught.value, SharewiseError) and isinstance(caught.value, FileNotFoundError)
    assert f"${ENV_VAR}={tmp_path}" in message and "no philly/, pal/ in it" in message and "fix:" in message
    with pytest.raises(PublicDataNotFoundError, match="no such folder"):
        public_data_root(tmp_path / "absent")


def test_an_installed_copy_without_a_checkout_fails_until_told_where(tmp_path):
    """A copy of the package outside any checkout (as a wheel lands in site-packages) has no data/ above it."""
    site = tmp_path / "site-packages"
    shutil.copytree(
        Path(sharewise.__file__).parent,
        site / "sharewise",
        ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc", "*.parquet"),
    )
    script = (
        "import os, sharewise.datasets.public as p\n"
        "print(p.__file__)\n"
        "try:\n"
        "    p.public_data_root()\n"
        "except p.PublicDataNotFoundError as exc:\n"
        "    print('error:', exc)\n"
        f"os.environ[{ENV_VAR!r}] = {str(DATA)!r}\n"
        "print('found:', p.public_data_root())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR} | {"PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    imported, error, found = done.stdout.splitlines()
    assert Path(imported).is_relative_to(site)
    assert error.startswith("error: expected the public data") and f"{ENV_VAR} unset" in error and "fix:" in error
    assert found == f"found: {DATA}"


def test_nothing_points_at_a_folder_beside_the_repository():
    hits = []
    for folder in SCANNED:
        for path in sorted((REPO / folder).rglob("*")):
            if not path.is_file() or path.suffix in BINARY:
                continue
            for number, line in enumerate(path.read_text(errors="ignore").splitlines(), 1):
                if OUTSIDE.search(line):
                    hits.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert hits == [], "paths outside the repository (the public data is in data/):\n" + "\n".join(hits)
