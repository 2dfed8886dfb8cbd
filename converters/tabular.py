"""Tabular features: from LeRobot parquet columns to packed per-frame records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from jaxload.errors import SourceError
from jaxload.format import FRAMES_PER_BLOCK, Feature, frame_dtype


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
        if not (
            pa.types.is_integer(base) or pa.types.is_floating(base) or pa.types.is_boolean(base)
        ):
            raise SourceError(f"{where}: column {name!r} has unsupported type {arrow_type}")
        dtype = np.dtype(base.to_pandas_dtype()).name
        info = declared.get(name, {})
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


def frame_blocks(table: pa.Table, features: Mapping[str, Feature], where: str) -> list[bytes]:
    """Packed rows of `frame_dtype(features)`, FRAMES_PER_BLOCK rows per record."""
    rows = np.zeros(table.num_rows, dtype=frame_dtype(features))
    for name, feature in features.items():
        rows[name] = _column_array(table[name], feature, table.num_rows, f"{where}: {name!r}")
    data = rows.tobytes()
    block = rows.dtype.itemsize * FRAMES_PER_BLOCK
    return [data[i : i + block] for i in range(0, len(data), block)]


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
