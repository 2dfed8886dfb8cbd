"""Hybrid decoding's split (jaxload.placement.split): which rows the readers decode,
the shared cell a worker process reads, and the balance that moves it."""

import os
import pickle

import numpy as np
import pytest

from jaxload.placement import split as decode_split
from jaxload.placement.split import DecodeSplit, SplitBalance


def test_the_readers_take_the_first_share_of_each_devices_rows():
    split = DecodeSplit([np.arange(0, 4), np.arange(4, 8)], share=0.5)
    try:
        assert split.cpu_rows(0.5).tolist() == [0, 1, 4, 5]
        assert split.cpu_rows(0.0).tolist() == []
        assert split.cpu_rows(1.0).tolist() == list(range(8))
        assert split.cpu_rows(0.25).tolist() == [0, 4]
    finally:
        split.close()


def test_a_pickled_split_reads_the_share_the_trainer_writes_and_cannot_write_it():
    split = DecodeSplit([np.arange(6)], share=0.5)
    try:
        worker = pickle.loads(pickle.dumps(split))  # what a Grain worker gets
        assert worker.share == 0.5
        split.share = 0.75
        assert worker.share == 0.75
        split.share = 7  # clamped
        assert worker.share == 1.0
        with pytest.raises(RuntimeError, match="only the training process"):
            worker.share = 0.1
    finally:
        split.close()
    assert not os.path.exists(split.path)  # the name goes at close (mappings stay valid)
    assert worker.share == 1.0


def _run(balance, split, cpu_ms, device_ms, batches=200):
    """A model of the pipeline: the readers take cpu_ms per row they decode (in parallel
    with the prefetch thread), the devices device_ms per row of theirs; the prefetch
    thread waits for the readers whatever their batch takes longer than its decode."""
    for _ in range(batches):
        share = split.share
        reader_s, device_s = cpu_ms * 32 * share / 1000, device_ms * 32 * (1 - share) / 1000
        balance.readers_waited(max(0.0, reader_s - device_s))
        balance.devices_decoded(device_s, share)


@pytest.mark.parametrize("cpu_ms, device_ms", [(1.0, 1.0), (1.0, 3.0), (4.0, 1.0), (1.0, 40.0)])
def test_the_balance_settles_where_both_sides_take_as_long(cpu_ms, device_ms):
    """The share settles near cpu_ms * s = device_ms * (1 - s) (within MARGIN and the
    smallest step)."""
    split = DecodeSplit([np.arange(32)], share=decode_split.INITIAL_SHARE)
    try:
        _run(SplitBalance(split), split, cpu_ms, device_ms)
        want = device_ms / (cpu_ms + device_ms)
        tolerance = 2 * decode_split.MIN_STEP + decode_split.MARGIN * want
        assert abs(split.share - want) <= tolerance, (split.share, want)
    finally:
        split.close()


def test_the_balance_follows_a_load_that_moves():
    split = DecodeSplit([np.arange(32)], share=0.5)
    balance = SplitBalance(split)
    try:
        _run(balance, split, 1.0, 1.0)
        _run(balance, split, 1.0, 9.0)  # the devices become 9x slower
        assert abs(split.share - 0.9) <= 2 * decode_split.MIN_STEP + 0.09
    finally:
        split.close()


def test_the_balance_goes_all_the_way_to_one_side_when_the_other_is_useless():
    split = DecodeSplit([np.arange(32)], share=0.5)
    try:
        _run(SplitBalance(split), split, 0.001, 1000.0, batches=100)  # devices useless
        assert split.share == 1.0
        _run(SplitBalance(split), split, 1000.0, 0.001, batches=100)  # readers useless
        assert split.share == 0.0
    finally:
        split.close()


def test_batches_read_before_a_move_do_not_count():
    split = DecodeSplit([np.arange(32)], share=0.5)
    balance = SplitBalance(split)
    try:
        for _ in range(decode_split.WINDOW):  # the readers behind: the share goes down
            balance.readers_waited(0.5)
            balance.devices_decoded(0.01, 0.5)
        assert split.share == 0.25
        for _ in range(3 * decode_split.WINDOW):  # batches read ahead at 0.5: no move
            balance.readers_waited(0.0)
            balance.devices_decoded(0.01, 0.5)
        assert split.share == 0.25
    finally:
        split.close()
