"""Finding shard files through fsspec and planning their row groups (no torch needed).

A shard source is a directory (an output root, its ``shards/`` folder or one pool folder such as
``out/shards/sft``), a glob (``s3://bucket/run/shards/*/part-*.parquet``) or one Parquet file, on
any filesystem fsspec reaches. The pipeline writes ``_SUCCESS`` last, so a source is read only
when that marker sits in its folder or in one of the two folders above it (pool folder →
``shards/`` → output root); anything else is an unfinished run and is refused.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from schemas.errors import ConfigError
from stages.store_answer import check_inputs_answer

SUCCESS_MARKER = "_SUCCESS"
# The marker may sit in the source folder or this many folders above it.
SUCCESS_SEARCH_DEPTH = 2
REQUIRED_COLUMNS = ("sample_id", "input_ids", "loss_weight")
CATEGORY_COLUMNS = ("turn_spans", "turn_category")
_GLOB_CHARS = "*?["


class ShardError(ConfigError):
    """Shards that cannot be trained on: missing, unfinished (no ``_SUCCESS``) or of the wrong shape."""


@dataclass(frozen=True)
class RowGroup:
    """One Parquet row group: the unit the loader reads and the epoch shuffle permutes."""

    uri: str
    index: int
    num_rows: int


def _protocol_of(fs: fsspec.AbstractFileSystem) -> str:
    protocol = fs.protocol
    return protocol if isinstance(protocol, str) else protocol[0]


def _full_uri(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """A URI that `fsspec.open` resolves again in another process (local files stay plain paths)."""
    if _protocol_of(fs) in ("file", "local"):
        return path
    return fs.unstrip_protocol(path)


def _has_glob(path: str) -> bool:
    return any(ch in path for ch in _GLOB_CHARS)


def _glob_anchor(path: str) -> str:
    """The deepest folder of a glob pattern that has no wildcard in it."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        if _has_glob(part):
            return "/".join(parts[:i]) or "/"
    return posixpath.dirname(path)


def find_success_marker(fs: fsspec.AbstractFileSystem, folder: str, depth: int = SUCCESS_SEARCH_DEPTH) -> str | None:
    """Path of the ``_SUCCESS`` marker in `folder` or up to `depth` folders above it, or None."""
    current = folder.rstrip("/")
    for _ in range(depth + 1):
        candidate = posixpath.join(current, SUCCESS_MARKER)
        if fs.exists(candidate):
            return candidate
        parent = posixpath.dirname(current)
        if not parent or parent == current:
            break
        current = parent
    return None


def _files_of_source(source: str) -> list[str]:
    fs, path = fsspec.core.url_to_fs(source)
    if _has_glob(path):
        anchor, files = _glob_anchor(path), [p for p in fs.glob(path) if p.endswith(".parquet")]
    elif fs.isdir(path):
        _refuse_a_run_folder(fs, source, path)
        anchor, files = path, [p for p in fs.find(path) if p.endswith(".parquet")]
    elif fs.isfile(path):
        anchor, files = posixpath.dirname(path), [path]
    else:
        raise ShardError(f"shard source {source} does not exist")
    if find_success_marker(fs, anchor) is None:
        raise ShardError(
            f"{source}: no {SUCCESS_MARKER} marker in {anchor} or the {SUCCESS_SEARCH_DEPTH} folders above it; "
            "the pipeline run that wrote these shards did not finish, refusing to read them"
        )
    if not files:
        raise ShardError(f"shard source {source} holds no .parquet files")
    return sorted(_full_uri(fs, p) for p in files)


def _refuse_a_run_folder(fs, source: str, path: str) -> None:
    """A whole run folder holds its work files and every pool, eval included: name the pools to choose from."""
    shards = posixpath.join(path, "shards")
    if not (fs.isdir(shards) and fs.exists(posixpath.join(path, "manifest.json"))):
        return
    pools = sorted(posixpath.basename(p.rstrip("/")) for p in fs.ls(shards, detail=False) if fs.isdir(p))
    choices = ", ".join(posixpath.join(source.rstrip("/"), "shards", pool) for pool in pools if pool != "rl")
    raise ShardError(f"{source} is a whole run (its work files, every pool, eval included); give the pool to train "
                     f"on: {choices or 'it has no trainable pool'}")


def resolve_shard_files(sources: Sequence[str]) -> list[str]:
    """All Parquet files of the given sources, sorted and deduplicated; each source must be finished. An object
    store that never answers is one line within ``LWM_STORE_WAIT_S`` seconds (`check_inputs_answer`), not a
    listing that botocore's retries hold for many minutes."""
    if not sources:
        raise ShardError("no shard source given")
    check_inputs_answer(list(sources))
    files: set[str] = set()
    for source in sources:
        files.update(_files_of_source(source))
    return sorted(files)


