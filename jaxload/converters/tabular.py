"""Tabular features: from LeRobot parquet columns to packed per-frame records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from jaxload.errors import SourceError
from jaxload.format import FRAMES_PER_BLOCK, STRING, Feature, frame_dtype


def features_from_schema(
    schema: pa.Schema, columns: Sequence[str], declared: Mapping[str, Any], where: str
) -> dict[str, Feature]:
    """The stored shape of each column, as LeRobotDataset returns it.

    A list column has the feature's declared shape; a scalar column is returned by
    LeRobot as a 0-d value even though meta/info.json declares shape [1].
    """
    features = {}
    for name in columns:
        if name not in schema.names:
            raise SourceError(f"{where}: declared feature {name!r} has no column")
        arrow_type = schema.field(name).type
        base, depth = arrow_type, 0
        while (
            pa.types.is_list(base)
            or pa.types.is_fixed_size_list(base)
            or pa.types.is_large_list(base)
        ):
            base, depth = base.value_type, depth + 1
        info = declared.get(name, {})
        if _is_string(base):
            if depth:
                raise SourceError(
                    f"{where}: feature {name!r} holds lists of strings ({arrow_type}); "
                    "jaxload carries one string per frame"
                )
            features[name] = Feature(STRING, (), info.get("names"))
            continue
        if not (
            pa.types.is_integer(base) or pa.types.is_floating(base) or pa.types.is_boolean(base)
        ):
            raise SourceError(
                f"{where}: feature {name!r} has type {arrow_type}, which jaxload cannot "
                "carry (numbers, bools, strings and cameras only)"
            )
        dtype = np.dtype(base.to_pandas_dtype()).name
        if depth == 0:
            shape: tuple[int, ...] = ()
        else:
            shape = tuple(int(d) for d in info.get("shape", ()))
            if len(shape) != depth:
                raise SourceError(
                    f"{where}: column {name!r} is nested {depth} deep but meta/info.json "
                    f"declares shape {list(shape)}"
                )
        features[name] = Feature(dtype, shape, info.get("names"))
    return features


def _is_string(arrow_type: pa.DataType) -> bool:
    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)


def frame_blocks(
    table: pa.Table, features: Mapping[str, Feature], where: str
) -> tuple[list[bytes], dict[str, list[str]]]:
    """Packed rows of `frame_dtype(features)`, FRAMES_PER_BLOCK rows per record, and each
    string feature's vocabulary for this episode (its frames store indices into it)."""
    rows = np.zeros(table.num_rows, dtype=frame_dtype(features))
    vocabularies = {}
    for name, feature in features.items():
        here = f"{where}: {name!r}"
        if feature.is_string:
            rows[name], vocabularies[name] = _string_indices(table[name], here)
        else:
            rows[name] = _column_array(table[name], feature, table.num_rows, here)
    data = rows.tobytes()
    block = rows.dtype.itemsize * FRAMES_PER_BLOCK
    return [data[i : i + block] for i in range(0, len(data), block)], vocabularies


def _string_indices(column: pa.ChunkedArray, where: str) -> tuple[np.ndarray, list[str]]:
    """Per-frame index into the episode's strings, in order of first appearance."""
    if column.null_count:
        raise SourceError(f"{where}: has null values")
    values = column.to_pylist()
    vocabulary = list(dict.fromkeys(values))
    position = {v: i for i, v in enumerate(vocabulary)}
    return np.array([position[v] for v in values], dtype=np.uint32), vocabulary


def _column_array(column: pa.ChunkedArray, feature: Feature, n: int, where: str) -> np.ndarray:
    array = column.combine_chunks()
    for _ in feature.shape:
        if array.null_count:
            raise SourceError(f"{where}: has null values")
        array = array.flatten()
    if array.null_count:
        raise SourceError(f"{where}: has null values")
    values = array.to_numpy(zero_copy_only=False)
    expected = n * int(np.prod(feature.shape, dtype=np.int64))
    if values.size != expected:
        raise SourceError(
            f"{where}: holds {values.size} values for {n} frames of shape {list(feature.shape)}"
        )
    return values.astype(feature.dtype, copy=False).reshape((n, *feature.shape))
