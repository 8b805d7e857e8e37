"""The documentation cannot rot: the site builds with ``mkdocs build --strict`` and its generated pages hold every
command, option and column of the code; every runnable example of ``docs/`` and the README runs and shows what its
page says; the README stays a front page whose links resolve and whose second command is the one CI runs.

A runnable example is a fenced ``bash`` block whose fence has, directly above it, a run of HTML comment lines among
which ``<!-- runnable -->``; ``<!-- expect: TEXT -->`` lines in that run (or ``expect="TEXT"`` inside the
``runnable`` comment) name text its output must contain. The convention is written out for authors in
``docs/development/testing.md``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unicodedata
from dataclasses import dataclass
from html import unescape
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = REPO / "README.md"
#: The folder of the Python running the tests (``.venv/bin``): first on the examples' PATH, for ``sharewise``.
BIN = Path(sys.executable).parent
BLOCK_TIMEOUT_S = 120
README_MAX_BYTES = 10 * 1024

_COMMENT = re.compile(r"^<!--\s*(.*?)\s*-->$")
_RUNNABLE = re.compile(r'^runnable(?:\s+expect="(?P<expect>[^"]*)")?$')
_EXPECT = re.compile(r"^expect:\s*(?P<expect>.+)$")
_FENCE = re.compile(r"^(`{3,}|~{3,})\s*(\S*)")


@dataclass(frozen=True)
class Block:
    """One runnable example: the page, the line of its fence, its code and the texts its output must show."""

    page: Path
    line: int
    code: str
    expect: tuple[str, ...]


class MarkerError(ValueError):
    """A ``runnable`` marker that marks no ``bash`` block: a typo would otherwise silently skip an example."""


def runnable_blocks(text: str, page: Path = Path("page.md")) -> list[Block]:
    """Return the runnable examples of a Markdown page, in page order (see the module docstring).

    Example: ``<!-- runnable -->``, ``<!-- expect: 2 profiles -->``, then a ```` ```bash ```` fence holding
    ``sharewise show ds`` gives ``[Block(page, 3, "sharewise show ds\\n", ("2 profiles",))]``.
    """
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = _FENCE.match(lines[i].strip())
        if not fence:
            if _marks_runnable(lines[i]) and not _opens_bash_below(lines, i):
                raise MarkerError(f"{page}:{i + 1}: a runnable marker must stand right above a ```bash fence")
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence.group(1))), len(lines))
        runnable, expect = _markers_above(lines, i)
        if runnable:
            if fence.group(2) != "bash":
                raise MarkerError(f"{page}:{i + 1}: runnable examples are ```bash blocks, got {fence.group(2)!r}")
            code = "\n".join(lines[i + 1 : end]) + "\n"
            blocks.append(Block(page, i + 1, code, tuple(expect)))
        i = end + 1
    return blocks


def _marks_runnable(line: str) -> bool:
    comment = _COMMENT.match(line.strip())
    return bool(comment and _RUNNABLE.match(comment.group(1)))


def _opens_bash_below(lines: list[str], i: int) -> bool:
    j = i + 1
    while j < len(lines) and _COMMENT.match(lines[j].strip()):
        j += 1
    return j < len(lines) and bool(_FENCE.match(lines[j].strip()))


def _markers_above(lines: list[str], fence: int) -> tuple[bool, list[str]]:
    runnable, expect, j = False, [], fence - 1
    while j >= 0 and (comment := _COMMENT.match(lines[j].strip())):
        body = comment.group(1)
        if m := _RUNNABLE.match(body):
            runnable = True
            if m.group("expect"):
                expect.append(m.group("expect"))
        elif m := _EXPECT.match(body):
            expect.append(m.group("expect").strip())
        j -= 1
    return runnable, expect[::-1]


def _pages() -> list[Path]:
    return [*sorted(DOCS.rglob("*.md")), README]


PAGES_WITH_EXAMPLES = [p for p in _pages() if runnable_blocks(p.read_text(encoding="utf-8"), p)]


# ---- the runnable examples ------------------------------------------------------------------------------
def test_markers_in_either_order_or_inline_mark_a_block():
    text = (
        "<!-- runnable -->\n<!-- expect: one -->\n```bash\necho one\n```\n\n"
        "<!-- expect: two -->\n<!-- runnable -->\n```bash\necho two\n```\n\n"
        '<!-- runnable expect="three" -->\n```bash\necho three\n```\n\n'
        "```bash\necho not runnable\n```\n"
    )
    blocks = runnable_blocks(text)
    assert [(b.line, b.code, b.expect) for b in blocks] == [
        (3, "echo one\n", ("one",)),
        (9, "echo two\n", ("two",)),
        (14, "echo three\n", ("three",)),
    ]
    with pytest.raises(MarkerError, match="right above"):
        runnable_blocks("<!-- runnable -->\n\n```bash\necho lost\n```\n")
    with pytest.raises(MarkerError, match="bash blocks"):
        runnable_blocks("<!-- runnable -->\n```python\nprint(1)\n```\n")


