"""What the runs behind a training set must agree on, read from their ``manifest.json``.

Shards hold token ids, not text: an id means a token only under the tokenizer that wrote it, so
shards of runs tokenized differently cannot be trained on together (the model would learn one
embedding for unrelated pieces of text, and nothing would say so). A manifest also lists every
shard file its run wrote, so a missing, copied or stale file is found before the first step.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

import fsspec

from schemas.errors import ConfigError

Manifests = Mapping[str, tuple[dict[str, Any] | None, str]]  # `training.long_samples.run_manifests`


def _tokenizer_of(manifest: dict[str, Any] | None) -> tuple[str, str] | None:
    """(what identifies the tokenizer, how to name it) from a run's manifest; None where it does not say."""
    tokenizer = (manifest or {}).get("tokenizer")
    if not isinstance(tokenizer, dict):
        return None
    vocab = str(tokenizer.get("vocab_hash") or "")
    if not vocab:  # a name alone cannot be compared with another run's vocabulary hash
        return None
    name = str(tokenizer.get("name") or tokenizer.get("engine") or "?")
    return vocab, f"{name} (vocabulary {vocab[:12]})"


def check_same_tokenizer(manifests: Manifests) -> None:
    """Refuse, in one line naming two runs and their tokenizers, shards of runs whose manifests name different
    tokenizers. Runs without a manifest, or whose manifest predates the field, are not compared."""
    first: tuple[str, str, str] | None = None  # identity, description, run root
    for manifest, root in manifests.values():
        found = _tokenizer_of(manifest)
        if found is None:
            continue
        if first is None:
            first = (*found, root)
        elif found[0] != first[0]:
            raise ConfigError(
                f"--shards: the run {first[2]} was tokenized with {first[1]} and the run {root} with {found[1]}; "
                "a token id means different text under each, so train on the shards of one tokenizer"
            )


def _named(paths: list[str], limit: int = 5) -> str:
    shown = ", ".join(paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def check_shard_listing(row_counts: Mapping[str, int], folders: Sequence[str], manifests: Manifests) -> None:
    """Refuse, in one line naming the files, shards that differ from the list of the run's manifest: a file it does
    not list (a copy, a stale part of an older run, a nested folder), a file it lists under a `folders` source that
    is gone, or a file whose rows or size differ from its entry. `row_counts`: rows of every file read, by URI.
    Runs without a manifest, or whose manifest lists no shards, are not compared. (The manifest's sha256 is not
    recomputed: that would read every byte of every shard before the first step.)"""
    listed: dict[str, dict[str, dict[str, Any]]] = {}  # per run root: its manifest's shard entries by path
    read: dict[str, set[str]] = {}  # per run root: the paths read, relative to it
    problems: dict[str, dict[str, list[str]]] = {}
    for uri, rows in sorted(row_counts.items()):
        fs, path = fsspec.core.url_to_fs(uri)
        manifest, root = manifests.get(posixpath.dirname(path), (None, ""))
        shards = (manifest or {}).get("shards")
        if not root or not isinstance(shards, list):
            continue
        wmat = (manifest or {}).get("wmat")
        shards = shards + (wmat.get("shards") or [] if isinstance(wmat, dict) else [])  # the WMAT pools' own list
        entries = listed.setdefault(root, {str(s.get("path")): s for s in shards if isinstance(s, dict)})
        relative = posixpath.relpath(path, root)
        read.setdefault(root, set()).add(relative)
        found = problems.setdefault(root, {"not listed": [], "missing": [], "differing": []})
        entry = entries.get(relative)
        if entry is None:
            found["not listed"].append(relative)
        elif "rows" in entry and int(entry["rows"]) != rows:
            found["differing"].append(f"{relative} ({rows} rows, the manifest says {entry['rows']})")
        elif "bytes" in entry and int(entry["bytes"]) != fs.size(path):
            found["differing"].append(f"{relative} ({fs.size(path)} bytes, the manifest says {entry['bytes']})")
    for root, entries in listed.items():
        for folder in folders:
            if folder != root and not folder.startswith(root.rstrip("/") + "/"):
                continue
            under = posixpath.relpath(folder, root)
            for relative in entries:
                if (under == "." or relative.startswith(under + "/")) and relative not in read[root]:
                    problems[root]["missing"].append(relative)
    for root, found in problems.items():
        said = [f"{kind}: {_named(sorted(set(paths)))}" for kind, paths in found.items() if paths]
        if said:
            raise ConfigError(
                f"--shards: the files differ from the shards listed in {posixpath.join(root, 'manifest.json')} ("
                + "; ".join(said) + "); copy the run again, or give the listed files as a glob"
            )
