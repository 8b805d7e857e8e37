"""MkDocs hook: pages that describe the code are filled in from the code, so they cannot drift from it.

A page holds a marker line ``<!-- generated: NAME -->``; ``on_page_markdown`` replaces it with the Markdown
that ``GENERATORS[NAME]`` writes from the objects the package itself uses: the schema dicts of
``sharewise.datasets.schema`` (with the comments written beside their columns), the registries of every
plug-in kind, and the docstrings of the trace-format modules. An unknown marker fails the build.

``on_post_page`` gives each page with a diagram the vendored Mermaid (``MERMAID_SCRIPT``), so the site draws its
diagrams without the network.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import re
import tokenize
from collections.abc import Callable

from mkdocs.exceptions import PluginError
from mkdocs.utils import get_relative_url

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


def on_page_markdown(markdown: str, page, config, files) -> str:
    def expand(match: re.Match) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            known = ", ".join(sorted(GENERATORS))
            raise PluginError(f"{page.file.src_uri}: unknown marker {name!r}; known markers: {known}")
        return GENERATORS[name]()

    return MARKER.sub(expand, markdown)


# ---- diagrams ---------------------------------------------------------------------------------------------
#: The vendored Mermaid, relative to the site's root (``docs/assets/mermaid/README.md``: its build, version, licence).
MERMAID_SCRIPT = "assets/mermaid/mermaid.tiny.js"
#: What Material's superfences config (``mkdocs.yml``) makes of a ```` ```mermaid ```` block.
MERMAID_BLOCK = '<pre class="mermaid">'


def on_post_page(output: str, page, config) -> str:
    # Material fetches Mermaid from a CDN unless the page already defines a global ``mermaid``; a classic script at
    # the end of the body runs before DOMContentLoaded, when Material draws the diagrams, so it finds this copy.
    # Only pages with a diagram load it: the script is 2.6 MB.
    if MERMAID_BLOCK not in output:
        return output
    head, body_end, tail = output.rpartition("</body>")
    if not body_end:
        raise PluginError(f"{page.file.src_uri}: no </body> to add the Mermaid script before")
    src = get_relative_url(MERMAID_SCRIPT, page.url)
    return f'{head}<script src="{src}"></script>\n{body_end}{tail}'


# ---- comments beside dict entries ------------------------------------------------------------------------
def dict_comments(module) -> dict[str, dict[str, str]]:
    """Return, per module-level dict literal, each key's comment: the one on its line, else the comment lines
    right above it, else the previous key's (``"solo_a": "float",  # steps/s of each workload alone`` covers
    ``solo_b`` on the next line).

    Example: ``{"PAIR_OPTIONAL": {"ci_a": "Half-width of ...", "isolation": "warm: repeats in ..."}}``.
    """
    source = inspect.getsource(module)
    own_line, trailing = {}, {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            (own_line if tok.line.strip().startswith("#") else trailing)[tok.start[0]] = text
    out: dict[str, dict[str, str]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.AnnAssign):
            target = node.target
        elif isinstance(node, ast.Assign):
            target = node.targets[0]
        else:
            continue
        if not isinstance(target, ast.Name) or not isinstance(node.value, ast.Dict):
            continue
        notes, previous = {}, ""
        for key in node.value.keys:
            if not isinstance(key, ast.Constant):
                continue
            above, line = [], key.lineno - 1
            while line in own_line:
                above.insert(0, own_line[line])
                line -= 1
            previous = notes[key.value] = trailing.get(key.lineno) or " ".join(above) or previous
        out[target.id] = notes
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


# ---- generators ---------------------------------------------------------------------------------------
def dataset_tables() -> str:
    from sharewise.datasets import schema

    notes = dict_comments(schema)
    parts = []
    for title, required, optional, key in (
        ("profiles", "PROFILE_COLUMNS", "PROFILE_OPTIONAL", schema.PROFILE_KEY),
        ("pairs", "PAIR_COLUMNS", "PAIR_OPTIONAL", schema.PAIR_KEY),
    ):
        rows = ["| column | kind | required | meaning |", "| --- | --- | --- | --- |"]
        for name, required_too in ((required, "yes"), (optional, "no")):
            for column, kind in getattr(schema, name).items():
                note = notes.get(name, {}).get(column, "")
                rows.append(f"| `{column}` | {kind} | {required_too} | {_cell(note)} |")
        if title == "profiles":
            rows.append("| `f_*` | float | no | features of the solo profile; NaN where not measured |")
        parts.append(
            f"### {title}\n\nOne row per measurement; a newer row with the same "
            f"{', '.join(f'`{k}`' for k in key)} replaces an older one when a folder is read.\n\n" + "\n".join(rows)
        )
    statuses = ", ".join(f"`{s}`" for s in schema.PAIR_STATUSES)
    parts.append(
        f"A pair's `status` is one of {statuses}; only `ok` rows must hold positive finite throughputs and "
        f"slowdowns. Schema version: {schema.SCHEMA_VERSION}."
    )
    return "\n\n".join(parts)


def prediction_columns() -> str:
    from sharewise.datasets import schema

    return "`" + "`, `".join(schema.PREDICTION_COLUMNS) + "`"


def trace_formats() -> str:
    from sharewise.datasets.traces import TRACE_FORMATS

    parts = []
    for name in TRACE_FORMATS:
        fmt = TRACE_FORMATS.get(name)
        module = importlib.import_module(TRACE_FORMATS.target(name).partition(":")[0])
        doc = inspect.getdoc(module) or ""
        parts.append(f"### `{name}`\n\n*{fmt.summary}.*\n\n{doc}")
    return "\n\n".join(parts)


def queue_cluster_columns() -> str:
    from sharewise.planner.jobs import CLUSTER_COLUMNS, QUEUE_COLUMNS

    return (
        f"- **queue** (`recommend --queue`): required columns {', '.join(f'`{c}`' for c in QUEUE_COLUMNS)}; "
        "optional `gpus` (default 1) and `remaining_s`.\n"
        f"- **cluster** (`recommend --cluster`): required columns {', '.join(f'`{c}`' for c in CLUSTER_COLUMNS)}; "
        "optional `node`, and `job_id` and `workload` of a job already running there (a row per resident job, at "
        "most two per GPU); `gpu_uuid` and `gpu_index` for the deployable plans (`--emit`)."
    )


def command_spec_grammar() -> str:
    from sharewise.command_spec import GRAMMAR

    return f"```text\n{GRAMMAR}\n```"


# The registry of every plug-in kind: (title, module, attribute).
REGISTRIES = (
    ("Workloads", "sharewise.profiler.workloads", "REGISTRY"),
    ("Sharing modes", "sharewise.profiler.modes", "SHARING_MODES"),
    ("Executors", "sharewise.profiler.executors", "EXECUTORS"),
    ("Importers", "sharewise.datasets.importers", "IMPORTERS"),
    ("Trace formats", "sharewise.datasets.traces", "TRACE_FORMATS"),
    ("Policies", "sharewise.policy", "REGISTRY"),
    ("Plan emitters", "sharewise.deploy", "EMITTERS"),
)


def _summary(registry, name: str) -> str:
    """An entry's one line: a policy's ``describe``, else its ``summary`` or ``description``, else its
    docstring's first paragraph."""
    if registry.kind == "policy":
        from sharewise.policy import describe

        return describe(name)
    obj = registry.get(name)
    text = getattr(obj, "summary", None) or getattr(obj, "description", None)
    if not text:
        text = (inspect.getdoc(obj) or "").split("\n\n")[0]
    return " ".join(text.split())


def registries() -> str:
    parts = []
    for title, module, attribute in REGISTRIES:
        registry = getattr(importlib.import_module(module), attribute)
        rows = ["| name | object | what it is |", "| --- | --- | --- |"]
        for name in registry:
            target = registry.target(name).removeprefix(registry.package + ".")
            rows.append(f"| `{name}` | `{target}` | {_cell(_summary(registry, name))} |")
        parts.append(
            f"### {title}\n\n`{module}.{attribute}`, objects in `{registry.package}`; every entry follows "
            f"`{registry.signature}`.\n\n" + "\n".join(rows)
        )
    return "\n\n".join(parts)


GENERATORS: dict[str, Callable[[], str]] = {
    "dataset-tables": dataset_tables,
    "prediction-columns": prediction_columns,
    "trace-formats": trace_formats,
    "queue-cluster-columns": queue_cluster_columns,
    "command-spec-grammar": command_spec_grammar,
    "registries": registries,
}
