"""Where numba caches the kernels: a directory keyed on a hash of this package's source.

numba's on-disk cache (``cache=True``) indexes a function by the stamp of *its own* source file.
A cached function's machine code also contains every function it calls (inlined or linked), so an
edit to a callee in another file used to leave the caller's stale copy in use: the reason the
kernels once sat in one file. Here every dispatcher of the package is created (by
:func:`kernel_njit`, the package's ``njit``) while ``numba.config.CACHE_DIR`` points to a directory named by a hash of all the package's ``.py``
files (numba's user-provided cache locator reads that setting when a dispatcher is decorated, see
``numba.core.caching.UserProvidedCacheLocator``): any edit to any kernel module selects a fresh,
empty directory, so nothing stale can be loaded. The setting is restored afterwards, so other
numba code of the process caches where it would have.

The base directory: ``NUMBA_CACHE_DIR`` when the user set it, else this package's
``__pycache__`` when writable, else a per-user cache directory. Old hash directories are left in
place (a process of an older checkout may still be using one); deleting them is always safe.

Overloads (``numba.extending.overload``) are compiled when a caller is typed, after the setting
is restored, so their ``jit_options`` must not ask for caching (they are inside their callers'
cached machine code anyway); see :data:`OVERLOAD_JIT`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from numba import njit
from numba.core import config

PACKAGE_DIR = Path(__file__).resolve().parent


def source_hash(package_dir: Path = PACKAGE_DIR) -> str:
    """Hex digest (16 characters) of the names and contents of every ``.py`` file of the package."""
    h = hashlib.sha256()
    for path in sorted(package_dir.glob("*.py")):
        h.update(path.name.encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _writable(d: Path) -> bool:
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(d, os.W_OK)


def _user_cache_base() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "serverfarm-gym"


def cache_dir(user_dir: str = "", package_dir: Path = PACKAGE_DIR) -> Path:
    """The kernels' cache directory: ``<base>/kernels-<source hash>`` (``user_dir``: the
    ``NUMBA_CACHE_DIR`` setting, empty when unset)."""
    name = f"kernels-{source_hash(package_dir)}"
    if user_dir:
        return Path(user_dir) / name
    local = package_dir / "__pycache__"
    if _writable(local):
        return local / name
    return _user_cache_base() / name


@functools.cache
def _cache_dir_for(user_dir: str) -> Path:
    return cache_dir(user_dir)  # the source is hashed once per process


@contextlib.contextmanager
def kernel_cache() -> Iterator[Path]:
    """While active, dispatchers created with ``cache=True`` cache in :func:`cache_dir`."""
    # numba.config sets CACHE_DIR at import time from the environment: numba's stubs omit it
    previous = config.CACHE_DIR  # type: ignore[attr-defined]
    target = _cache_dir_for(previous)
    config.CACHE_DIR = str(target)  # type: ignore[attr-defined]
    try:
        yield target
    finally:
        config.CACHE_DIR = previous  # type: ignore[attr-defined]


#: options of every compiled function of the package (cached on disk, nogil)
JIT: dict[str, Any] = {"cache": True, "nogil": True}
#: overloads are compiled inside their (cached) callers, after the cache directory is restored:
#: caching them would put them in numba's default place, keyed by their own file only
OVERLOAD_JIT: Any = {"nogil": True}  # (numba types jit_options as a private TypedDict)


def kernel_njit(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit(cache=True, nogil=True, **options)``, the dispatcher created under
    :func:`kernel_cache` (its cache locator is chosen when it is created): the decorator of every
    compiled function of the package. The machine code is what ``njit`` alone gives."""

    def decorate(fn: Callable[..., Any]) -> Any:
        with kernel_cache():
            return njit(**JIT, **options)(fn)

    return decorate
