"""jaxload.decode.torchcodec_import: torchcodec without the eager torch._dynamo import (real imports,
each in a fresh interpreter, since import state is what is tested)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.processes  # each import runs in a fresh interpreter

pytest.importorskip("torchcodec")


def run_fresh(code: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_plain_torchcodec_import_imports_dynamo():
    """The dependency behaviour worked around. If this fails, torchcodec no longer imports
    torch._dynamo at import time: delete jaxload/decode/torchcodec_import.py."""
    out = run_fresh(
        """
        import sys
        import torchcodec.decoders
        print("torch._dynamo" in sys.modules)
        """
    )
    assert out == "True"


def test_jaxload_import_skips_dynamo_and_decodes(tmp_path):
    out = run_fresh(
        f"""
        import sys
        import av, numpy as np
        from jaxload.decode.torchcodec_import import video_decoder_class

        VideoDecoder = video_decoder_class()
        assert "torch._dynamo" not in sys.modules
        path = {str(tmp_path / "v.mp4")!r}
        with av.open(path, "w") as out:
            stream = out.add_stream("libx264", rate=10)
            stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
            for i in range(5):
                frame = np.full((48, 64, 3), 40 * i, np.uint8)
                for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                    out.mux(packet)
            for packet in stream.encode():
                out.mux(packet)
        frames = VideoDecoder(path, dimension_order="NHWC").get_frames_at(indices=[0, 4]).data
        print(tuple(frames.shape), float(frames[1].float().mean()))
        """
    )
    shape, mean = out.rsplit(" ", 1)
    assert shape == "(2, 48, 64, 3)" and abs(float(mean) - 160) < 4  # frame 4 is gray 160


def test_disallow_in_graph_is_replayed_when_dynamo_is_imported():
    out = run_fresh(
        """
        import sys
        from jaxload.decode.torchcodec_import import video_decoder_class, _deferred

        video_decoder_class()
        assert "torch._dynamo" not in sys.modules and _deferred
        import torch._dynamo
        from torch._dynamo.trace_rules import is_callable_disallowed

        print(all(is_callable_disallowed(fn) for fn in _deferred), len(_deferred))
        """
    )
    flag, count = out.split()
    assert flag == "True" and int(count) > 0


def test_dynamo_already_imported_uses_the_plain_import():
    out = run_fresh(
        """
        import torch._dynamo
        from torch._dynamo.trace_rules import is_callable_disallowed
        from jaxload.decode.torchcodec_import import video_decoder_class, _deferred
        from torchcodec._core import ops

        video_decoder_class()
        print(not _deferred, is_callable_disallowed(ops.create_from_file))
        """
    )
    assert out == "True True"


def test_a_second_thread_waits_for_the_first_import():
    # Grain workers decode from several threads at once. A thread that asked while another
    # was half-way through importing torchcodec got its partly initialised module
    # ("has no attribute 'VideoDecoder'": a CI failure).
    out = run_fresh(
        """
        import sys, threading, time
        from jaxload.decode.torchcodec_import import video_decoder_class

        first = threading.Thread(target=video_decoder_class)
        first.start()
        while "torchcodec.decoders" not in sys.modules:  # the first import has begun
            time.sleep(0.0005)
        print(video_decoder_class().__name__)
        first.join()
        """
    )
    assert out == "VideoDecoder"


def test_the_class_is_imported_once_then_cached():
    # Decoding differently goes through jaxload.decode.backend, not a patched class.
    out = run_fresh(
        """
        import sys
        from jaxload.decode.torchcodec_import import video_decoder_class

        first = video_decoder_class()
        sys.modules["torchcodec.decoders"].VideoDecoder = object
        print(video_decoder_class() is first, first.__name__)
        """
    )
    assert out == "True VideoDecoder"
