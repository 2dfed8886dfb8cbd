"""The loader's checkpoint state (jaxload.state): the JSON it is saved as, what a damaged
state is refused for, and each refused restore naming what changed. (Restores through a
real loader and Orbax: tests/pipeline/test_checkpoint.py.)"""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest

from jaxload.errors import CheckpointError
from jaxload.state import LoaderState, check_compatible, stream_fingerprint

VIEW = {"content": "c" * 64, "episodes": "e1", "num_episodes": 4, "windows": {"action": [0, 1]}}


def _state(**changes) -> LoaderState:
    state = LoaderState(
        position=4096, epoch=1, seed=7, global_batch_size=64, host_count=4,
        fingerprint="f" * 64, dataset_fingerprints=("d" * 64,), shuffle=True,
        drop_n_first_frames=0, drop_n_last_frames=2, mixture_quota=(1,), epoch_size=9000,
        sources=("/data/ds",), views=(VIEW,),
    )  # fmt: skip
    return dataclasses.replace(state, **changes)


def test_the_stream_fingerprint_covers_datasets_episodes_and_lengths():
    base = stream_fingerprint(["a"], [np.array([0, 2])], [np.array([5, 7])])
    assert base == stream_fingerprint(["a"], [[0, 2]], [np.array([5, 7], np.int32)])
    assert base != stream_fingerprint(["b"], [np.array([0, 2])], [np.array([5, 7])])
    assert base != stream_fingerprint(["a"], [np.array([0, 3])], [np.array([5, 7])])
    assert base != stream_fingerprint(["a"], [np.array([0, 2])], [np.array([5, 8])])
    two = stream_fingerprint(["a", "a"], [[0], [2]], [[5], [7]])
    assert two != stream_fingerprint(["a", "a"], [[0, 2], []], [[5, 7], []])  # boundaries count
    with pytest.raises(ValueError):
        stream_fingerprint(["a", "b"], [[0]], [[5]])


def test_a_state_round_trips_through_json():
    state = _state()
    text = state.to_json()
    assert json.loads(text)["format"] == "jaxload.loader_state"
    assert LoaderState.from_json(text) == state
    old = {k: v for k, v in state.to_dict().items() if k not in ("sources", "views")}
    assert LoaderState.from_dict(old) == _state(sources=(), views=())  # saved before them


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: {**d, "format": "other"}, "not a jaxload loader state"),
        (lambda d: {**d, "version": 2}, "loader state version 2 is not supported"),
        (lambda d: {k: v for k, v in d.items() if k != "seed"}, r"lacks \['seed'\]"),
        (lambda d: {**d, "position": 24.7}, r"position=24\.7: not an integer >= 0"),
        (lambda d: {**d, "position": True}, r"position=True: not an integer"),
        (lambda d: {**d, "global_batch_size": 0}, r"global_batch_size=0: not an integer >= 1"),
        (lambda d: {**d, "epoch": 2**63}, r"epoch=\d+: larger than any stream position"),
        (lambda d: {**d, "fingerprint": " "}, "not the fingerprints a loader saves"),
        (lambda d: {**d, "dataset_fingerprints": []}, "not the fingerprints a loader saves"),
        (lambda d: {**d, "dataset_fingerprints": [3]}, "not the fingerprints a loader saves"),
    ],
)
def test_a_damaged_state_is_refused_naming_the_field(edit, message):
    with pytest.raises(CheckpointError, match=message):
        LoaderState.from_dict(edit(_state().to_dict()))


def test_state_that_is_not_json_names_the_file():
    with pytest.raises(CheckpointError, match=r"^ckpt/loader\.json: not valid JSON .* damaged"):
        LoaderState.from_json('{"format": "jaxl', "ckpt/loader.json")
    with pytest.raises(CheckpointError, match="not a jaxload loader state"):
        LoaderState.from_json("[1, 2]")


def test_another_host_count_restores_and_the_same_state_does():
    check_compatible(_state(), _state(host_count=1, position=0, epoch=0))


@pytest.mark.parametrize(
    "name, value", [("seed", 8), ("shuffle", False), ("drop_n_last_frames", 0),
                    ("drop_n_first_frames", 1), ("mixture_quota", (2,))],
)  # fmt: skip
def test_a_setting_that_changes_the_order_is_refused_naming_it(name, value):
    with pytest.raises(CheckpointError, match=rf"saved with {name}=.* but this loader has {name}="):
        check_compatible(_state(), _state(**{name: value}))


def test_another_batch_size_restores_only_when_allowed_and_warns():
    with pytest.raises(
        CheckpointError, match=r"global_batch_size=64 but this loader has 32\. Pass "
    ):
        check_compatible(_state(), _state(global_batch_size=32))
    with pytest.warns(UserWarning, match="the stream continues at sample 4096"):
        check_compatible(
            _state(), _state(global_batch_size=32), allow_global_batch_size_change=True
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_compatible(_state(), _state(), allow_global_batch_size_change=True)


def _refused(saved, current) -> str:
    with pytest.raises(CheckpointError) as raised:
        check_compatible(saved, current)
    return str(raised.value)


def test_a_refused_restore_names_what_changed_in_which_dataset():
    other = "0" * 64
    saved = _state()
    content = _refused(saved, _state(fingerprint=other, views=({**VIEW, "content": "x" * 64},)))
    assert "does not match dataset 0 (/data/ds): its content changed" in content
    assert "cccccccccccc saved, xxxxxxxxxxxx now" in content
    episodes = _refused(saved, _state(fingerprint=other, views=({**VIEW, "episodes": "e2",
                                                                  "num_episodes": 3},)))  # fmt: skip
    assert "its episode selection changed (4 episodes saved, 3 now" in episodes
    windows = _refused(
        saved,
        _state(
            fingerprint=other,
            views=({**VIEW, "windows": {"action": [0, 1, 2, 3, 4], "state": [-1]}},),
        ),
    )
    assert (
        "its windows changed ('action': frames [0, 1] saved, 0..4 now; 'state': frames none "
        "saved, [-1] now)" in windows
    )
    count = _refused(saved, _state(fingerprint=other, views=(VIEW, VIEW), sources=("a", "b")))
    assert "saved reading 1 datasets (['/data/ds']), this loader reads 2 (['a', 'b'])" in count


def test_a_stream_fingerprint_edited_alone_is_said_to_be_a_damaged_state():
    message = _refused(_state(), _state(fingerprint="0" * 64))
    assert "stream fingerprint ffffffffffff... is not this loader's (000000000000...)" in message
    assert "the state was edited or damaged" in message


def test_states_without_views_name_both_datasets():
    message = _refused(_state(views=()), _state(fingerprint="0" * 64, views=(),
                                                dataset_fingerprints=("9" * 64,)))  # fmt: skip
    assert "saved for dataset fingerprint(s) ['dddddddddddd'] at ['/data/ds']" in message
    assert "this loader reads dataset fingerprint(s) ['999999999999']" in message
