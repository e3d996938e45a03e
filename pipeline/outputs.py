"""Atomic outputs on any fsspec filesystem: write under a temporary name, then rename.

A crashed or killed run leaves only ``*.tmp-*`` files, which no reader looks at and the next
run removes; a file under its final name is always complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import uuid
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.dircache import DirCache

from pipeline.digest import HashingFile
from pipeline.object_stores import naming_refusals
from schemas.errors import ConfigError
from schemas.text import escape_surrogates
from stages.distinct import distinct, distinct_first
from stages.ingest.reading import BUCKET_PROTOCOLS, is_local, protocols

PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 3}

# Data pages of up to 8 MiB: an all-turn sample repeats the history of the samples before it, and
# zstd finds those repeats only within one page (one SFT shard: 8.9 MB with 1 MiB pages, 7.2 MB here).
DATA_PAGE_SIZE = 8 << 20


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """Parquet leaf paths (``a.list.element.b``) of the string columns of `schema`.

    Dictionary encoding pays on strings that repeat (ids, domains, roles, categories). On token ids,
    weights and other numbers it roughly doubled the write time of a shard and grew the file
    (one SFT shard: 16 MB with a dictionary on every column, 8.9 MB with strings only).
    """
    out: list[str] = []

    def walk(path: str, typ: pa.DataType) -> None:
        if pa.types.is_struct(typ):
            for i in range(typ.num_fields):
                walk(f"{path}.{typ.field(i).name}", typ.field(i).type)
        elif pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
            walk(f"{path}.list.element", typ.value_type)
        elif pa.types.is_map(typ):
            walk(f"{path}.key_value.key", typ.key_type)
            walk(f"{path}.key_value.value", typ.item_type)
        elif pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_dictionary(typ):
            out.append(path)

    for field in schema:
        walk(field.name, field.type)
    return out


def statistics_columns(schema: pa.Schema) -> list[str]:
    """The columns of `schema` whose row groups get min/max statistics: the top-level ones that are not nested.

    A reader can skip row groups by those (a sample or trajectory id, ``num_tokens``, which the trainer reads
    from the footer). The leaves of lists and structs get none: the minimum and maximum token id or weight of
    a row group, or its alphabetically first observation, tell a reader nothing, and computing them was 10-20%
    of a shard's write (41 MB run, two all-turn SFT shards: 1.24-1.26 s against 1.38-1.52 s), and the
    trajectories layer's footers carried pieces of texts (task descriptions, reasoning, up to 1 KB) as bounds.
    """
    return [f.name for f in schema if not pa.types.is_nested(f.type)]


def parquet_options(schema: pa.Schema, compression_level: int = 3) -> dict[str, Any]:
    """Writer options of every Parquet file lwmkit writes (`AtomicParquetWriter`)."""
    return {**PARQUET_OPTIONS, "compression_level": compression_level, "write_statistics": statistics_columns(schema),
            "use_dictionary": dictionary_columns(schema), "data_page_size": DATA_PAGE_SIZE}


# The output filesystems of this process, by the shared instance they stand in for and the location (`out_fs`).
_OUTPUT_FS: dict[str, fsspec.AbstractFileSystem] = {}


def out_fs(root: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """Filesystem and root path of an output location (local path or fsspec URL).

    An instance of its own that keeps no directory listings: every worker of a run writes there at once, and a
    listing held by one process goes stale as soon as another commits a file. s3fs then answered from a stale
    listing that a file another worker had written was missing (a later `find` does not replace a listing it
    holds): a shard task failed so, its process having listed the samples folder for an earlier task's clean-up.
    The shared instance, which reads the inputs, keeps its listings (sizing 10,000 listed input files would
    otherwise cost 10,000 requests). The cache is replaced, not turned off by a storage option, which some
    filesystems pass on to their connection (SFTP). The shared instance's token names this process (and for a
    synchronous filesystem, the thread), so a forked worker makes its own; each location has its own, whose
    refusals name it. A local path keeps the shared instance: a local filesystem caches no listings."""
    fs, path = fsspec.core.url_to_fs(root)
    if not is_local(fs) and isinstance(getattr(fs, "dircache", None), DirCache) and fs.dircache.use_listings_cache:
        if (own := _OUTPUT_FS.get(key := f"{fs._fs_token}\n{root}")) is None:  # fsspec's token of its instances
            own = fsspec.core.url_to_fs(root, skip_instance_cache=True)[0]
            own.dircache = DirCache(use_listings_cache=False)
            own.invalidate_cache = _invalidating_both(own.invalidate_cache, fs)
            naming_refusals(own, root, path)
            _OUTPUT_FS[key] = own  # once set up: another thread may look it up at once
        fs = own
    return fs, path.rstrip("/")


def _invalidating_both(own: Callable[..., None], shared: fsspec.AbstractFileSystem) -> Callable[..., None]:
    """What the output's filesystem calls on every write, removal and rename: here it also drops what the
    shared instance of this process had listed of that path (a caller that lists the output with it, as
    the training reader does, then sees what the run wrote, as it did when both were one instance)."""

    def invalidate_cache(path: str | None = None) -> None:
        own(path)
        shared.invalidate_cache(path)

    return invalidate_cache


def _tmp_name(path: str) -> str:
    return f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _commit(fs: fsspec.AbstractFileSystem, tmp: str, path: str) -> None:
    (os.replace if is_local(fs) else fs.mv)(tmp, path)


def ensure_dir(fs: fsspec.AbstractFileSystem, path: str) -> None:
    """The folder `path`, made where folders exist (an object store has none: making one there could create a
    bucket, which lwm never does)."""
    if protocols(fs) & BUCKET_PROTOCOLS:
        return
    try:
        fs.makedirs(path, exist_ok=True)
    except OSError as exc:  # a file in the way reads "File exists" or "Not a directory" by its errno: name it
        shown = path if is_local(fs) else fs.unstrip_protocol(path)
        file = next((p for p in (path, *map(str, PurePosixPath(path).parents)) if fs.isfile(p)), None)
        why = "it is a file, not a folder" if file == path else f"{file} is a file, not a folder" if file else exc.strerror
        raise ConfigError(f"output not writable: {shown} ({why or exc})") from None


def write_bytes_atomic(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> None:
    ensure_dir(fs, posixpath.dirname(path))
    tmp = _tmp_name(path)
    with fs.open(tmp, "wb") as f:
        f.write(data)
    _commit(fs, tmp, path)


def write_json_atomic(fs: fsspec.AbstractFileSystem, path: str, value: Any) -> None:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"
    # A lone surrogate (a non-UTF-8 file name, a JSON "\\ud800") becomes its JSON escape again.
    write_bytes_atomic(fs, path, text.encode("utf-8", "backslashreplace"))


class _AtomicFileWriter:
    """What both atomic writers share: a temporary file next to `path`, renamed to it by `close()`,
    removed by `abort()`. A subclass opens its format's writer on ``self._file`` as ``self._writer``."""

    def __init__(self, fs: fsspec.AbstractFileSystem, path: str, schema: pa.Schema) -> None:
        ensure_dir(fs, posixpath.dirname(path))
        self.fs, self.path, self.schema = fs, path, schema
        self.tmp = _tmp_name(path)
        self._file = fs.open(self.tmp, "wb")
        self.num_rows, self.size = 0, -1  # size: the file's bytes, once closed

    def close(self) -> None:
        self._writer.close()
        self.size = int(self._file.tell())
        self._file.close()
        _commit(self.fs, self.tmp, self.path)

    def abort(self) -> None:
        """Drop the temporary file. Closing may fail again after the error that led here (a full disk, or
        a file the failed close already shut); that error is the one to report, so these are ignored."""
        with contextlib.suppress(Exception):
            self._writer.close()
        with contextlib.suppress(Exception):
            self._file.close()
        if self.fs.exists(self.tmp):
            self.fs.rm(self.tmp)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class AtomicIpcWriter(_AtomicFileWriter):
    """Stream tables into one Arrow IPC stream file committed by rename on `close()`.

    For intermediate files that only lwmkit reads back whole (``_work/samples``, the dedup bucket files): Arrow's
    own layout, zstd per buffer (`compression`), writes about three times faster than Parquet at the same size
    and reads back without decoding. A writer closed without rows still writes a valid empty stream.
    """

    def __init__(self, fs: fsspec.AbstractFileSystem, path: str, schema: pa.Schema, rows_per_batch: int = 1024,
                 compression: str | None = "zstd") -> None:
        super().__init__(fs, path, schema)
        options = pa.ipc.IpcWriteOptions(compression=compression, use_threads=False)
        self._writer = pa.ipc.new_stream(self._file, schema, options=options)
        self.rows_per_batch = rows_per_batch

    def write_table(self, table: pa.Table) -> None:
        if table.num_rows:
            self._writer.write_table(table.cast(self.schema), max_chunksize=self.rows_per_batch)
            self.num_rows += table.num_rows


