"""JIT compile cache for the CuTe DSL kernels (DESIGN §4).

``get_or_compile(name, config, build_fn)`` returns the compiled kernel for one variant:

1. from memory (per process, keyed by ``(name, config)``);
2. else from disk: an ELF object written by the DSL's own export path
   (``JitCompiledFunction.dump_to_object``: host launch code + the embedded cubin) and loaded back
   with ``cute.runtime.load_module`` - loading skips both the Python trace and ptxas;
3. else ``build_fn(config)`` compiles it (one short progress line on stderr) and the object is
   written to disk for the next process.

The disk key hashes every compile-time input: the kernel name, ``repr(config)`` (the frozen config
dataclasses list every compile-time parameter), the package version, the DSL version, the DSL
settings that change code generation (target arch, line info, compiler options: the DSL's own
``cache_key_str``), the host CPU (the object's launch code is compiled for the build machine), and
a fingerprint of the kernel sources (``ops/cute/*.py`` except the host-only modules, and
``semantics.py``, whose predicates the kernels trace), so editing a kernel never serves a stale
binary.

Concurrent processes: the object is written to a unique temporary file and renamed into place
(readers never see a partial file); a per-key ``flock`` makes a second process that wants the
same variant wait for the first one's compile instead of repeating it. An unreadable object is
deleted and rebuilt.

Environment: ``PADDLE_FLASHMASK_CACHE_DIR`` (default ``$XDG_CACHE_HOME/paddle_flashmask``, i.e.
``~/.cache/paddle_flashmask``); ``PADDLE_FLASHMASK_CACHE=0`` turns the disk cache off (memory only).
"""
from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import os
import platform
import re
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Hashable, Optional

_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # .../paddle_flashmask
_LOCK_TIMEOUT_S = 30 * 60.0  # longer than any single compile; then compile without the lock
# host-side modules of ops/cute that never change generated code (kept out of the fingerprint)
_HOST_ONLY_SOURCES = {"__init__.py", "cache.py", "compile_check.py", "interface.py"}

_memory: dict[tuple[str, Hashable], Any] = {}
_memory_lock = threading.Lock()
_stats = {"memory_hits": 0, "disk_hits": 0, "compiles": 0}


def disk_cache_enabled() -> bool:
    return os.environ.get("PADDLE_FLASHMASK_CACHE", "1").strip().lower() not in ("0", "false", "off", "no")


def cache_dir() -> Path:
    configured = os.environ.get("PADDLE_FLASHMASK_CACHE_DIR")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(base).expanduser() / "paddle_flashmask"


def fingerprint_sources(kernel_modules: dict[str, bytes], semantics: bytes) -> str:
    """The fingerprint of a set of sources: ``kernel_modules`` maps the file names of
    ``ops/cute/*.py`` to their bytes (host-only modules are left out here), ``semantics`` is
    ``semantics.py``. ``scripts/find_commit.py`` runs it over git history."""
    digest = hashlib.sha256()
    named = sorted((name, data) for name, data in kernel_modules.items()
                   if name.endswith(".py") and name not in _HOST_ONLY_SOURCES)
    for name, data in named + [("semantics.py", semantics)]:
        digest.update(name.encode())
        digest.update(data)
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """Hash of the sources a compiled kernel depends on (kernel modules + the mask semantics).
    Benchmarks record it (``kernel_sources``): it names the kernels they timed even where the
    machine's copy of the tree carries no usable git HEAD."""
    modules = {p.name: p.read_bytes() for p in Path(__file__).resolve().parent.glob("*.py")}
    return fingerprint_sources(modules, (_PACKAGE_ROOT / "semantics.py").read_bytes())


