"""The on-disk jaxload dataset format.

- `layout`: paths, record numbering, metadata schema (info.json), fingerprints.
- `mp4`: GOP records as mp4 fragments (box layout, the batch mp4 built from them).
- `storage`: where a dataset's files are (`DatasetStorage`: a local directory here, an
  object store in `jaxload.storage`), and the `RecordReader` of its shards.
- `shards`: the local shard reader (ArrayRecord, every record verified).
- `reader`: the one reader of a dataset's metadata tables and shards (`DatasetFiles`).

`from jaxload import format as fmt` gives the layout's names directly, and `fmt.read_info`.
"""

from jaxload.format.layout import *  # noqa: F403
from jaxload.format.layout import __all__ as _layout_all
from jaxload.format.reader import read_info

__all__ = [*_layout_all, "read_info"]
