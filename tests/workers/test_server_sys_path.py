"""jaxload.workers.server_sys_path: the fork server gets the training process's sys.path."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from jaxload.converters.convert import convert
from tests.support.lerobot_factory import write_lerobot_v3


@pytest.fixture(scope="module")
def tabular(tmp_path_factory):
    root = tmp_path_factory.mktemp("fork_server_tabular")
    source = write_lerobot_v3(root / "src", episode_lengths=[6, 5], cameras={})
    return convert(source, root / "out", workers=1, progress=False).out


# A training script that finds its policy package through its own sys.path (beside it, run
# from elsewhere) and asks the server to preload it; the package logs each import's pid.
PRELOADED_FROM_TRAINERS_PATH = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
    os.environ["JAXLOAD_WORKER_PRELOAD"] = "mypolicy_for_preload"
    import mypolicy_for_preload
    from absl import flags
    import jaxload
    from jaxload.workers.processes import worker_pids, _processes
    if __name__ == "__main__":
        flags.FLAGS.mark_as_parsed()
        options = jaxload.PipelineOptions(num_workers=2)
        with jaxload.make_loader(sys.argv[1], global_batch_size=4, options=options) as loader:
            next(loader)
            workers = worker_pids()
            server = _processes()[workers[0]][0]
        print(os.getpid(), server, sorted(workers))
    """
)


@pytest.mark.processes
def test_modules_on_the_trainers_path_are_preloaded_once_in_the_server(tabular, tmp_path):
    """CPython's forkserver ignores the sys.path it is handed: such a module was not
    preloaded (its ImportError swallowed) and every worker imported it again."""
    (tmp_path / "lib").mkdir()
    log = tmp_path / "imports.log"
    (tmp_path / "lib" / "mypolicy_for_preload.py").write_text(
        f"import os\nwith open({str(log)!r}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n')\n"
    )
    (tmp_path / "train.py").write_text(PRELOADED_FROM_TRAINERS_PATH)
    out = subprocess.run(
        [sys.executable, str(tmp_path / "train.py"), str(tabular)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
        check=True,
    ).stdout.split(maxsplit=2)
    trainer, server = int(out[0]), int(out[1])
    assert sorted(map(int, log.read_text().split())) == sorted([trainer, server])
