"""torchcodec, imported without importing `torch._dynamo` (a dependency workaround).

torchcodec 0.13 wraps its ops in `torch._dynamo.disallow_in_graph` when its module is
imported, and that attribute access imports `torch._dynamo`: about 1.0 s of torchcodec's
1.2 s import here, paid before the first batch by the training process and by every Grain
worker (benchmarks/bench_ttfb.py). PyTorch itself stopped importing dynamo eagerly for the
same reason (pytorch/pytorch#162595).

`video_decoder_class()` imports torchcodec with a stand-in `torch._dynamo` that only
records which functions to disallow, and replays those calls on the real module as soon as
anything imports it (e.g. `torch.compile`), so the ops are disallowed in graphs whenever
dynamo exists. `tests/test_torchcodec_import.py` shows the eager import and checks both
halves. Delete this module once torchcodec stops importing dynamo at import time.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

_DYNAMO = "torch._dynamo"
_lock = threading.Lock()
_deferred: list[Callable[..., Any]] = []
_imported = False  # set once torchcodec is fully imported and `_class` holds VideoDecoder
_class: type | None = None


def video_decoder_class() -> type:
    """`torchcodec.decoders.VideoDecoder`, imported without `torch._dynamo` if possible.

    Imported once, then cached. Thread-safe: Grain workers decode from several threads,
    and a module another thread is still importing is already in `sys.modules`, half
    initialised, so every caller waits for the first import to finish. To decode
    differently (timing, recording), install a backend (`jaxload.decode.backend.use`)
    rather than patching the class.
    """
    global _imported, _class
    if not _imported:
        with _lock:
            if not _imported:
                _import_torchcodec()
                import torchcodec.decoders  # (waits for an import under way)

                _class = torchcodec.decoders.VideoDecoder
                _imported = True
    assert _class is not None
    return _class


def _import_torchcodec() -> None:
    import torch

    if "torchcodec.decoders" in sys.modules or _DYNAMO in sys.modules or "_dynamo" in vars(torch):
        return  # imported already, or dynamo is there: nothing to save
    torch._dynamo = types.SimpleNamespace(disallow_in_graph=_record)  # type: ignore[attr-defined]
    try:
        import torchcodec.decoders  # noqa: F401
    finally:
        del torch._dynamo  # torch's lazy `__getattr__` imports the real module again
    if _deferred:
        sys.meta_path.insert(0, _ReplayOnDynamoImport())


def _record(fn: Callable[..., Any]) -> Callable[..., Any]:
    _deferred.append(fn)
    return fn


class _ReplayOnDynamoImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of `torch._dynamo` to replay the recorded
    `disallow_in_graph` calls right after the real module has run."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != _DYNAMO:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            run_module(module)
            for fn in _deferred:
                module.disallow_in_graph(fn)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
