"""Command specs: a user's training command named as a workload, ``[NAME=]cmd:PROGRAM ARG...`` (pure text).

The value type and its parser sit below every layer that stores or reads workload names (datasets, traces,
queues, the profiler): nothing here imports, runs or launches anything. The grammar, and the launcher that
runs a command as a job, are described in ``sharewise.profiler.commands``.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sharewise.errors import ConfigError

#: The marker that makes a spec a command: ``[NAME=]cmd:...``.
PREFIX = "cmd:"
_SPEC = re.compile(r"\s*(?:(?P<name>[^\s=:]+)=)?cmd:(?P<rest>.*)", re.DOTALL)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_ENV_WORD = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)", re.DOTALL)
_OPTIONS = ("--cwd", "--batch-size", "--progress-regex")
GRAMMAR = "[NAME=]cmd:[--cwd DIR] [--batch-size N] [--progress-regex RE] [--] [VAR=VALUE ...] PROGRAM [ARG ...]"

class CommandSpecError(ConfigError):
    """A command spec that does not follow the grammar (``commands.GRAMMAR``)."""


@dataclass(frozen=True)
class CommandSpec:
    """A parsed command spec (a value type; ``spec`` is the text it came from).

    Example: ``CommandSpec(name="mytrain", argv=("python", "train.py", "--bs", "64"), cwd=None, env=(),
    batch_size=64, progress_regex=None, spec="mytrain=cmd:--batch-size 64 python train.py --bs 64")``.
    """

    name: str
    argv: tuple[str, ...]
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    batch_size: int | None = None
    progress_regex: str | None = None
    spec: str = ""

    @property
    def environ(self) -> dict[str, str]:
        """The environment variables the spec sets, e.g. ``{"SEED": "1"}``."""
        return dict(self.env)

    def workdir(self, base: str | os.PathLike | None = None) -> Path:
        """The working directory the command runs in: ``cwd`` (``~`` expanded) against ``base`` (default
        the current directory)."""
        base_dir = Path(base) if base is not None else Path.cwd()
        return (base_dir / Path(self.cwd).expanduser()) if self.cwd else base_dir


def is_command_spec(spec: object) -> bool:
    """Whether ``spec`` names a command (``[NAME=]cmd:...``); pure text.

    >>> is_command_spec("mytrain=cmd:python train.py"), is_command_spec("resnet18"), is_command_spec("f.py:Net")
    (True, False, False)
    """
    return isinstance(spec, str) and _SPEC.fullmatch(spec) is not None


def parse_command(spec: str) -> CommandSpec:
    """Parse a command spec (see the module docstring for the grammar); imports and runs nothing.

    >>> c = parse_command("mytrain=cmd:--batch-size 64 SEED=1 python train.py --lr '1e-3'")
    >>> c.name, c.argv, c.env, c.batch_size
    ('mytrain', ('python', 'train.py', '--lr', '1e-3'), (('SEED', '1'),), 64)
    >>> parse_command("cmd:python -m pkg.train").name
    'train'
    """
    match = _SPEC.fullmatch(spec) if isinstance(spec, str) else None
    if match is None:
        raise CommandSpecError(f"{spec!r} is not a command spec; expected {GRAMMAR}")
    text = spec.strip()
    try:
        words = shlex.split(match["rest"], posix=True)
    except ValueError as exc:
        raise CommandSpecError(
            f"command spec {text!r}: {exc} (the text after 'cmd:' is split like a POSIX shell line; close "
            "every quote)"
        ) from None
    options, i = _options(words, text)
    env: list[tuple[str, str]] = []
    while i < len(words) and (m := _ENV_WORD.fullmatch(words[i])):
        key = m["key"]
        if key == "CUDA_VISIBLE_DEVICES" or key.startswith("SHAREWISE_"):
            raise CommandSpecError(
                f"command spec {text!r}: {key} is set by sharewise (it chooses the device and runs the step "
                "protocol); leave it out"
            )
        env.append((key, m["value"]))
        i += 1
    argv = tuple(words[i:])
    if not argv:
        raise CommandSpecError(f"command spec {text!r} names no program; expected {GRAMMAR}")
    name = match["name"] or _derived_name(argv)
    if not _NAME.fullmatch(name):
        raise CommandSpecError(
            f"command spec {text!r}: name {name!r} must be 1-64 letters, digits, '_', '.' or '-', starting with "
            "a letter or digit; name it as NAME=cmd:..."
        )
    return CommandSpec(name=name, argv=argv, env=tuple(env), spec=text, **options)


def _options(words: list[str], text: str) -> tuple[dict[str, Any], int]:
    """Read the leading ``--key VALUE`` options; return them and the index of the first word after them."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(words) and words[i].startswith("--"):
        word = words[i]
        if word == "--":
            return out, i + 1
        key, eq, value = word.partition("=")
        if key not in _OPTIONS:
            raise CommandSpecError(
                f"command spec {text!r}: unknown option {key!r} before the program; options are "
                f"{', '.join(_OPTIONS)} (put '--' before a program that starts with '--')"
            )
        if not eq:
            if i + 1 >= len(words):
                raise CommandSpecError(f"command spec {text!r}: option {key} needs a value")
            value, i = words[i + 1], i + 2
        else:
            i += 1
        if key == "--cwd":
            out["cwd"] = value
        elif key == "--batch-size":
            if not value.isdigit() or int(value) < 1:
                raise CommandSpecError(
                    f"command spec {text!r}: --batch-size must be a whole number >= 1, got {value!r}"
                )
            out["batch_size"] = int(value)
        else:
            try:
                re.compile(value)
            except re.error as exc:
                raise CommandSpecError(
                    f"command spec {text!r}: --progress-regex {value!r} is not a regular expression: {exc}"
                ) from None
            out["progress_regex"] = value
    return out, i


def _derived_name(argv: Sequence[str]) -> str:
    for k, word in enumerate(argv):
        if word.endswith(".py"):
            return Path(word).stem
        if word == "-m" and k + 1 < len(argv):
            return argv[k + 1].rsplit(".", 1)[-1]
    return Path(argv[0]).name


def recorded_name(spec: str) -> str:
    """The name a spec is recorded under: a command's ``name``, any other spec stripped and unchanged.

    >>> recorded_name("mytrain=cmd:python train.py"), recorded_name(" resnet18 ")
    ('mytrain', 'resnet18')
    """
    return parse_command(spec).name if is_command_spec(spec) else str(spec).strip()


def recorded_names(specs: Sequence[str]) -> list[str]:
    """``recorded_name`` of each spec; a column of 100,000 cells parses each distinct command once."""
    names: dict[str, str] = {}
    out = []
    for s in specs:
        if s not in names:
            names[s] = recorded_name(s)
        out.append(names[s])
    return out