def ipc_batches(fs: fsspec.AbstractFileSystem, path: str, schema: pa.Schema,
                included: list[int] | None = None) -> Iterator[pa.RecordBatch]:
    """The record batches an `AtomicIpcWriter` wrote, one at a time; ValueError if its schema is not `schema`.
    `included`: only these fields (indices into `schema`); the others' buffers are skipped, not decompressed."""
    with fs.open(path, "rb") as f:
        if included is None:
            reader = pa.ipc.open_stream(f)
        else:
            reader = pa.ipc.open_stream(f, options=pa.ipc.IpcReadOptions(included_fields=included))
            schema = pa.schema([schema.field(i) for i in included])
        if not reader.schema.equals(schema):
            raise ValueError(f"{path}: schema {reader.schema} is not the expected {schema}")
        yield from reader


def read_ipc(fs: fsspec.AbstractFileSystem, path: str, schema: pa.Schema) -> pa.Table:
    """The table an `AtomicIpcWriter` wrote; ValueError if its schema is not `schema`."""
    return pa.Table.from_batches(list(ipc_batches(fs, path, schema)), schema=schema)


def read_tables(fs, root: str, rels: list[str], schema: pa.Schema, dictionary: tuple[str, ...] = (),
                columns: list[str] | None = None) -> pa.Table:
    """The work files `rels` (relative to the run root) as one table, in the order given; empty of `schema` when none.

    The `dictionary` columns are read as dictionaries, unified into one (bucket rows repeat a trajectory id
    hundreds of times: a string per row costs more than the rest of the read); `columns`: only these.
    """
    tables = []
    for rel in rels:
        with fs.open(f"{root}/{rel}", "rb") as f:
            tables.append(pq.read_table(f, columns=columns, read_dictionary=list(dictionary) or None))
    if not tables:
        return schema.empty_table() if columns is None else pa.schema([schema.field(c) for c in columns]).empty_table()
    table = pa.concat_tables(tables)
    return table.unify_dictionaries().combine_chunks() if dictionary else table


