"""converters/tabular.py: parquet columns as the features LeRobotDataset returns (a scalar
as 0-d, a list at its declared shape, strings as per-episode vocabularies), packed into
blocks of frames; a column jaxload cannot carry is refused naming file and column."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from jaxload.converters.tabular import features_from_schema, frame_blocks
from jaxload.errors import SourceError
from jaxload.format import FRAMES_PER_BLOCK, frame_dtype

N = FRAMES_PER_BLOCK + 3  # two blocks, the second partial


def _table():
    state = pa.array([[float(i), -float(i)] for i in range(N)], pa.list_(pa.float32(), 2))
    return pa.table({
        "state": state,
        "done": pa.array([i == N - 1 for i in range(N)]),
        "index": pa.array(range(N), pa.int64()),
        "task": pa.array(["b" if i % 3 else "a" for i in range(N)]),
    })  # fmt: skip


DECLARED = {"state": {"shape": [2], "names": ["x", "y"]}, "done": {"shape": [1]}}


def test_features_take_the_declared_shape_and_scalars_are_0d():
    table = _table()
    features = features_from_schema(table.schema, table.column_names, DECLARED, "f")
    assert (features["state"].dtype, features["state"].shape) == ("float32", (2,))
    assert features["state"].names == ["x", "y"]
    assert (features["done"].dtype, features["done"].shape) == ("bool", ())
    assert features["index"].shape == () and features["task"].is_string


def test_frames_are_packed_in_blocks_with_string_vocabularies():
    table = _table()
    features = features_from_schema(table.schema, table.column_names, DECLARED, "f")
    blocks, vocabularies = frame_blocks(table, features, "f: episode 0")
    dtype = frame_dtype(features)
    assert [len(b) for b in blocks] == [FRAMES_PER_BLOCK * dtype.itemsize, 3 * dtype.itemsize]
    rows = np.frombuffer(b"".join(blocks), dtype)
    assert np.array_equal(rows["state"][:, 1], -np.arange(N, dtype=np.float32))
    assert rows["done"].sum() == 1 and rows["done"][-1] and rows["index"][-1] == N - 1
    assert vocabularies == {"task": ["a", "b"]}  # in order of first appearance
    assert [vocabularies["task"][i] for i in rows["task"][:4]] == ["a", "b", "b", "a"]


def test_columns_that_cannot_be_carried_are_named():
    schema = pa.schema([
        ("tags", pa.list_(pa.string())),
        ("blob", pa.binary()),
        ("grid", pa.list_(pa.list_(pa.float32()))),
    ])  # fmt: skip
    cases = {
        "tags": "feature 'tags' holds lists of strings",
        "blob": "feature 'blob' has type binary, which jaxload cannot carry",
        "grid": r"column 'grid' is nested 2 deep but meta/info\.json declares shape \[4\]",
        "gone": "declared feature 'gone' has no column",
    }
    for name, message in cases.items():
        with pytest.raises(SourceError, match=rf"^f\.parquet: episode 3: {message}"):
            features_from_schema(schema, [name], {"grid": {"shape": [4]}}, "f.parquet: episode 3")


def test_nulls_and_ragged_lists_are_named():
    features = features_from_schema(_table().schema, ["state", "task"], DECLARED, "f")
    ragged = pa.table({"state": pa.array([[1.0, 2.0], [3.0]], pa.list_(pa.float32())),
                       "task": ["a", "a"]})  # fmt: skip
    with pytest.raises(
        SourceError, match=r"^f: 'state': holds 3 values for 2 frames of shape \[2\]"
    ):
        frame_blocks(ragged, features, "f")
    nulls = pa.table({"state": pa.array([[1.0, None], [3.0, 4.0]], pa.list_(pa.float32())),
                      "task": ["a", "a"]})  # fmt: skip
    with pytest.raises(SourceError, match="'state': has null values"):
        frame_blocks(nulls, features, "f")
    no_task = pa.table({"state": pa.array([[1.0, 2.0], [3.0, 4.0]], pa.list_(pa.float32())),
                        "task": pa.array(["a", None])})  # fmt: skip
    with pytest.raises(SourceError, match="'task': has null values"):
        frame_blocks(no_task, features, "f")
