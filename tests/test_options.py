"""How a loader runs (jaxload.options.PipelineOptions): the knobs checked when made, the
ones left None filled from the core count, and which the caller chose."""

from __future__ import annotations

import numpy as np
import pytest

from jaxload.options import MAX_WORKERS, PipelineOptions, split_cores


@pytest.mark.parametrize(
    "cores, split",
    [(1, (0, 2)), (2, (0, 2)), (3, (0, 3)), (4, (2, 2)), (6, (2, 3)), (7, (3, 3)),
     (16, (6, 3)), (64, (MAX_WORKERS, 8)), (0, (0, 2))],
)  # fmt: skip
def test_cores_are_split_into_workers_and_read_threads(cores, split):
    assert split_cores(cores) == split


def test_knobs_left_none_are_filled_from_the_cores():
    options = PipelineOptions().resolve(cores=16)
    assert (options.num_workers, options.read_threads) == (6, 3)
    assert (options.worker_buffer_size, options.prefetch) == (2, 2)
    remote = PipelineOptions().resolve(cores=16, remote=True)
    assert remote.read_threads == 4  # one more thread decodes while a record is in flight
    chosen = PipelineOptions(num_workers=1, prefetch=5).resolve(cores=16)
    assert (chosen.num_workers, chosen.read_threads, chosen.prefetch) == (1, 2, 5)
    assert PipelineOptions(num_workers=1).resolve(remote=True).read_threads == 3
    kept = PipelineOptions(read_threads=7).resolve(cores=16)
    assert (kept.num_workers, kept.read_threads) == (6, 7)
    assert PipelineOptions().resolve().num_workers is not None  # this machine's cores


def test_explicit_names_the_knobs_the_caller_set():
    assert PipelineOptions().explicit == ()
    assert PipelineOptions(prefetch=3, num_workers=0).explicit == ("num_workers", "prefetch")
    assert PipelineOptions(decode_device="auto").explicit == ("decode_device",)
    assert PipelineOptions(decode_device="cpu").explicit == ()  # the default is no choice


def test_numpy_integers_are_taken_as_ints():
    options = PipelineOptions(num_workers=np.int64(2))
    assert options.num_workers == 2 and type(options.num_workers) is int


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"num_workers": -1}, r"num_workers must be an integer >= 0 \(or None\), got -1"),
        ({"read_threads": 0}, "read_threads must be an integer >= 1"),
        ({"prefetch": 2.0}, r"prefetch must be an integer >= 1 \(or None\), got 2\.0"),
        ({"worker_buffer_size": True}, "worker_buffer_size must be an integer >= 1"),
        ({"decode_threads": 0}, "decode_threads must be an integer >= 1"),
        ({"worker_timeout_s": 0}, "worker_timeout_s must be a number of seconds > 0, got 0"),
        ({"worker_timeout_s": "5"}, "worker_timeout_s must be a number of seconds > 0"),
        ({"worker_timeout_s": float("nan")}, "worker_timeout_s must be a number of seconds"),
        ({"decode_device": "gpu"}, r"decode_device='gpu'; choose one of \('cpu', "),
    ],
)
def test_bad_knobs_are_refused_naming_them(kw, message):
    with pytest.raises(ValueError, match=message):
        PipelineOptions(**kw)


def test_hybrid_decoding_was_removed_and_the_error_says_why_and_what_instead():
    """decode_device="hybrid" served less than either side alone (0.28 of the sum of both
    sides on an H200, benchmarks/RESULTS.md "GPU decoding") and was removed: a clear error,
    not "choose one of", naming the measurement and the devices to use instead."""
    with pytest.raises(ValueError, match="hybrid' was removed") as caught:
        PipelineOptions(decode_device="hybrid")
    message = str(caught.value)
    assert "0.28 of the sum of both sides" in message and "RESULTS.md" in message
    assert "'auto'" in message and "'cpu'" in message and "'cuda'" in message