def _example_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.pop("VIRTUAL_ENV", None)
    env.update(extra or {})
    return env


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES_WITH_EXAMPLES, ids=lambda p: str(p.relative_to(REPO)))
def test_runnable_examples_run_and_show_what_the_page_says(page, tmp_path):
    run_page_examples(page, tmp_path)


def run_page_examples(page: Path, cwd: Path, env: dict[str, str] | None = None) -> list[str]:
    """Run a page's runnable examples in order in folder ``cwd``, with ``env`` added to the environment; fail
    where one exits non-zero or lacks a text its page expects. Return each example's output."""
    env = _example_env(env)
    outputs = []
    for block in runnable_blocks(page.read_text(encoding="utf-8"), page):
        where = f"{page.relative_to(REPO)}:{block.line}"
        try:
            proc = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", block.code],
                cwd=cwd, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"{where}: the example ran past {BLOCK_TIMEOUT_S} s; runnable examples must be tiny")
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{where}: exit code {proc.returncode}\n{block.code}\n{output[-3000:]}"
        for text in block.expect:
            assert text in output, f"{where}: expected {text!r} in the output of\n{block.code}\n{output[-3000:]}"
        outputs.append(output)
    return outputs


# ---- the README --------------------------------------------------------------------------------------------
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|<a\s[^>]*href=\"([^\"]+)\"|<img\s[^>]*src=\"([^\"]+)\"")


def heading_slugs(markdown: str) -> set[str]:
    """Return the anchors of a page's headings, as Python-Markdown's ``toc`` (and GitHub) make them."""
    slugs, in_fence = set(), False
    for line in markdown.splitlines():
        if _FENCE.match(line.strip()):
            in_fence = not in_fence
        elif not in_fence and (m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)):
            text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda k: k.group(1) or "", m.group(1))
            text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
            slugs.add(re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower()))
    return slugs


def test_readme_is_a_front_page_whose_links_resolve():
    text = README.read_text(encoding="utf-8")
    size = len(text.encode("utf-8"))
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; a front page holds at most {README_MAX_BYTES}"
    broken = []
    for match in _LINK.finditer(text):
        target = next(g for g in match.groups() if g)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, or an anchor of the README itself
        path, _, anchor = target.partition("#")
        resolved = (README.parent / path).resolve()
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in heading_slugs(resolved.read_text("utf-8")):
            broken.append(f"{target}: no heading with anchor {anchor!r} in {path}")
    assert not broken, "README.md links that do not resolve:\n" + "\n".join(broken)


def test_readme_second_command_is_what_ci_runs():
    text = README.read_text(encoding="utf-8")
    first_block = re.search(r"```bash\n(.*?)```", text, re.DOTALL)
    assert first_block, "README.md opens with a bash block of its two commands"
    commands = [line for line in first_block.group(1).splitlines() if line.strip()]
    assert len(commands) >= 2, "README.md's first bash block holds its two commands"
    assert commands[1] in (REPO / ".ci" / "run").read_text(), ".ci/run must run the README's second command verbatim"


# ---- the site -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """Build the site with ``mkdocs build --strict`` into a temporary folder; fail with mkdocs' warnings."""
    out = tmp_path_factory.mktemp("site")
    # The hook's import leaves no bytecode cache in docs/; Material's notice about its successor is not a warning.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"),
         "--site-dir", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return out


def _page_text(site: Path, page: str) -> str:
    html = (site / page / "index.html").read_text(encoding="utf-8")
    return unescape(re.sub(r"<[^>]+>", " ", html))


@pytest.mark.slow
def test_site_builds_strictly_with_every_page(site):
    assert (site / "index.html").is_file() and (site / "search" / "search_index.json").is_file()
    assert not (site / "hooks.py").exists()


@pytest.mark.slow
def test_cli_reference_holds_every_command_and_option(site):
    from sharewise.cli.docs import command

    text = _page_text(site, "reference/cli")
    missing = []

    def walk(cmd, path):
        if f"{path} " not in text and not text.rstrip().endswith(path):
            missing.append(path)
        for param in cmd.params:
            missing.extend(f"{path} {opt}" for opt in param.opts if opt.startswith("-") and opt not in text)
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            walk(sub, f"{path} {name}")

    walk(command, "sharewise")
    assert not missing, f"the CLI reference lacks: {missing}"


