"""The converter's retry policy: `jaxload.storage.retry`, re-exported under its old name
(the runtime's remote reader uses the same policy, and training hosts must not need the
converter's dependencies)."""

from jaxload.storage.retry import *  # noqa: F403
from jaxload.storage.retry import (  # noqa: F401  (private helpers some callers use)
    _chain,
    _final_message,
    _first_line,
    _http_status,
    log,
)
