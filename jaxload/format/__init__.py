"""The on-disk jaxload dataset format.

- `layout`: paths, record numbering, metadata schema (info.json), fingerprints.
- `mp4`: GOP records as mp4 fragments (box layout, the batch mp4 built from them).
- `reader`: the one reader of a dataset's metadata tables and shards.

`from jaxload import format as fmt` gives the layout's names directly (`fmt.read_info`).
"""

from jaxload.format.layout import *  # noqa: F403
from jaxload.format.layout import __all__ as _layout_all

__all__ = list(_layout_all)
