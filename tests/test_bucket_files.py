"""The dedup bucket files: ids dictionary-encoded by the map (signatures plain), one dictionary when the reduce reads.

The reduce used to read plain strings and encode every row; it now unifies the files' dictionaries. What it
gets must be the table it got before: the decoded rows, each dictionary column encoded in the order its values
first occur (``dictionary_encode`` of the decoded column).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.dedup_map import _BucketOutput
from pipeline.outputs import AtomicIpcWriter, compact_dictionaries, out_fs, read_ipc_tables
from stages.dedup_graph import BUCKET_FILE_SCHEMA, BUCKET_ROWS_SCHEMA, BUCKET_SCHEMA, BucketRows

SCHEMA = pa.schema([("n", pa.int32()), ("t", pa.dictionary(pa.int32(), pa.string()))])
VALUES = ["a", "b", "c", "d", "e"]


def _encoded(table: pa.Table) -> pa.Table:
    """What the reduce read before: the decoded rows in one chunk, each dictionary column encoded anew."""
    plain = pa.table({f.name: table.column(f.name).cast(f.type.value_type) if pa.types.is_dictionary(f.type)
                      else table.column(f.name) for f in table.schema}).combine_chunks()
    for i, f in enumerate(table.schema):
        if pa.types.is_dictionary(f.type):
            plain = plain.set_column(i, f, plain.column(i).dictionary_encode())
    return plain.combine_chunks()


@st.composite
def _chunk(draw) -> pa.DictionaryArray:
    """Rows of `VALUES` (or null) under a dictionary that may hold values no row uses, and a value twice."""
    dictionary = draw(st.lists(st.sampled_from(VALUES), min_size=1, max_size=8))
    rows = draw(st.lists(st.one_of(st.none(), st.integers(0, len(dictionary) - 1)), max_size=12))
    return pa.DictionaryArray.from_arrays(pa.array(rows, type=pa.int32()), pa.array(dictionary, pa.string()))


def _table(chunks: list[pa.DictionaryArray]) -> pa.Table:
    n = pa.chunked_array([pa.array(np.arange(len(c), dtype=np.int32)) for c in chunks], pa.int32())
    return pa.table({"n": n, "t": pa.chunked_array(chunks, SCHEMA.field("t").type)})


@settings(max_examples=200, deadline=None)
@given(st.lists(_chunk(), min_size=1, max_size=4))
def test_compact_dictionaries_gives_what_encoding_the_decoded_rows_gives(chunks):
    table = _table(chunks)
    compact = compact_dictionaries(table)
    assert compact.combine_chunks().equals(_encoded(table))
    assert compact.column("t").num_chunks == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_chunk(), min_size=1, max_size=3), min_size=1, max_size=4))
def test_files_of_compact_writes_read_back_as_one_first_occurrence_dictionary(tmp_path_factory, files):
    """Each file holds several writes, each with its own compact dictionary (a replacement in the stream); the
    reader unifies them into the dictionary of the rows' first occurrences over all files in order."""
    root = str(tmp_path_factory.mktemp("ipc"))
    fs, _ = out_fs(root)
    rels, written = [], []
    for k, writes in enumerate(files):
        rel = f"f{k}.arrow"
        with AtomicIpcWriter(fs, f"{root}/{rel}", SCHEMA, rows_per_batch=5, compression="lz4") as w:
            for c in writes:
                piece = compact_dictionaries(_table([c]))
                w.write_table(piece)
                written.append(piece)
        rels.append(rel)
    got = read_ipc_tables(fs, root, rels, SCHEMA)
    assert got.equals(_encoded(pa.concat_tables(written)))


def test_a_plain_schema_reads_back_as_written(tmp_path):
    fs, root = out_fs(str(tmp_path))
    schema = pa.schema([("s", pa.string())])
    with AtomicIpcWriter(fs, f"{root}/x.arrow", schema) as w:
        w.write_table(pa.table({"s": ["q", "q", None]}))
    assert read_ipc_tables(fs, root, ["x.arrow"], schema).column("s").to_pylist() == ["q", "q", None]


def _bucket_rows(ids: list[str], sigs: list[bytes | None]) -> BucketRows:
    rows = BucketRows()
    for k, (tid, sig) in enumerate(zip(ids, sigs, strict=True)):
        n = 1 + k % 3
        rows.put(1, np.arange(n), np.arange(n, dtype=np.uint64) + 7 * k, np.zeros(n), tid, 0, k, 10 * k, sig)
    return rows


def test_the_map_writes_compact_dictionaries_and_the_reduce_reads_the_rows_it_read_before(tmp_path):
    """Batches of bucket rows (an id that comes back after another, signatures and nulls) through the map's
    bucket output: every write's id dictionary is only its rows' values, once each, in first-occurrence order,
    the signatures are plain, and each bucket read back equals its rows decoded and the ids encoded anew."""
    fs, root = out_fs(str(tmp_path))
    out = _BucketOutput(fs, root, "t0", buckets=3)
    batches = [
        _bucket_rows(["x", "y", "x", "z"], [b"1", None, b"1", b"2"]),
        _bucket_rows(["y", "w", "w", "x"], [None, b"3", b"3", b"1"]),
    ]
    expected = []
    for rows in batches:
        table = rows.table()
        assert table.schema == BUCKET_ROWS_SCHEMA
        expected.append(table)
        out.add(table)
    files = out.close()
    assert len(files) == 3
    every = pa.concat_tables(expected)
    keys = every.column("key").to_numpy()
    read_back = []
    for b, rel in sorted(files.items()):
        with open(f"{root}/{rel}", "rb") as f:
            stored = pa.ipc.open_stream(f.read()).read_all()
        assert stored.schema.field("sig").type == pa.binary()
        for name in ("traj_id",):  # the batches of one write share its dictionary
            writes: list[list[pa.DictionaryArray]] = []
            for chunk in stored.column(name).chunks:
                if writes and chunk.dictionary.equals(writes[-1][0].dictionary):
                    writes[-1].append(chunk)
                else:
                    writes.append([chunk])
            for chunks in writes:
                used = [v for c in chunks for v in c.to_pylist() if v is not None]
                assert chunks[0].dictionary.to_pylist() == list(dict.fromkeys(used))
        table = read_ipc_tables(fs, root, [rel], BUCKET_FILE_SCHEMA)
        mine = every.filter(pa.array(keys % 3 == int(b))).cast(BUCKET_FILE_SCHEMA)
        assert table.equals(_encoded(mine))
        read_back.append(table)
    decoded = pa.concat_tables([_encoded(t).cast(BUCKET_SCHEMA) for t in read_back])
    assert sorted(decoded.to_pylist(), key=lambda r: r["key"]) == sorted(
        every.cast(BUCKET_SCHEMA).to_pylist(), key=lambda r: r["key"])
