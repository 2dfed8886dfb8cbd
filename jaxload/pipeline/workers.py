"""Grain worker processes: started together, with absl flags parsed.

Worker processes import the training script's `__main__` module: a script that builds a
loader at top level must guard it with `if __name__ == "__main__":`.
"""

from __future__ import annotations

from typing import Any


def start_workers(iterator: Any) -> None:
    """Start every worker process now rather than one after another.

    Grain's ThreadPrefetchDatasetIterator asks its parent for its state on creation, which
    makes mp_prefetch's interleave create its worker iterators unstarted; each worker then
    starts (seconds: it imports jax, torch, ...) only when the round robin first reaches it.
    Grain's own `start_prefetch` on the interleave starts them all at once. This walks
    private attributes (grain is pinned); if they change we merely lose the eager start.
    """
    node = iterator
    for _ in range(32):
        if hasattr(node, "_iterators_in_use") and hasattr(node, "start_prefetch"):
            node.start_prefetch()
            return
        parents = getattr(node, "__dict__", {}).get("_parents") or ()
        if not parents:
            return
        node = parents[0]


def ensure_absl_flags_parsed() -> None:
    """Grain's worker processes read absl flags; a plain script never parses them."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
