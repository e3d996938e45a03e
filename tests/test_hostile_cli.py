"""Command-line paths that crashed: ``--chat-format plain`` with an rl pool, and ``lwm show`` with a
sample id or index that is not there (a one-line error and exit 2, every time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stages.tokenizer import load_tokenizer
from tests.helpers import lwm_in_process

SPECIAL = {248044, 248045, 248046}


def lwm_at_once(runs: list[tuple[str, ...]]) -> list[tuple[int, str]]:
    """(exit status, stderr) of one `lwm` process per argument list, started side by side."""
    procs = [subprocess.Popen([sys.executable, "-m", "pipeline.cli", *args], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for args in runs]
    return [(proc.returncode, err) for proc in procs for _, err in [proc.communicate(timeout=600)]]


def traj(i: int) -> dict:
    return {"traj_id": f"t{i}", "domain": "terminal", "split_key": f"task-{i}",
            "system": {"task_description": f"task {i}", "action_space": "keys"},
            "turns": [{"action": f'[{{"keystrokes": "echo {i}-{j}\\n"}}]', "observation": f"{i}-{j} out"}
                      for j in range(3)]}


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("plain")
    src = base / "in"
    src.mkdir()
    (src / "a.jsonl").write_text("".join(json.dumps(traj(i)) + "\n" for i in range(40)))
    cfg = base / "cfg.toml"
    cfg.write_text('[pools.ratios]\ncpt = 0.25\nsft = 0.25\nrl = 0.25\neval = 0.25\n')
    out = base / "out"
    # in this process: the shards are what is checked
    proc = lwm_in_process("run", "--executor", "local", "-i", str(src), "-o", str(out), "--config", str(cfg),
                          "--chat-format", "plain")
    assert proc.returncode == 0, proc.stderr
    return out


def test_plain_chat_format_with_an_rl_pool(plain_run):
    rl = [r for p in sorted((plain_run / "shards" / "rl").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    assert len(rl) >= 3
    tok = load_tokenizer()
    for row in rl:
        assert not SPECIAL & set(row["prompt_ids"])
        text = tok.decode(row["prompt_ids"])
        t = row["turn_idx"]
        # system, the history, then the target prompt, in the plain rendering
        assert text.endswith("</predicted_observation>.\n\n")
        assert f"### Turn {t}\n**Action:**" in text or (t == 1 and "### Turn 1\n" in text)
        assert text.count("**Environment Observation:**\n") == t - 1


def test_show_reports_a_missing_sample_in_one_line_every_time(plain_run):
    # Each lookup is its own process (an abort at interpreter exit is what is ruled out), four of each;
    # the four of one lookup run side by side, as their cost is the start-up imports.
    for args in (["--sample", "nope"], ["--index", "999999"], ["--index", "-1"], ["--sample", "nope", "--pool", "rl"]):
        for returncode, stderr in lwm_at_once([("show", str(plain_run), *args)] * 4):
            assert returncode == 2, (args, returncode, stderr[-300:])
            assert stderr.count("\n") == 1 and stderr.startswith("lwm: error: "), stderr


def test_show_names_what_it_could_not_find(plain_run, tmp_path):
    def error(*args):
        proc = lwm_in_process("show", *args)
        assert proc.returncode == 2, proc.stderr
        return proc.stderr.strip().removeprefix("lwm: error: ")

    total = sum(pq.ParquetFile(p).metadata.num_rows for p in (plain_run / "shards").rglob("*.parquet"))
    assert error(str(plain_run), "--index", "999999") == (
        f"no sample at index 999999 in {plain_run}, which holds {total} (indexes 0 to {total - 1})")
    assert error(str(plain_run), "--sample", "nope", "--pool", "rl") == f"no sample id nope in the rl pool of {plain_run}"
    assert error(str(plain_run), "--sample", "nope", "--index", "0") == "give --sample ID or --index N, not both"
    # a pool without samples says so, whatever the index
    empty = tmp_path / "run"
    (empty / "shards" / "sft").mkdir(parents=True)
    (empty / "_SUCCESS").write_text("")
    manifest = json.loads((plain_run / "manifest.json").read_text())
    (empty / "manifest.json").write_text(json.dumps({**manifest, "shards": []}))  # a run that wrote no shard
    assert error(str(empty), "--pool", "eval") == f"the eval pool of {empty} holds no samples (no shard files)"


def test_show_finds_rows_by_index_and_id(plain_run):
    # the lookups themselves, not the process, are checked here: `lwm show` in this process
    proc = lwm_in_process("show", str(plain_run), "--index", "0", "--plain")
    assert proc.returncode == 0, proc.stderr
    sid = proc.stdout.split()[1]
    again = lwm_in_process("show", str(plain_run), "--sample", sid, "--plain")
    assert again.returncode == 0 and again.stdout == proc.stdout


@pytest.mark.parametrize("engine", ["tiktoken", "tokenizers"])
def test_show_keeps_characters_split_over_tokens_whole(engine):
    from pipeline.cli.show import token_texts

    tok = load_tokenizer(None, engine)
    text = "box ━━━ 漢字 🎉🎉 done"
    ids = list(tok.encode(text))
    naive = [tok.decode([i]) for i in ids]
    assert any("\ufffd" in t for t in naive)  # the case: some characters' bytes are split over tokens
    texts = token_texts(tok, ids)
    assert len(texts) == len(ids) and "".join(texts) == text
    assert not any("\ufffd" in t for t in texts)


def test_show_into_a_closed_pipe_ends_quietly(plain_run):
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "show", str(plain_run), "--index", "0", "--plain"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # as `| head` does once it has its lines; the command has not written yet
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141, err
    assert "error" not in err and "Traceback" not in err and "Exception ignored" not in err


@pytest.mark.parametrize("command", ["show", "hist", "export agentworldbench", "export verl"])
def test_show_hist_and_export_of_a_folder_that_is_no_finished_run_say_so(command, tmp_path):
    extra = [str(tmp_path / "x_test.jsonl")] if command.startswith("export") else []
    (tmp_path / "empty").mkdir()
    proc = lwm_in_process(*command.split(), str(tmp_path / "empty"), *extra)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"lwm: error: {tmp_path / 'empty'}: not a finished run (no _SUCCESS); run `lwm run` to completion first"]
    proc = lwm_in_process(*command.split(), str(tmp_path / "nothing"), *extra)  # a typo: nothing is there
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"lwm: error: {tmp_path / 'nothing'}: does not exist; give the output folder of a finished `lwm run`"]


@pytest.mark.parametrize("command", ["run", "export verl", "export trl"])
def test_an_output_folder_that_is_a_file_is_named_a_file(plain_run, tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("mine\n")
    for out, said in (("afile", "it is a file, not a folder"), ("afile/sub", f"{tmp_path / 'afile'} is a file, not a folder")):
        args = ["run", "--executor", "local", "-i", str(plain_run.parent / "in"), "-o", out] if command == "run" else \
            [*command.split(), str(plain_run), out]
        proc = lwm_in_process(*args)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines()[-1] == f"lwm: error: output not writable: {tmp_path / out} ({said})"
    assert (tmp_path / "afile").read_text() == "mine\n"


@pytest.mark.parametrize(("command", "what"), [("export agentworldbench", "file name is empty ('{}'); give the file to "
                                                "write, e.g. DIR/lwm_test.jsonl"),
                                               ("export verl", "folder name is empty ('{}'); give the folder to write "
                                                "train.parquet into"),
                                               ("export trl", "folder name is empty ('{}'); give the folder to write "
                                                "train.parquet into")])
def test_an_empty_export_path_is_refused_as_such(plain_run, tmp_path, monkeypatch, command, what):
    monkeypatch.chdir(tmp_path)  # an empty path names the folder lwm runs in: nothing may land there
    for out in ("", "  "):
        proc = lwm_in_process(*command.split(), str(plain_run), out)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines() == [f"lwm: error: the output {what.format(out)}"]
    assert list(tmp_path.iterdir()) == []


def test_hist_of_a_run_without_samples_says_so(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    one_turn = {**traj(0), "turns": traj(0)["turns"][:1]}  # fewer than 2 turns: filtered, nothing is sampled
    (src / "a.jsonl").write_text(json.dumps(one_turn) + "\n")
    out = tmp_path / "out"
    assert lwm_in_process("run", "--executor", "local", "-i", str(src), "-o", str(out)).returncode == 0
    proc = lwm_in_process("hist", str(out))
    assert proc.returncode == 0
    assert f"{out}: no samples in the shards, so no turns to count (the run summary says where they went)" in proc.stderr


def test_a_broken_pipe_that_is_not_stdout_is_an_error_not_a_quiet_end():
    import click
    from click.testing import CliRunner

    from pipeline.errors import handle_errors

    @click.group()
    @click.option("--debug", is_flag=True)
    def group(debug):
        pass

    @group.command()
    @handle_errors
    def talk():
        raise BrokenPipeError(32, "Broken pipe")  # a worker's or an endpoint's pipe; stdout is open

    result = CliRunner().invoke(group, ["talk"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "lwm: error: Broken pipe"
    debug = CliRunner().invoke(group, ["--debug", "talk"])  # re-raised for the traceback (click ends it with 1)
    assert debug.exit_code == 1 and "lwm: error" not in debug.stderr


def test_reading_a_run_whose_shard_is_gone_or_cut_is_one_line(plain_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(plain_run, run)
    shard = sorted((run / "shards" / "cpt").glob("*.parquet"))[0]
    rel = shard.relative_to(run)
    shard.write_bytes(shard.read_bytes()[:100])
    for command in (["hist", str(run)], ["show", str(run), "--index", "0"],
                    ["export", "agentworldbench", str(run), str(tmp_path / "x_test.jsonl")]):
        proc = lwm_in_process(*command)
        assert proc.returncode == 2, (command, proc.stderr)
        assert proc.stderr.strip() == (f"lwm: error: {run}: shard {rel} has 100 bytes, not the "
                                       f"{(plain_run / rel).stat().st_size} the manifest lists; run the same "
                                       "`lwm run` again to rebuild it")
    shard.unlink()
    proc = lwm_in_process("hist", str(run))
    assert proc.returncode == 2 and f"shard {rel} is missing" in proc.stderr


def test_reading_a_run_whose_manifest_is_broken_or_gone_is_one_line_naming_it(plain_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(plain_run, run)
    (run / "manifest.json").write_text("{")
    commands = (["hist", str(run)], ["show", str(run), "--index", "0"],
                ["export", "agentworldbench", str(run), str(tmp_path / "x_test.jsonl")])
    for command in commands:
        proc = lwm_in_process(*command)
        assert proc.returncode == 2, (command, proc.stderr)
        line = proc.stderr.strip()
        assert line.startswith(f"lwm: error: {run}: manifest.json cannot be read (") and "\n" not in line, line
        assert line.endswith("run the same `lwm run` again to rebuild it"), line
    (run / "manifest.json").unlink()
    proc = lwm_in_process("show", str(run), "--index", "0")
    assert proc.returncode == 2 and f"{run}: manifest.json is missing;" in proc.stderr, proc.stderr


def test_show_writes_the_datas_control_characters_as_escapes_and_colors_only_when_asked(tmp_path):
    """A logged terminal title sequence (OSC), a clear-screen and a carriage return must neither act on the
    terminal that reads `lwm show` nor vanish from the sample shown: they are written as ``\\x1b``, ``\\r``.
    Where stdout is no terminal (here), the weights are marked in text unless --color asks for colors."""
    record = {"traj_id": "esc", "domain": "search", "split_key": "esc",
              "system": {"task_description": "read a log", "action_space": "tools"},
              "turns": [{"action": '{"name": "tail", "arguments": {}}',
                         "observation": "\x1b]0;PWNED\x07\x1b[2J\x1b[31mRED\x1b[0m then\rover written"}] * 2}
    (tmp_path / "a.jsonl").write_text(json.dumps(record) + "\n")
    out = tmp_path / "out"
    cfg = tmp_path / "cpt.toml"
    cfg.write_text("[pools.ratios]\ncpt = 1.0\nsft = 0.0\nrl = 0.0\neval = 0.0\n")
    proc = lwm_in_process("run", "--executor", "local", "--progress", "off", "--config", str(cfg),
                          "-i", str(tmp_path / "a.jsonl"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    shown = lwm_in_process("show", str(out), "--index", "0").stdout
    body = shown.split("observations:", 1)[1]
    assert "\x1b" not in shown and "\r" not in shown and "\x07" not in shown
    assert "\\x1b]0;PWNED\\x07\\x1b[2J\\x1b[31mRED\\x1b[0m then\\rover written" in body.replace("⟦w=1⟧", "")
    assert "⟦w=" in body and "⟪" not in shown  # marks, not colors; no legend for spelled special tokens
    colored = lwm_in_process("show", str(out), "--index", "0", "--color").stdout
    assert "\x1b[90m" in colored and "\x1b]" not in colored and "\r" not in colored
    both = lwm_in_process("show", str(out), "--index", "0", "--color", "--plain")
    assert both.returncode == 2 and "give --plain or --color, not both" in both.stderr


def test_a_second_ctrl_c_while_workers_stop_is_held_until_they_have_stopped():
    """Ctrl-C twice under a local Ray: the second one cut Ray's shutdown short, so the run ended with click's
    status 1 and left Ray's agents running. During the stop (`signals_held`) a signal waits for the block to end;
    once the command is ending on one, more are ignored, and its status stays 130 (143 for SIGTERM)."""
    import os
    import signal
    import time

    import click
    from click.testing import CliRunner

    from pipeline.errors import Terminated, handle_errors, signals_held

    for sig, raised in ((signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)):
        before = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(Terminated()))
        finished = []
        try:
            with pytest.raises(raised), signals_held():
                os.kill(os.getpid(), sig)
                time.sleep(0.05)  # Python runs the handler here: held, not raised
                finished.append(True)
            assert finished == [True]
        finally:
            signal.signal(signal.SIGTERM, before)

    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)  # `nohup lwm run …`: Ctrl-C stays ignored
    try:
        with signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
    finally:
        signal.signal(signal.SIGINT, ignored)

    @click.command()
    @handle_errors
    def stopping():
        try:
            raise KeyboardInterrupt
        finally:
            with signals_held():
                os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, while the workers stop
                time.sleep(0.05)

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        result = CliRunner().invoke(stopping, [])
        assert result.exit_code == 130 and result.stderr.strip() == "lwm: interrupted"
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # a third one cannot cut the exit short either
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
