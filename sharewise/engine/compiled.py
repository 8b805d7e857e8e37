"""The decorator of the compiled kernels (the engine's free-GPU rules, ours' mechanisms): numba's ``njit``
(cached, without the GIL), every kernel's cache stamped with the sources of all kernel modules at once.

numba keys a cached kernel to the source of its own file, but a kernel compiles in the kernels it calls from other
files: edit the SLO budget in ``policy/ours/slo.py`` and the cached kernels of ``sharing.py`` would go on using the
old one (seen: a trial change of the budget left ``savings`` unchanged until its cache was cleared). Stamped with
all of ``SOURCES``, an edit of any of them compiles every kernel afresh on first use (15-20 s on 2 cores), as when
the kernels were one file. A kernel in a module outside ``SOURCES`` is refused at import.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from numba import njit
from numba.core import caching

_PACKAGE = Path(__file__).resolve().parents[1]
#: The modules that define kernels or the named tuples they take (``policy/ours/arrays.py``): the engine's free-GPU
#: and ordering rules, which every policy may use, and ours' mechanisms. Named as files, not imported: the engine
#: sits below the policies and never imports them.
SOURCES = tuple(
    [_PACKAGE / "engine" / "order.py", _PACKAGE / "engine" / "gpus.py"]
    + [_PACKAGE / "policy" / "ours" / f"{m}.py" for m in ("arrays", "placement", "rescue", "reservation",
                                                          "sharing", "slo", "srpt", "urgent", "victims")]
)


@functools.cache
def _stamp() -> str:
    digest = hashlib.sha256()
    for path in SOURCES:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _stamped(base: type) -> type:
    """``base`` (a numba cache locator) for the kernels of ``SOURCES``, stamped with all of them."""

    class Stamped(base):
        def get_source_stamp(self):
            return _stamp()

        @classmethod
        def from_function(cls, py_func, py_file):
            if Path(py_file).resolve() not in SOURCES:
                return None
            return super().from_function(py_func, py_file)

    Stamped.__name__ = f"Stamped{base.__name__}"
    return Stamped


def _register() -> None:
    """Put the stamped locators first (the user's cache folder, ``NUMBA_CACHE_DIR``, then ``__pycache__``)."""
    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # public from numba 0.6x on
    if any(getattr(c, "__name__", "").startswith("Stamped") for c in impl._locator_classes):
        return
    bases = [getattr(caching, name, None) or getattr(caching, "_" + name)
             for name in ("UserProvidedCacheLocator", "InTreeCacheLocator")]
    impl._locator_classes = [_stamped(b) for b in bases] + list(impl._locator_classes)


_register()


def kernel(func):
    """Compile ``func`` (numba ``njit``, cached, without the GIL); its module must be one of ``SOURCES``."""
    path = Path(func.__code__.co_filename).resolve()
    if path not in SOURCES:
        raise ValueError(f"kernel {func.__qualname__} is in {path}; add that module to _compiled.SOURCES")
    return njit(cache=True, nogil=True)(func)
