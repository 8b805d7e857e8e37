"""A user's own model as a workload without a wrapper: plain classes and ``torch.nn.Module`` classes.

``load_workload_class`` hands every loaded class through ``adapt``, so the rest of sharewise sees one
contract (``Workload``: ``cls(batch_size=None, size="small")``, ``build``/``step``/``close``):

- a ``Workload`` subclass is used as it is;
- a plain class with ``build(device)``, ``step()`` and ``close()`` whose constructor takes no arguments (or
  only ``batch_size`` and/or ``size``) is wrapped in a ``PlainWorkload``;
- a ``torch.nn.Module`` class is trained (or run) on a synthetic batch from a description in the spec:
  ``file.py:Net[input=3x32x32;loss=cross_entropy;optimizer=adam;lr=0.001]`` (``ModuleWorkload``);
- any other constructor is refused in one line naming the signature sharewise calls.

Batch description keys (every one optional; ``;`` or ``,`` between them):

``input``
    One tensor per sample, without the batch dimension: ``3x224x224`` (float32 noise), ``128:int64:30000``
    (token ids below 30000); several inputs joined by ``+``. Default: read off the model's first layer
    (``Linear``, ``Conv1d/2d/3d`` at 32 per spatial side, ``Embedding``/``EmbeddingBag`` with 16 ids).
``loss``
    ``cross_entropy`` (random labels over the output's last dimension), ``mse`` (a fixed random target) or
    ``auto`` (default: cross entropy for a 2-D output, else mse).
``optimizer``, ``lr``
    ``sgd`` (default), ``adam`` or ``adamw``; learning rate 0.01 by default.
``mode``
    ``train`` (default: forward, backward, optimizer step) or ``infer`` (forward under inference mode).
"""

from __future__ import annotations

import inspect
import re
from typing import Any, ClassVar

from sharewise.errors import WorkloadContractError
from sharewise.profiler.workloads.base import Workload

_CONSTRUCTOR_PARAMS = ("batch_size", "size")
_EXPECTED = "__init__(self) or __init__(self, batch_size=None, size='small')"
_DESCRIPTION_KEYS = ("input", "loss", "optimizer", "lr", "mode")
#: The batch size of a model described by its batch alone, when ``--batch-size`` does not say.
MODULE_BATCH_SIZE = 32
_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32")


def split_spec(spec: str) -> tuple[str, str]:
    """Split ``"file.py:Net[input=3x32x32]"`` into the class spec and the batch description text.

    >>> split_spec("net.py:Net[input=3x32x32;loss=mse]")
    ('net.py:Net', 'input=3x32x32;loss=mse')
    >>> split_spec("resnet18")
    ('resnet18', '')
    """
    match = re.fullmatch(r"(?P<cls>[^\[]+?)\s*(?:\[(?P<desc>[^\[\]]*)\])?", spec.strip())
    if match is None:
        raise WorkloadContractError(
            f"workload {spec!r}: expected 'path/to/file.py:Class' with an optional batch description "
            "'[input=3x32x32;loss=cross_entropy]'"
        )
    return match["cls"], (match["desc"] or "").strip()


def parse_description(text: str, spec: str) -> dict[str, Any]:
    """Parse a batch description into ``{"input": [(shape, dtype, high), ...], "loss": ..., ...}``.

    >>> parse_description("input=3x32x32+8:int64:100;lr=0.1", "x")["input"]
    [((3, 32, 32), 'float32', None), ((8,), 'int64', 100)]
    """
    out: dict[str, Any] = {}
    for item in (p.strip() for p in re.split(r"[;,]", text) if p.strip()):
        key, sep, value = (s.strip() for s in item.partition("="))
        if not sep or key not in _DESCRIPTION_KEYS:
            raise WorkloadContractError(
                f"workload {spec!r}: {item!r} is not one of {', '.join(k + '=...' for k in _DESCRIPTION_KEYS)}"
            )
        if key == "input":
            out[key] = [_parse_tensor(t, spec) for t in value.split("+")]
        elif key == "lr":
            try:
                out[key] = float(value)
            except ValueError:
                raise WorkloadContractError(f"workload {spec!r}: lr must be a number, got {value!r}") from None
        else:
            allowed = {"loss": ("auto", "cross_entropy", "mse"), "optimizer": ("sgd", "adam", "adamw"),
                       "mode": ("train", "infer")}[key]
            if value not in allowed:
                raise WorkloadContractError(f"workload {spec!r}: {key} must be one of {list(allowed)}, got {value!r}")
            out[key] = value
    return out