def folder_sources(sources: Sequence[str]) -> list[str]:
    """The sources that are folders (every shard under them is read), as filesystem paths: a glob or a file
    picks some shards of a run on purpose, a folder means all of them."""
    folders = []
    for source in sources:
        fs, path = fsspec.core.url_to_fs(source)
        if not _has_glob(path) and fs.isdir(path):
            folders.append(path.rstrip("/"))
    return folders


def open_parquet(uri: str) -> pq.ParquetFile:
    """A `ParquetFile` over an fsspec URI, reading only the byte ranges it needs."""
    fs, path = fsspec.core.url_to_fs(uri)
    handle = fs.open(path, "rb")
    try:
        return pq.ParquetFile(handle)
    except pa.ArrowInvalid as exc:  # not Parquet, or cut short (a transient read error stays what it is)
        handle.close()
        raise ConfigError(f"{uri}: not a readable Parquet shard ({' '.join(str(exc).split())[:200]}); run "
                          "`lwm run` again to rebuild it") from None


# The leaf columns whose Parquet statistics the trainer checks before the first step: a sample's length, and the
# token ids (a nested column's values).
NUM_TOKENS_LEAF = "num_tokens"
TOKEN_ID_LEAF = "input_ids.list.element"
STATISTICS_LEAVES = (NUM_TOKENS_LEAF, TOKEN_ID_LEAF)


def _leaf_maxima(meta: pq.FileMetaData, leaves: Sequence[str]) -> dict[str, int | None]:
    """Per leaf column, its largest value by the row-group statistics: -1 for a file without rows, None where the
    column or a row group's statistics are missing (the values must then be read). Each leaf on its own: one
    without statistics leaves the others' maxima as they are."""
    # a leaf column index: nested columns before it (input_ids, turn_spans, ...) take several leaves
    paths = [meta.schema.column(i).path for i in range(meta.num_columns)]
    maxima: dict[str, int | None] = {}
    for leaf in leaves:
        if leaf not in paths:
            maxima[leaf] = None
            continue
        column, largest = paths.index(leaf), -1
        for group in range(meta.num_row_groups):
            if meta.row_group(group).num_rows == 0:
                continue
            stats = meta.row_group(group).column(column).statistics
            if stats is None or not stats.has_min_max:
                largest = None
                break
            largest = max(largest, int(stats.max))
        maxima[leaf] = largest
    return maxima


class FooterStatistics:
    """The largest value of each of `STATISTICS_LEAVES` in each shard file, from its Parquet footer: read once per
    file, however many checks ask (`plan_row_groups` notes the footers it reads anyway)."""

    def __init__(self) -> None:
        self._maxima: dict[str, dict[str, int | None]] = {}

    def note(self, uri: str, meta: pq.FileMetaData) -> None:
        """Keep the maxima of a footer already read."""
        self._maxima[uri] = _leaf_maxima(meta, STATISTICS_LEAVES)

    def column_max(self, uri: str, leaf: str) -> int | None:
        """The largest value of `leaf` (one of `STATISTICS_LEAVES`) in `uri` (see `_leaf_maxima`); the footer is read
        on the first question about the file."""
        if uri not in self._maxima:
            parquet = open_parquet(uri)
            try:
                self.note(uri, parquet.metadata)
            finally:
                parquet.close()
        return self._maxima[uri][leaf]


def _check_schema(uri: str, schema: pa.Schema, extra_columns: Sequence[str]) -> None:
    names = set(schema.names)
    missing = [c for c in (*REQUIRED_COLUMNS, *extra_columns) if c not in names]
    if missing:
        hint = (
            " (rl pool shards store prompts, not weights: point at a cpt, sft or eval pool)"
            if ("loss_weight" in missing)
            else ""
        )
        raise ShardError(f"{uri}: missing column(s) {', '.join(missing)}{hint}")
    for column in ("input_ids", "loss_weight"):
        kind = schema.field(column).type
        if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
            raise ShardError(f"{uri}: column {column} must be a list, found {kind}")


def plan_row_groups(
    files: Sequence[str], extra_columns: Sequence[str] = (), statistics: FooterStatistics | None = None
) -> list[RowGroup]:
    """The row groups of every file, in file order, read from the Parquet footers only; each footer's column maxima
    go to `statistics` where given."""
    groups: list[RowGroup] = []
    for uri in files:
        parquet = open_parquet(uri)
        try:
            _check_schema(uri, parquet.schema_arrow, extra_columns)
            meta = parquet.metadata
        finally:
            parquet.close()
        if statistics is not None:
            statistics.note(uri, meta)
        groups.extend(RowGroup(uri, i, meta.row_group(i).num_rows) for i in range(meta.num_row_groups))
    return [g for g in groups if g.num_rows > 0]
