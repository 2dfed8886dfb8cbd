"""The fork server's first import: the training process's `sys.path` (a dependency
workaround, CPython 3.11-3.13).

`multiprocessing.forkserver` hands the server the trainer's `sys.path` and the server's
`main` never uses it, then swallows each preload's ImportError. So a module the trainer
finds only through its own path (a package beside the script run from elsewhere, a
`sys.path.insert`) was silently not preloaded, and every worker imported it again
(tests/workers/test_fork_server.py shows both). `start_fork_server` puts the trainer's
`sys.path` in the environment the server starts with; importing this module first puts it
in front of the server's own.
"""

import json
import os
import sys

SYS_PATH_ENV = "JAXLOAD_FORK_SERVER_SYS_PATH"

if trainer_path := json.loads(os.environ.get(SYS_PATH_ENV) or "[]"):
    sys.path[:] = trainer_path + [p for p in sys.path if p not in trainer_path]