def _parse_tensor(text: str, spec: str) -> tuple[tuple[int, ...], str, int | None]:
    shape, _, rest = text.strip().partition(":")
    dtype, _, high = rest.partition(":")
    dtype = dtype or "float32"
    try:
        dims = tuple(int(d) for d in shape.lower().split("x"))
        bound = int(high) if high else None
    except ValueError:
        dims, bound = (), None
    if not dims or min(dims) < 1 or dtype not in _DTYPES or (bound is not None and bound < 1):
        raise WorkloadContractError(
            f"workload {spec!r}: input {text!r} is not SHAPE[:DTYPE[:HIGH]] such as 3x224x224 or "
            f"128:int64:30000 (dtypes: {', '.join(_DTYPES)})"
        )
    return dims, dtype, bound


def constructor_params(cls: type, spec: str) -> frozenset[str]:
    """Return which of ``batch_size`` and ``size`` the constructor of ``cls`` takes; refuse any other need.

    Raises ``WorkloadContractError`` (one line, naming the expected signature) when the constructor has a
    required parameter sharewise cannot supply.
    """
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):  # a builtin or C-implemented constructor: assume it takes nothing
        return frozenset()
    accepts, required = set(), []
    for name, p in sig.parameters.items():
        if p.kind is p.VAR_KEYWORD:
            accepts.update(_CONSTRUCTOR_PARAMS)
        elif p.kind is p.VAR_POSITIONAL:
            continue
        elif name in _CONSTRUCTOR_PARAMS and p.kind is not p.POSITIONAL_ONLY:
            accepts.add(name)
        elif p.default is p.empty:
            required.append(name)
    if required:
        raise WorkloadContractError(
            f"workload {spec!r}: sharewise cannot construct {cls.__name__}{sig} (it needs "
            f"{', '.join(required)}); a workload's constructor is {_EXPECTED}: give those parameters "
            "defaults, or set them up in build(device)"
        )
    return frozenset(accepts)


def adapt(cls: type, spec: str, description: str = "") -> type[Workload]:
    """Return a class that follows the ``Workload`` contract for the loaded class ``cls`` (see the module)."""
    has_methods = all(callable(getattr(cls, m, None)) for m in ("build", "step", "close"))
    if issubclass(cls, Workload) and not description:
        constructor_params(cls, spec)
        return cls
    import torch

    if description and (has_methods or not issubclass(cls, torch.nn.Module)):
        raise WorkloadContractError(
            f"workload {spec!r}: a batch description [...] is for torch.nn.Module classes, and "
            f"{cls.__name__} is not one, or has its own build/step/close"
        )
    if has_methods:
        accepts = constructor_params(cls, spec)
        return type(cls.__name__, (PlainWorkload,), _attributes(cls, target=cls, accepts=accepts, spec=spec))
    if issubclass(cls, torch.nn.Module):
        constructor_params(cls, spec)
        parsed = parse_description(description, spec)
        attrs = _attributes(cls, target=cls, _parsed=parsed, spec=spec)
        attrs["kind"] = "infer" if parsed.get("mode") == "infer" else "train"
        attrs["default_batch_size"] = MODULE_BATCH_SIZE
        return type(cls.__name__, (ModuleWorkload,), attrs)
    return cls  # check_contract names what is missing


def _attributes(cls: type, **extra) -> dict[str, Any]:
    return {
        "name": getattr(cls, "name", "") or cls.__name__,
        "family": getattr(cls, "family", "") or "user",
        "default_batch_size": int(getattr(cls, "default_batch_size", 0) or getattr(cls, "batch_size", 0) or 1),
        "description": (inspect.getdoc(cls) or f"user workload {cls.__name__}").splitlines()[0],
        "__module__": cls.__module__,
        **extra,
    }


class PlainWorkload(Workload):
    """A user's plain class with ``build``/``step``/``close``, behind the ``Workload`` constructor.

    ``batch_size`` and ``size`` reach the user's constructor only where it takes them; a batch size it
    cannot take is refused unless it is the class's own.
    """

    target: ClassVar[type]
    accepts: ClassVar[frozenset[str]]
    spec: ClassVar[str]

    def __init__(self, batch_size: int | None = None, size: str = "small") -> None:
        super().__init__(batch_size, size)
        kwargs: dict[str, Any] = {}
        if "size" in self.accepts:
            kwargs["size"] = size
        if "batch_size" in self.accepts:
            if batch_size is not None:
                kwargs["batch_size"] = batch_size
        elif batch_size is not None and batch_size != self.default_batch_size:
            raise WorkloadContractError(
                f"workload {self.spec!r}: {self.target.__name__}() takes no batch_size, so batch size "
                f"{batch_size} cannot be applied; give it {_EXPECTED} or drop --batch-size"
            )
        self.inner = self.target(**kwargs)
        own = getattr(self.inner, "batch_size", None)
        if isinstance(own, int) and not isinstance(own, bool) and own >= 1:
            self.batch_size = own

    def build(self, device: Any) -> None:
        import torch

        self.device = torch.device(device)
        self.inner.build(device)
        self.model = _modules_of(self.inner)

    def step(self) -> None:
        self.inner.step()

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()
        super().close()


