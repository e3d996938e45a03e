"""``lwm run --help`` shows the defaults of the flags that have no click default (a config file's value holds where
the flag is not given), and they are what a run without the flag does."""

from __future__ import annotations

import json
import re

import pyarrow.parquet as pq

from tests.helpers import lwm_in_process

FLAGS = {"--chat-format": ("render", "chat_format"), "--keep-mode": ("masking", "keep_mode"),
         "--sft-turns": ("pools", "sft_turns"), "--progress": ("executor", "progress"),
         "--source-kind": ("run", "source_kind")}


def _shown_defaults() -> dict[str, str]:
    proc = lwm_in_process("run", "--help")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())  # click wraps the help column
    shown = {}
    for flag in FLAGS:
        found = re.search(re.escape(flag) + r" .*?\[default: ([^\]]+)\]", text)
        assert found and "--" not in found.group(0)[len(flag):], (flag, text)  # within the flag's own help
        shown[flag] = found.group(1)
    return shown


def test_the_defaults_help_shows_are_what_a_run_without_the_flags_does(tmp_path):
    shown = _shown_defaults()
    assert shown == {"--chat-format": "chatml", "--keep-mode": "weight", "--sft-turns": "1", "--progress": "auto",
                     "--source-kind": "a record's own source.kind, else public"}
    record = {"domain": "terminal", "system": {"task_description": "list the files", "action_space": "keys"},
              "turns": [{"action": f'[{{"keystrokes": "ls dir{j}\\n"}}]', "observation": f"file{j}.txt"}
                        for j in range(3)]}
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text(
        json.dumps({**record, "traj_id": "own-kind", "source": {"kind": "sandbox"}}) + "\n"
        + json.dumps({**record, "traj_id": "no-kind", "split_key": "other"}) + "\n")
    proc = lwm_in_process("run", "--executor", "local", "-i", str(tmp_path / "in"), "-o", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    config = json.loads((tmp_path / "out" / "manifest.json").read_text())["config"]
    for flag, (section, key) in FLAGS.items():
        if flag not in ("--progress", "--source-kind"):  # how a run executes is no part of the manifest's config,
            # and a kind not given is recorded as not given (""): the records' own, else public, as checked below
            assert str(config[section][key]) == shown[flag], flag
    kinds = {row["traj_id"]: row["source"]["kind"] for part in (tmp_path / "out" / "trajectories").glob("*.parquet")
             for row in pq.read_table(part, columns=["traj_id", "source"]).to_pylist()}
    assert config["run"]["source_kind"] == ""
    assert kinds == {"no-kind": "public", "own-kind": "sandbox"}  # a record's own kind is kept, as the help says
