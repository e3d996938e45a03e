"""The disk cache of `stages.llm.client.ChatClient`: one small JSON file per request, on any fsspec URL.

Layout under the cache folder (the client decides the keys, sha256 hex digests):

- ``<key[:2]>/<key>.json`` — an answer: ``{"choices": [{"message": {…}}], "usage": {…}}``, the shape of a chat
  completion, so it is read back as one;
- ``refused/<key[:2]>/<key>.json`` — a refusal: ``{"refused": {"error": "HTTP 400: …"}}``, a request the server
  refuses as it would every time it is sent (a prompt over the model's context). Kept in a folder of its own so
  that removing it asks every refused request again.

A file is written whole (a temporary file, then a move), so a reader never sees half of one; a torn or
unreadable file reads as missing and is asked again and overwritten.
"""

from __future__ import annotations

import json
import posixpath
import random
import threading
from typing import Any

REFUSED = "refused"  # the folder of the refusals


class AnswerCache:
    """Read and write the cache files of one folder (`root`: a path or any fsspec URL)."""

    def __init__(self, root: str) -> None:
        import fsspec

        self.fs, self.root = fsspec.core.url_to_fs(root)
        self.fs.makedirs(self.root, exist_ok=True)

    def path(self, key: str, folder: str = "") -> str:
        return posixpath.join(self.root, folder, key[:2], f"{key}.json")

    def read(self, key: str, folder: str = "") -> dict[str, Any] | None:
        """The file of `key` (under `folder`), or None where there is none or it cannot be read."""
        try:
            with self.fs.open(self.path(key, folder), "rb") as f:
                found = json.loads(f.read().decode("utf-8"))
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None  # a torn entry is re-asked and overwritten
        return found if isinstance(found, dict) else None

    def write(self, key: str, payload: dict[str, Any], folder: str = "") -> None:
        path = self.path(key, folder)
        self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{threading.get_ident()}-{random.getrandbits(32):08x}"
        try:
            blob = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (escaped in the server's JSON) is kept as its escape
            blob = json.dumps(payload).encode("ascii")
        with self.fs.open(tmp, "wb") as f:
            f.write(blob)
        self.fs.mv(tmp, path)