def _modules_of(obj: Any) -> Any:
    """The model a plain workload trains: its ``model`` attribute, else every module it holds."""
    import torch

    model = getattr(obj, "model", None)
    if model is not None:
        return model
    return {k: v for k, v in vars(obj).items() if isinstance(v, torch.nn.Module)}


class ModuleWorkload(Workload):
    """A ``torch.nn.Module`` class trained (or run) on a synthetic batch described in its spec."""

    target: ClassVar[type]
    spec: ClassVar[str]
    _parsed: ClassVar[dict[str, Any]]  # the parsed batch description

    def __init__(self, batch_size: int | None = None, size: str = "small") -> None:
        super().__init__(batch_size, size)
        self.inputs_: list = []
        self.target_: Any = None
        self.last_output: Any = None

    def build(self, device: Any) -> None:
        import torch

        self.device = torch.device(device)
        parsed = self._parsed
        with self.device:
            self.model = self.target()
            inputs = parsed.get("input") or _infer_input(self.model, self.spec)
            gen = torch.Generator(device="cpu").manual_seed(0)
            self.inputs_ = [_synthetic(shape, dtype, high, self.batch_size, gen).to(self.device)
                            for shape, dtype, high in inputs]
        if self.kind == "infer":
            self.model.eval().requires_grad_(False)
            return
        self.model.train()
        lr = parsed.get("lr", 0.01)
        name = parsed.get("optimizer", "sgd")
        params = self.model.parameters()
        if name == "adam":
            self.optimizer = torch.optim.Adam(params, lr=lr)
        elif name == "adamw":
            self.optimizer = torch.optim.AdamW(params, lr=lr)
        else:
            self.optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9)

    def step(self) -> None:
        import torch

        if self.kind == "infer":
            with torch.inference_mode():
                self.last_output = _first_tensor(self.model(*self.inputs_))
            return
        self.optimizer.zero_grad(set_to_none=True)
        out = _first_tensor(self.model(*self.inputs_))
        loss = self._loss(out)
        loss.backward()
        self.optimizer.step()
        self.last_output = loss.detach()

    def _loss(self, out: Any) -> Any:
        import torch

        kind = self._parsed.get("loss", "auto")
        if kind == "auto":
            kind = "cross_entropy" if out.dim() == 2 and out.is_floating_point() else "mse"
        if self.target_ is None:  # made once, on the first step, when the output's shape is known
            gen = torch.Generator(device="cpu").manual_seed(1)
            if kind == "cross_entropy":
                self.target_ = torch.randint(0, out.shape[-1], out.shape[:-1], generator=gen).to(out.device)
            else:
                self.target_ = torch.randn(out.shape, generator=gen).to(out.device, out.dtype)
        if kind == "cross_entropy":
            return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), self.target_.reshape(-1))
        return torch.nn.functional.mse_loss(out, self.target_)

    def close(self) -> None:
        self.inputs_ = []
        self.target_ = None
        self.last_output = None
        super().close()


def _first_tensor(out: Any) -> Any:
    import torch

    if isinstance(out, torch.Tensor):
        return out
    values = out.values() if isinstance(out, dict) else out if isinstance(out, (list, tuple)) else ()
    for v in values:
        if isinstance(v, torch.Tensor):
            return v
    raise WorkloadContractError(f"the model returned {type(out).__name__}, not a tensor (or a tuple/dict holding one)")


def _synthetic(shape, dtype: str, high: int | None, batch: int, gen) -> Any:
    import torch

    dt = getattr(torch, dtype)
    size = (batch, *shape)
    if dt.is_floating_point:
        return torch.randn(size, generator=gen, device="cpu").to(dt)
    return torch.randint(0, high or 2, size, generator=gen, device="cpu", dtype=dt)


def _infer_input(model: Any, spec: str) -> list[tuple[tuple[int, ...], str, int | None]]:
    """The input of a model's first layer, where the layer tells it (see the module docstring)."""
    import torch.nn as nn

    for layer in model.modules():
        if isinstance(layer, nn.Linear):
            return [((layer.in_features,), "float32", None)]
        for conv, dims in ((nn.Conv1d, 1), (nn.Conv2d, 2), (nn.Conv3d, 3)):
            if isinstance(layer, conv):
                return [((layer.in_channels, *([32] * dims)), "float32", None)]
        if isinstance(layer, (nn.Embedding, nn.EmbeddingBag)):
            return [((16,), "int64", layer.num_embeddings)]
        if not isinstance(layer, (nn.Sequential, nn.ModuleList, nn.ModuleDict)) and layer is not model:
            break
    raise WorkloadContractError(
        f"workload {spec!r}: cannot tell the input of {type(model).__name__} from its first layer; describe "
        f"the batch, e.g. {spec.split('[')[0]}[input=3x224x224] (see sharewise.profiler.workloads.adapters)"
    )