@pytest.mark.slow
def test_formats_reference_holds_every_column_and_trace_format(site):
    from sharewise.datasets import schema
    from sharewise.datasets.traces import TRACE_FORMATS

    text = _page_text(site, "reference/formats")
    columns = [*schema.PROFILE_COLUMNS, *schema.PROFILE_OPTIONAL, *schema.PAIR_COLUMNS, *schema.PAIR_OPTIONAL]
    missing = [c for c in [*columns, *schema.PREDICTION_COLUMNS] if c not in text]
    missing += [f"trace format {n}" for n in TRACE_FORMATS if TRACE_FORMATS.get(n).summary not in text]
    assert not missing, f"the formats reference lacks: {missing}"


# ---- the install page, the tour, the diagrams (issue 52) -----------------------------------------------------------
def _first_bash_block(path: Path) -> list[str]:
    block = re.search(r"```bash\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)
    assert block, f"{path.relative_to(REPO)} has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_install_page_gives_the_readmes_two_commands():
    # The README's second command is what CI runs (test_readme_second_command_is_what_ci_runs); the install page
    # must not drift from it (it once left out the docs extra).
    assert _first_bash_block(DOCS / "getting-started" / "install.md") == _first_bash_block(README)


def test_the_tour_is_on_the_site_and_the_readme_points_to_it_instead_of_a_copy():
    tour = DOCS / "getting-started" / "tour.md"
    assert "getting-started/tour.md" in (REPO / "mkdocs.yml").read_text(encoding="utf-8"), "the tour is in the nav"
    assert runnable_blocks(tour.read_text(encoding="utf-8"), tour), "the tour's quick commands are runnable examples"
    readme = README.read_text(encoding="utf-8")
    assert "(docs/getting-started/tour.md)" in readme
    commands = {line.strip() for block in re.findall(r"```bash\n(.*?)```", tour.read_text("utf-8"), re.DOTALL)
                for line in block.splitlines() if line.startswith("sharewise ")}
    copied = sorted(c for c in commands if c in readme)
    assert not copied, f"the README copies the tour's commands (the page is their one source): {copied}"


MERMAID = DOCS / "assets" / "mermaid"
#: Diagram types the vendored build (Mermaid's "tiny" build) leaves out, as its package's README lists them.
MERMAID_TINY_LACKS = ("mindmap", "architecture")


def test_vendored_mermaid_is_the_file_its_note_names():
    import hashlib

    script, note = MERMAID / "mermaid.tiny.js", (MERMAID / "README.md").read_text(encoding="utf-8")
    data = script.read_bytes()
    assert f"`{hashlib.sha256(data).hexdigest()}`" in note, "the SHA-256 in docs/assets/mermaid/README.md"
    assert f"({len(data):,} bytes)" in note, "the size in docs/assets/mermaid/README.md"
    assert 'globalThis["mermaid"]' in data[-2000:].decode("utf-8", "replace"), "a build that defines mermaid"
    assert "MIT License" in (MERMAID / "LICENSE").read_text(encoding="utf-8")


def test_every_diagram_is_of_a_type_the_vendored_mermaid_draws():
    unsupported = []
    for page in [*sorted(DOCS.rglob("*.md")), README]:
        for diagram in re.findall(r"```mermaid\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL):
            kind = diagram.split()[0] if diagram.split() else ""
            if kind.startswith(MERMAID_TINY_LACKS) or "$$" in diagram:
                unsupported.append(f"{page.relative_to(REPO)}: {kind}")
    assert not unsupported, f"diagrams the vendored Mermaid build cannot draw (see {MERMAID}/README.md): {unsupported}"


@pytest.mark.slow
def test_site_loads_no_script_from_the_network_and_draws_diagrams_with_its_own_mermaid(site):
    external = re.compile(r"<(?:script|img|iframe)\b[^>]*\bsrc=\"(?:https?:)?//|<link\b[^>]*\bhref=\"(?:https?:)?//")
    vendored = (MERMAID / "mermaid.tiny.js").read_bytes()
    fetched, without_mermaid, with_diagrams = [], [], 0
    for page in sorted(site.rglob("*.html")):
        html = page.read_text(encoding="utf-8")
        fetched += [f"{page.relative_to(site)}: {m.group(0)}" for m in external.finditer(html)]
        if '<pre class="mermaid">' not in html:
            continue
        with_diagrams += 1
        sources = re.findall(r"<script\b[^>]*\bsrc=\"([^\"]+mermaid[^\"]*)\"", html)
        found = [(page.parent / s).resolve() for s in sources]
        if not any(f.is_file() and f.read_bytes() == vendored for f in found):
            without_mermaid.append(f"{page.relative_to(site)}: {sources}")
    assert not fetched, "the site reads without the network, yet these load from it:\n" + "\n".join(fetched)
    assert with_diagrams >= 2, "the concept pages draw diagrams (the data flow, the scheduling loop)"
    assert not without_mermaid, f"pages with a diagram that do not load the vendored Mermaid: {without_mermaid}"
