"""The recorded form of an input URI: userinfo and credential query parameters removed.

An input is opened with the URI as given — fsspec hands ``https://user:pass@host/…``, a pre-signed
``?X-Amz-Signature=…`` or an Azure ``?sig=…`` on to its backend — but every URI written to an output
(manifest inputs and config, task markers, ``source.uri`` of trajectories, raw and quarantine rows) is
this form (`recorded_uri`: also redacted like any text), so no credential outlives the read::

    https://deploy:hunter2@example.com/logs/a.jsonl?X-Amz-Signature=ab12&part=1
    → https://example.com/logs/a.jsonl?part=1

Chained fsspec URLs (``zip://member::https://user:pw@host/a.zip``) are stripped link by link; a local
path is returned as it is.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

from stages.redact import redact_text

# A query parameter whose name says it carries a credential (case-insensitive, anywhere in the name):
# signatures of pre-signed S3/GCS/Azure URLs, tokens, keys, passwords, session and client secrets.
_CREDENTIAL_PARAM = re.compile(
    r"signature|^sig$|credential|token|secret|passw|^pwd$|^pass$|key|^auth|session|accessid|^code$",
    re.IGNORECASE,
)
_AUTHORITY = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<authority>[^/?#]*)")


def _strip_link(uri: str) -> str:
    m = _AUTHORITY.match(uri)
    if m is None:
        return uri
    authority = m.group("authority")
    host = authority.rpartition("@")[2]
    rest = uri[m.end():]
    path, hash_mark, fragment = rest.partition("#")
    path, question, query = path.partition("?")
    if question:
        kept = [p for p in query.split("&") if p and not _CREDENTIAL_PARAM.search(_param_name(p))]
        query = "&".join(kept)
        question = "?" if kept else ""
    return f"{m.group('scheme')}{host}{path}{question}{query}{hash_mark}{fragment}"


def _param_name(pair: str) -> str:
    return unquote_plus(pair.partition("=")[0])


def recorded_uri(uri: str) -> str:
    """The form of `uri` written to outputs: credentials stripped, and any secret in its path redacted."""
    return redact_text(strip_uri_credentials(uri))[0]


def strip_uri_credentials(uri: str) -> str:
    """`uri` without userinfo (``user:pass@``) and without query parameters that carry credentials."""
    if "://" not in uri:
        return uri
    return "::".join(_strip_link(link) for link in uri.split("::"))
