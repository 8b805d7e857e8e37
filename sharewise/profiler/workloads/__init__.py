"""Workload registry: built-in names map lazily to classes; user workloads load from ``file.py:Class``.

Everything (CLI choices, tests, docs) reads ``REGISTRY``; importing this module does not import torch.
A spec is a built-in name, ``path/to/file.py:ClassName``, ``package.module:ClassName``, or a command
``NAME=cmd:python train.py ...`` (``profiler.commands``: run as it is, measured from outside, never loaded
as a class).
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sharewise.errors import ConfigError, UnknownWorkloadError, WorkloadContractError
from sharewise.registry import Registry

if TYPE_CHECKING:
    from sharewise.profiler.workloads.base import Workload

#: name -> ``module:ClassName`` inside this package, grouped by family.
REGISTRY: Registry[type[Workload]] = Registry(
    "workload",
    "sharewise.profiler.workloads",
    {
        "bert": "nlp:Bert",
        "bert_infer": "nlp:BertInfer",
        "dcgan": "gan:DCGAN",
        "cyclegan": "gan:CycleGAN",
        "gpt2": "nlp:GPT2",
        "lstm_lm": "nlp:LSTMLM",
        "mobilenet_v2": "vision:MobileNetV2",
        "pointnet": "pointcloud:PointNet",
        "ncf": "recsys:NCF",
        "dae_cf": "recsys:DAECF",
        "resnet18": "vision:ResNet18",
        "resnet18_cifar": "vision:ResNet18CIFAR",
        "resnet50": "vision:ResNet50",
        "resnet50_infer": "vision:ResNet50Infer",
        "a3c": "rl:A3C",
        "a3c_lstm": "rl:A3CLSTM",
        "ppo": "rl:PPO",
        "transformer": "nlp:Transformer",
        "vgg16": "vision:VGG16",
    },
    signature="Workload subclass: cls(batch_size=None, size='small'); build(device), step(), close()",
    error=UnknownWorkloadError,
)

_REQUIRED_METHODS = ("build", "step", "close")


def workload_names() -> list[str]:
    """Return the sorted names of the built-in workloads."""
    return sorted(REGISTRY)


#: What ``Workload.describe`` returns: class attributes, all of them.
_DESCRIBED = ("name", "family", "default_batch_size", "kind", "sizes", "description")


def describe_workload(name: str) -> dict:
    """Return ``Workload.describe()`` of the built-in workload ``name`` without importing torch where it can.

    The built-in workloads' modules import torch (1-2 s) at the top, and a description is class attributes
    only: they are read from the modules' source, the class and the package's bases it inherits from. A class
    whose described attributes are not all plain literals there is imported and asked (the same dict).

    >>> describe_workload("ncf")["family"]
    'recommendation'
    """
    module, _, class_name = REGISTRY.target(name).partition(":")
    attrs = _class_attributes(module, class_name)
    if not all(key in attrs for key in _DESCRIBED):
        return load_workload_class(name)().describe()
    return {key: list(attrs[key]) if key == "sizes" else attrs[key] for key in _DESCRIBED}


@functools.cache
def _module_source(module: str) -> ast.Module | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return ast.parse(Path(spec.origin).read_text(encoding="utf-8"))


def _class_attributes(module: str, class_name: str) -> dict:
    """Literal class attributes of ``module.class_name``, inherited ones included where the base is defined in the
    same module or imported from a sharewise module (a class from another package contributes nothing: reading
    its source would import its package). A decorated class, or an attribute bound to anything but a literal, is
    unknown: missing from the result, so ``describe_workload`` imports the class.
    """
    tree = _module_source(module)
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None) if tree else None
    if node is None or node.decorator_list:
        return {}
    imported = {
        alias.asname or alias.name: stmt.module
        for stmt in tree.body
        if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module
        for alias in stmt.names
    }
    attrs: dict = {}
    for base in reversed(node.bases):  # the first base's attributes win, as in a chain of single inheritance
        source = imported.get(base.id, module) if isinstance(base, ast.Name) else None
        if source == module or (source or "").startswith("sharewise."):
            attrs.update(_class_attributes(source, base.id))
    for stmt in node.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        else:
            continue
        if isinstance(target, ast.Name):
            try:
                attrs[target.id] = ast.literal_eval(value)
            except (ValueError, TypeError):  # a name, a call, an unhashable key: not a literal
                attrs.pop(target.id, None)
    return attrs


def load_workload_class(spec: str) -> type[Workload]:
    """Resolve a workload spec to its class.

    ``spec`` is a built-in name (``"resnet18"``), a file spec (``"path/to/file.py:ClassName"``) or a module
    spec (``"package.module:ClassName"``). The class has ``build``, ``step`` and ``close`` methods (a
    ``Workload`` subclass, or a plain class whose constructor takes no arguments), or is a
    ``torch.nn.Module`` with an optional batch description (``"file.py:Net[input=3x32x32]"``); either
    comes back behind the ``Workload`` constructor (``workloads.adapters``).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise UnknownWorkloadError(f"workload spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    if spec in REGISTRY:
        return REGISTRY.get(spec)
    from sharewise.command_spec import is_command_spec

    if is_command_spec(spec):
        raise WorkloadContractError(
            f"workload {spec!r} is a command: it runs as its own process (profiler.blackbox), not as a class"
        )
    from sharewise.profiler.workloads.adapters import adapt, split_spec

    full_spec = spec
    spec, description = split_spec(spec)
    if ":" not in spec:
        script = next((w for w in spec.split() if w.endswith(".py")), None)
        if script is not None:
            stem = Path(script).stem.replace("-", "_") or "mytrain"
            raise UnknownWorkloadError(
                f"unknown workload {spec!r}; to measure a training script as it is, name it as a command: "
                f"'{stem}=cmd:{spec if ' ' in spec else 'python ' + spec}' (see 'Your training script as is' "
                "in docs/guides/profile.md)"
            )
        raise UnknownWorkloadError(
            f"unknown workload {spec!r}; known workloads: {', '.join(workload_names())}. "
            "A workload of your own is 'path/to/file.py:ClassName' or 'package.module:ClassName', or a "
            "command 'NAME=cmd:python train.py ...'."
        )
    location, _, class_name = spec.rpartition(":")
    if location.endswith(".py") or "/" in location or "\\" in location:
        module = _import_file(Path(location), spec)
    else:
        try:
            module = importlib.import_module(location)
        except ImportError as exc:
            raise UnknownWorkloadError(
                f"workload {spec!r}: cannot import module {location!r} ({exc}); "
                "check that it is installed or on PYTHONPATH, or give a file path ending in .py"
            ) from None
    cls = getattr(module, class_name, None)
    if cls is None:
        found = sorted(n for n, v in vars(module).items() if isinstance(v, type) and hasattr(v, "step"))
        raise UnknownWorkloadError(
            f"workload {spec!r}: {location} has no class {class_name!r}"
            + (f"; classes with a step() method there: {', '.join(found)}" if found else "")
        )
    if not isinstance(cls, type):
        check_contract(cls, full_spec)
    adapted = adapt(cls, full_spec, description)
    check_contract(adapted, full_spec)
    return adapted


def check_contract(cls: object, spec: str) -> None:
    """Raise ``WorkloadContractError`` unless ``cls`` is a class with the workload methods."""
    if not isinstance(cls, type):
        raise WorkloadContractError(f"workload {spec!r}: expected a class, got {type(cls).__name__}")
    missing = [m for m in _REQUIRED_METHODS if not callable(getattr(cls, m, None))]
    if missing:
        raise WorkloadContractError(
            f"workload {spec!r}: class {cls.__name__} lacks method(s) {', '.join(missing)}; "
            "a workload needs build(device), step() and close() "
            "(subclass sharewise.profiler.workloads.base.Workload), or is a torch.nn.Module"
        )


def workload_name(spec: str) -> str:
    """Return the name a spec is recorded under in tables: the built-in name, a command's name (read from
    the spec alone, nothing runs), or the class's ``name``."""
    if spec in REGISTRY:
        return spec
    from sharewise.command_spec import is_command_spec, parse_command

    if is_command_spec(spec):
        return parse_command(spec).name
    cls = load_workload_class(spec)
    return getattr(cls, "name", "") or cls.__name__


def resolve_specs(specs: Sequence[str]) -> list[tuple[str, str]]:
    """Validate workload specs up front (before any run) and return ``(spec, recorded name)`` pairs.

    >>> resolve_specs(["resnet18", "ncf"])
    [('resnet18', 'resnet18'), ('ncf', 'ncf')]
    """
    if not specs:
        raise ConfigError("no workloads given; name at least one (see 'sharewise workloads')")
    from sharewise.command_spec import is_command_spec

    resolved, seen = [], set()
    for spec in specs:
        name = workload_name(spec)
        if is_command_spec(spec) and name in REGISTRY:
            raise ConfigError(
                f"command {spec!r} would be recorded as {name!r}, a built-in workload's name, and mix with its "
                f"measurements; name it differently, e.g. my_{name}=cmd:..."
            )
        if name in seen:
            raise ConfigError(f"workload {name!r} is listed twice; self-pairs are measured automatically")
        seen.add(name)
        resolved.append((spec, name))
    return resolved


def _import_file(path: Path, spec: str):
    if not path.is_file():
        raise UnknownWorkloadError(
            f"workload {spec!r}: file {str(path)!r} not found (relative paths start at {Path.cwd()})"
        )
    module_name = f"sharewise_user_{abs(hash(str(path.resolve())))}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise UnknownWorkloadError(f"workload {spec!r}: cannot load {str(path)!r} as a Python file")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise WorkloadContractError(
            f"workload {spec!r}: importing {str(path)!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    return module