_IPC_READ = pa.ipc.IpcReadOptions(use_threads=False)


def read_ipc_tables(fs, root: str, rels: list[str], schema: pa.Schema) -> pa.Table:
    """`read_tables` for work files an `AtomicIpcWriter` wrote: one table, in the order given.

    Each dictionary column of `schema` comes back with one dictionary. When every file holds its dictionaries
    as `compact_dictionaries` leaves them (only the values its rows use, in the order they first occur), that
    dictionary is also in the order the values first occur over all the files, as ``dictionary_encode`` of the
    decoded column would give it: unifying hashes each file's distinct values, not every row.
    """
    tables = []
    for rel in rels:
        with fs.open(f"{root}/{rel}", "rb") as f:
            # one read: the stream reader asks for each buffer apart; no decompression threads (a task runs
            # on one core, and small lz4 buffers decoded on a pool took 2-3 times as long)
            reader = pa.ipc.open_stream(f.read(), options=_IPC_READ)
        if not reader.schema.equals(schema):
            raise ValueError(f"{root}/{rel}: schema {reader.schema} is not the expected {schema}")
        tables.append(reader.read_all())
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    if not any(pa.types.is_dictionary(f.type) for f in schema):
        return table
    return table.unify_dictionaries().combine_chunks()


def compact_dictionaries(table: pa.Table) -> pa.Table:
    """`table` with each dictionary column in one chunk holding only the values its rows use, each once, in the
    order the rows first use them: what ``dictionary_encode`` of the decoded column gives, without hashing
    every row (only the values the rows use, once each). Nulls stay null; the other columns are left as they are.

    The chunks may each have a dictionary of their own (slices of different tables): their dictionaries are
    laid back to back and each row's index moved to its place there, which costs less than unifying them
    (a unification hashes every value of every dictionary, used or not)."""
    columns = [pa.chunked_array([_compact_dictionary(col.chunks, field.type)], field.type)
               if pa.types.is_dictionary(field.type) else col for field, col in zip(table.schema, table.columns)]
    return pa.Table.from_arrays(columns, schema=table.schema)


def zero_filled(numbers: pa.Array) -> np.ndarray:
    """An integer array as numpy, 0 for a null row (a call to fill nulls only where there are some)."""
    return (numbers.fill_null(0) if numbers.null_count else numbers).to_numpy(zero_copy_only=False)


