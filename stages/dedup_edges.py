"""The edge rows of the dedup reduce (`EDGE_SCHEMA`): what `stages.dedup_graph` finds in one bucket, as the
edge and evidence files hold them, and the table helpers the decontamination rounds share."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Edge kinds of the n-gram measure: specific n-grams of an evaluation record (a, count) and those of them a
# training trajectory holds (a = training id, b = evaluation id, count); summed over the buckets.
KIND_TOTAL, KIND_SHARED = "decontam_total", "decontam_shared"

EDGE_SCHEMA = pa.schema(
    [("kind", pa.string()), ("a", pa.string()), ("b", pa.string()), ("jaccard", pa.float32()),
     ("a_turns", pa.int32()), ("a_len", pa.int64()), ("b_turns", pa.int32()), ("b_len", pa.int64()),
     ("count", pa.int64())]
)


def columns_table(columns: dict[str, Any], schema: pa.Schema) -> pa.Table:
    """A table of `schema` from its columns by name (Arrow arrays, or values converted to the field's type)."""
    arrays = [c if isinstance(c, pa.Array) else pa.array(c, type=f.type) for c, f in
              ((columns[f.name], f) for f in schema)]
    return pa.Table.from_arrays(arrays, schema=schema)


def total_table(counts: pa.StructArray, sizes: dict[str, tuple[int, int]]) -> pa.Table:
    """`edge_table` of the `KIND_TOTAL` edges ``(KIND_TOTAL, id, "", count)`` of ``value_counts`` of evaluation
    ids (`counts`), built as columns: the same rows, in the same order (ids sorted)."""
    ids = counts.field("values")
    if pa.types.is_dictionary(ids.type):
        ids = ids.dictionary_decode()
    order = pc.sort_indices(ids)  # by UTF-8 bytes: the order of Python's str comparison
    ids, n = ids.take(order), counts.field("counts").take(order)
    a_sizes = [sizes.get(v, (0, 0)) for v in ids.to_pylist()] if sizes else None
    b_turns, b_len = sizes.get("", (0, 0))
    rows = len(ids)
    return pa.Table.from_arrays([
        pa.array(np.full(rows, KIND_TOTAL, dtype=object), pa.string()), ids.cast(pa.string()),
        pa.array(np.full(rows, "", dtype=object), pa.string()), pa.array(np.zeros(rows, np.float32)),
        pa.array([x[0] for x in a_sizes] if a_sizes else np.zeros(rows, np.int32), pa.int32()),
        pa.array([x[1] for x in a_sizes] if a_sizes else np.zeros(rows, np.int64), pa.int64()),
        pa.array(np.full(rows, b_turns, np.int32)), pa.array(np.full(rows, b_len, np.int64)), n.cast(pa.int64()),
    ], schema=EDGE_SCHEMA)


def edge_table(edges: list[tuple], sizes: dict[str, tuple[int, int]]) -> pa.Table:
    """The edge file rows of `bucket_edges`' edges, with the (turns, text length) of both ends from `sizes`."""
    counted = [kind in (KIND_TOTAL, KIND_SHARED) for kind, *_ in edges]
    a_sizes = [sizes.get(e[1], (0, 0)) for e in edges]
    b_sizes = [sizes.get(e[2], (0, 0)) for e in edges]
    columns = {
        "kind": [e[0] for e in edges], "a": [e[1] for e in edges], "b": [e[2] for e in edges],
        "jaccard": [0.0 if c else e[3] for e, c in zip(edges, counted)],
        "a_turns": [x[0] for x in a_sizes], "a_len": [x[1] for x in a_sizes],
        "b_turns": [x[0] for x in b_sizes], "b_len": [x[1] for x in b_sizes],
        "count": [int(e[3]) if c else 0 for e, c in zip(edges, counted)],
    }
    return pa.Table.from_arrays([pa.array(columns[f.name], type=f.type) for f in EDGE_SCHEMA], schema=EDGE_SCHEMA)
