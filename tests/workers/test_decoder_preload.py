"""jaxload.workers.decoder_preload: what the fork server imports for video."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jaxload.workers import fork_server


@pytest.mark.processes
def test_the_servers_decoder_preload_imports_torchcodec_without_dynamo():
    """What the server imports for video: torchcodec's decoder, without the ~1.3 s of
    `torch._dynamo` a plain `import torchcodec` costs (jaxload.decode.torchcodec_import),
    which every forked worker's first batch would wait for."""
    code = (
        "import sys, importlib; importlib.import_module(sys.argv[1]); "
        "print('torchcodec.decoders' in sys.modules, 'torch._dynamo' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, fork_server.DECODER_PRELOAD],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.split()
    assert out == ["True", "False"]
