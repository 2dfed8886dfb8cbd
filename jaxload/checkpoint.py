"""Orbax integration: the loader state saved and restored next to the model state.

    import orbax.checkpoint as ocp
    from jaxload.checkpoint import LoaderRestore, LoaderSave

    mngr = ocp.CheckpointManager(ckpt_dir)
    mngr.save(step, args=ocp.args.Composite(
        model=ocp.args.StandardSave(params), loader=LoaderSave(loader)))
    ...
    restored = mngr.restore(mngr.latest_step(), args=ocp.args.Composite(
        model=ocp.args.StandardRestore(abstract_params), loader=LoaderRestore(loader)))
    params = restored.model          # `loader` now continues where the saved run stopped

The state is global (the position of the next *global* batch, not of this host's part),
so one copy describes every host: the primary process writes ``loader_state.json`` and
every process reads it on restore — which is also what makes a restore onto a different
host count work. As with the model arrays, multi-host restores need the checkpoint
directory on storage all hosts see. `loader.get_state()` is taken when `mngr.save` is
called (this handler is synchronous and tiny), so it matches the step being saved even
when the manager saves the model asynchronously.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import orbax.checkpoint as ocp
from etils import epath

from jaxload.errors import CheckpointError
from jaxload.state import LoaderState

STATE_FILE = "loader_state.json"


class LoaderCheckpointHandler(ocp.CheckpointHandler):
    """Writes/reads the loader state as JSON; use through LoaderSave / LoaderRestore."""

    def __init__(self, primary_host: int | None = 0):
        self._primary_host = primary_host

    def save(self, directory: epath.Path, args: LoaderSave) -> None:
        state = args.state()
        if ocp.multihost.is_primary_host(self._primary_host):
            (epath.Path(directory) / STATE_FILE).write_text(
                json.dumps(state, indent=2, sort_keys=True)
            )

    def restore(self, directory: epath.Path, args: LoaderRestore | None = None) -> Any:
        path = epath.Path(directory) / STATE_FILE
        if not path.exists():
            raise CheckpointError(f"{path}: no loader state in this checkpoint")
        state = LoaderState.from_json(path.read_text(), str(path)).to_dict()  # or a clear error
        loader = args.loader if args is not None else None
        if loader is None:
            return state
        loader.set_state(state, allow_global_batch_size_change=args.allow_global_batch_size_change)
        return loader

    def metadata(self, directory: epath.Path) -> Any:
        return None

    def finalize(self, directory: epath.Path) -> None:
        pass

    def close(self) -> None:
        pass


@ocp.args.register_with_handler(LoaderCheckpointHandler, for_save=True)
@dataclasses.dataclass
class LoaderSave(ocp.args.CheckpointArgs):
    """Save a loader's state: `LoaderSave(loader)`, or `LoaderSave(state_dict)`."""

    loader: Any

    def state(self) -> dict[str, Any]:
        return self.loader if isinstance(self.loader, dict) else self.loader.get_state()


@ocp.args.register_with_handler(LoaderCheckpointHandler, for_restore=True)
@dataclasses.dataclass
class LoaderRestore(ocp.args.CheckpointArgs):
    """Restore into a loader (`restored.loader` is that loader), or with None get the state dict.

    `allow_global_batch_size_change=True` accepts a state saved with another global batch
    size, with a warning; the stream continues from the saved sample position.
    """

    loader: Any = None
    allow_global_batch_size_change: bool = False