def _compact_dictionary(chunks: list[pa.DictionaryArray], typ: pa.DictionaryType) -> pa.DictionaryArray:
    if not chunks:
        return pa.array([], typ)
    dictionaries = [c.dictionary for c in chunks]
    dictionary = pa.concat_arrays(dictionaries)  # every chunk's values, back to back
    starts = np.cumsum([0] + [len(d) for d in dictionaries[:-1]], dtype=np.int64)
    indices = pa.concat_arrays([c.indices for c in chunks])
    ok = indices.is_valid().to_numpy(zero_copy_only=False) if indices.null_count else np.ones(len(indices), bool)
    slot = zero_filled(indices).astype(np.int64)
    slot += np.repeat(starts, [len(c) for c in chunks])  # an index into `dictionary`
    slots, first = distinct_first(slot[ok])
    used = slots[np.argsort(first, kind="stable")]  # slots in the order the rows first use them
    values = dictionary.take(pa.array(used)).dictionary_encode()  # the same value in two slots: one
    code = np.zeros(len(dictionary), dtype=np.int32)
    code[used] = values.indices.to_numpy(zero_copy_only=False)
    return pa.DictionaryArray.from_arrays(pa.array(code[slot], mask=~ok, type=typ.index_type), values.dictionary)


# Row groups of work files: each is written and read whole, and per row group Parquet pays a page set per
# column and its statistics (six group files of a 2 GB reduce task, 573,000 rows: written in 0.17-0.18 s and
# read in 0.08-0.11 s in groups of 1,024 rows, in 0.14 s and 0.04 s in groups of 65,536).
WORK_ROWS_PER_GROUP = 1 << 16
# zstd level of work files, read once by a later round: level 1 wrote the six group files above in 0.085 s
# against 0.136 s at level 3, and 2% smaller (ids dictionary-encoded, the rest hashes and counts).
WORK_COMPRESSION_LEVEL = 1


def write_table(fs, root: str, rel: str, schema: pa.Schema, table: pa.Table,
                rows_per_group: int = WORK_ROWS_PER_GROUP, compression_level: int = WORK_COMPRESSION_LEVEL) -> str:
    """`table` as the work file `rel` (relative to the run root), written atomically; returns `rel`."""
    with AtomicParquetWriter(fs, f"{root}/{rel}", schema, rows_per_group=rows_per_group,
                             compression_level=compression_level) as w:
        w.write_table(table)
    return rel


def write_parts(fs, root: str, rel_of, schema: pa.Schema, table: pa.Table, part: np.ndarray) -> dict[str, str]:
    """`table`'s rows, split by `part` (one value per row), one file per value: ``{value: rel_of(value)}``."""
    return {str(q): write_table(fs, root, rel_of(q), schema, table.filter(pa.array(part == q)))
            for q in distinct(part).tolist()}


def read_json(fs: fsspec.AbstractFileSystem, path: str) -> Any:
    with fs.open(path, "rb") as f:
        return json.loads(f.read())


class AtomicParquetWriter(_AtomicFileWriter):
    """Stream record batches into one Parquet file committed by rename on `close()`.

    Rows are buffered up to `rows_per_group` so row groups have a useful size and memory stays
    bounded. A writer closed without rows still writes a valid empty file (stable layouts).
    With `digest`, `sha256()` is the hex digest of the file's bytes, hashed as they were written: no
    read back (from object storage, a second transfer of the whole file).
    """

    def __init__(
        self,
        fs: fsspec.AbstractFileSystem,
        path: str,
        schema: pa.Schema,
        rows_per_group: int = 1024,
        compression_level: int = 3,
        digest: bool = False,
    ) -> None:
        super().__init__(fs, path, schema)
        if digest:
            self._file = HashingFile(self._file)
        self._writer = pq.ParquetWriter(self._file, schema, **parquet_options(schema, compression_level))
        self._rows: list[dict[str, Any]] = []
        self.rows_per_group = rows_per_group

    def write_row(self, row: dict[str, Any]) -> None:
        self._rows.append(row)
        if len(self._rows) >= self.rows_per_group:
            self.flush()

    def write_table(self, table: pa.Table) -> None:
        self.flush()
        if table.num_rows:
            self._writer.write_table(table.cast(self.schema), row_group_size=self.rows_per_group)
            self.num_rows += table.num_rows

    def flush(self) -> None:
        if self._rows:
            try:
                table = pa.Table.from_pylist(self._rows, schema=self.schema)
            except UnicodeEncodeError:
                # Validation keeps lone surrogates out of trajectories; raw payloads (JSON text) and
                # recorded URIs may still hold one: it is written as its backslash escape.
                table = pa.Table.from_pylist([escape_surrogates(r) for r in self._rows], schema=self.schema)
            self._writer.write_table(table, row_group_size=self.rows_per_group)
            self.num_rows += len(self._rows)
            self._rows = []

    def close(self) -> None:
        self.flush()
        super().close()

    def sha256(self) -> str:
        """The written file's sha256 (hex), once closed; only for a writer opened with `digest`."""
        if not isinstance(self._file, HashingFile):
            raise ValueError(f"{self.path}: its writer was opened without digest=True")
        return self._file.sha256.hexdigest()