@functools.lru_cache(maxsize=1)
def host_fingerprint() -> str:
    """The exported object's host code is compiled for the build machine's CPU (the DSL's native
    host target), so a cache directory shared between different CPUs must not mix them."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    text = f"{platform.machine()}|{' '.join(sorted(flags.split(':', 1)[-1].split()))}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@functools.lru_cache(maxsize=1)
def _environment_key() -> str:
    import cutlass
    from cutlass.cutlass_dsl import CuTeDSL

    from paddle_flashmask import __version__

    # arch, line info, compiler options...; not the runtime library's install path
    dsl_settings = re.sub(r"shared_libs=[^;]*;", "", CuTeDSL._get_dsl().envar.cache_key_str())
    return (f"paddle_flashmask={__version__};cutlass-dsl={cutlass.__version__};"
            f"sources={source_fingerprint()};host={host_fingerprint()};{dsl_settings}")


def variant_key(name: str, config: Hashable) -> str:
    """Hex digest naming one compiled variant on disk."""
    text = f"{name}|{config!r}|{_environment_key()}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _symbol_prefix(name: str) -> str:
    # The exported object's symbols are prefixed with this; it must be a C identifier.
    return "pfm_" + re.sub(r"[^0-9A-Za-z_]", "_", name)


def _describe(config: Hashable) -> str:
    text = repr(config)
    return text if len(text) <= 160 else text[:157] + "..."


def stats() -> dict:
    """Counters for this process: memory hits, disk hits, compiles."""
    return dict(_stats)


def clear_memory() -> None:
    """Forget the in-memory variants (the disk cache is kept)."""
    with _memory_lock:
        _memory.clear()


def get_or_compile(name: str, config: Hashable, build_fn: Callable[[Any], Any]) -> Any:
    """The compiled kernel ``name`` for ``config``: memory, then disk, then ``build_fn(config)``.

    ``build_fn`` returns a CuTe DSL compiled function; one that cannot be exported (it has no
    ``dump_to_object``) is cached in memory only.
    """
    key = (name, config)
    with _memory_lock:
        if key in _memory:
            _stats["memory_hits"] += 1
            return _memory[key]
    compiled = _load_or_build(name, config, build_fn)
    with _memory_lock:
        return _memory.setdefault(key, compiled)


def _load_or_build(name: str, config: Hashable, build_fn: Callable[[Any], Any]) -> Any:
    if not disk_cache_enabled():
        return _build(name, config, build_fn)
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _warn_once(f"cache directory {directory} is not usable ({exc}); compiled kernels are kept "
                   "in memory only (set PADDLE_FLASHMASK_CACHE_DIR)")
        return _build(name, config, build_fn)
    digest = variant_key(name, config)
    object_path = directory / f"{_symbol_prefix(name)}-{digest}.o"
    compiled = _try_load(name, object_path)
    if compiled is not None:
        return compiled
    with _FileLock(directory / f".{digest}.lock"):
        compiled = _try_load(name, object_path)  # another process may have built it meanwhile
        if compiled is not None:
            return compiled
        compiled = _build(name, config, build_fn)
        _try_store(name, compiled, object_path)
    return compiled


def _build(name: str, config: Hashable, build_fn: Callable[[Any], Any]) -> Any:
    print(f"paddle_flashmask: compiling {name} {_describe(config)} ...", end="", file=sys.stderr,
          flush=True)
    start = time.perf_counter()
    try:
        compiled = build_fn(config)
    except BaseException:
        print(" failed", file=sys.stderr, flush=True)
        raise
    print(f" {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    _stats["compiles"] += 1
    return compiled


def _try_load(name: str, object_path: Path) -> Optional[Any]:
    if not object_path.is_file():
        return None
    import cutlass.cute as cute

    try:
        module = cute.runtime.load_module(str(object_path))
        compiled = getattr(module, _symbol_prefix(name))
    except Exception as exc:  # truncated by a crash, or written by an incompatible runtime
        _warn_once(f"discarding unreadable cached kernel {object_path.name}: {exc}")
        try:
            object_path.unlink()
        except OSError:
            pass
        return None
    _stats["disk_hits"] += 1
    return compiled


def _try_store(name: str, compiled: Any, object_path: Path) -> None:
    if not hasattr(compiled, "dump_to_object"):
        return
    try:
        data = compiled.dump_to_object(_symbol_prefix(name))
        fd, tmp = tempfile.mkstemp(prefix=f".{object_path.stem}.", suffix=".tmp",
                                   dir=object_path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache may be shared
            os.replace(tmp, object_path)  # atomic: readers see the old state or the whole file
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except Exception as exc:  # a full disk must not fail the call that compiled fine
        _warn_once(f"could not write the kernel cache ({exc}); continuing without it")


class _FileLock:
    """Exclusive ``flock`` on a lock file, polled up to a deadline; on timeout, proceed unlocked."""

    def __init__(self, path: Path, timeout_s: float = _LOCK_TIMEOUT_S) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self.fd: Optional[int] = None

    def __enter__(self) -> "_FileLock":
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            return self
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    break
                if time.monotonic() > deadline:
                    _warn_once(f"waited {self.timeout_s:.0f} s for {self.path}; compiling anyway")
                    break
                time.sleep(0.2)
        os.close(self.fd)
        self.fd = None
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        print(f"paddle_flashmask: {message}", file=sys.stderr, flush=True)
