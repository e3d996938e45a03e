"""Hostile configuration and environment: every probe ends as one `lwm: error:` line naming what is wrong, exit 2.

Values of the wrong type or range (in a config file or on the command line), unknown keys, an unreachable input
URL, a read-only export target, a full disk and a ``manifest.json`` that is a directory. A full disk is also
re-run after space was freed: the output is then byte-identical to a clean run.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import pipeline.outputs
from pipeline.cli import main
from tests.helpers import assert_same_outputs, write_corpus

ROOT = Path(__file__).resolve().parent.parent


def _lwm(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def _one_error_line(stderr: str) -> str:
    """The error line; fails unless it is the only `lwm: error:` line and no traceback was printed."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("lwm: error: ")]
    assert len(errors) == 1, stderr
    return errors[0].removeprefix("lwm: error: ")


def _invoke(args: list[str]):
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.stderr


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("hostile") / "in", files=3, per_file=12)


# (TOML text of a config file, the key the error line must name first, a word of the reason)
FILE_PROBES = [
    ('[ingest]\nsplit_bytes = "big"', "ingest.split_bytes", "integer"),
    ("[shards]\nmax_rows = 0", "shards.max_rows", "≥ 1"),
    ('[pools]\ncontext_limit = "x"', "pools.context_limit", "integer"),
    ("[pools]\ncontext_limit = -1", "pools.context_limit", "≥ 1"),
    ("[dedup]\nbands = -1", "dedup.bands", "≥ 0"),
    ("[run]\nmax_quarantine_rate = true", "run.max_quarantine_rate", "number"),
    ("[ingest]\nsplitbytes = 1024", "unknown config key 'ingest.splitbytes'", ""),
    ('[ingest.options]\nmax_record_bytes = "abc"', "ingest.options.max_record_bytes", "integer"),
    ("[dedup]\nthreshold = 1.5", "dedup.threshold", "≤ 1"),
    ('[tokenizer]\nengine = "fast"', "tokenizer.engine", "one of"),
    ("[filter]\nmin_turns = 2.5", "filter.min_turns", "integer"),
    ("[templates]\nmapping = {cpt = []}", "templates.mapping.cpt", "at least 1 item"),  # a pool needs a template
    ('[ingest.options]\norphanz = "skip"', "ingest.options.orphanz", "not an option of any input format"),
    ('[ingest.options]\norphans = "maybe"', "ingest.options.orphans", "'quarantine' or 'skip'"),
    ('[run]\nformat = "swe-agent"\n[ingest.options]\norphans = "skip"', "ingest.options.orphans",
     "not an option of format swe-agent"),
    # the model-in-the-loop section: loss weights, request settings, the judge's scale, pool names, the endpoint
    ("[llm]\nreasoning_weight = -5.0", "llm.reasoning_weight", "≥ 0"),
    ("[llm]\nreasoning_weight = nan", "llm.reasoning_weight", "finite number"),
    ("[llm]\nwmat_world_model_weight = -1", "llm.wmat_world_model_weight", "≥ 0"),
    ("[llm]\nwmat_policy_weight = inf", "llm.wmat_policy_weight", "finite number"),
    ("[llm]\nwmat_observation_weight = true", "llm.wmat_observation_weight", "finite number"),
    ("[llm]\nmax_retries = -1", "llm.max_retries", "≥ 0"),
    ("[llm]\ntimeout_s = 0", "llm.timeout_s", "> 0"),
    ('[llm]\nconcurrency = "x"', "llm.concurrency", "integer"),
    ("[llm]\nconcurrency = 0", "llm.concurrency", "≥ 1"),
    ('[llm]\ntemperature = "hot"', "llm.temperature", "number"),
    ("[llm]\nthreshold = 99", "llm.threshold", "from 0 to 25"),
    ('[llm]\ninstruction_pools = ["SFT"]', "llm.instruction_pools", "one of 'cpt', 'sft', 'rl' or 'eval'"),
    ('[llm]\nwmat_pools = "cpt"', "llm.wmat_pools", "list"),
    ("[llm]\ncandidates = true", "llm.candidates", "integer"),
    ("[llm]\njudge_max_tokens = 0", "llm.judge_max_tokens", "≥ 1"),
    ('[llm]\njudge_max_tokens = "lots"', "llm.judge_max_tokens", "integer"),
    ("[llm]\nmax_requests = true", "llm.max_requests", "integer"),
    ('[llm]\nendpoint = "localhost:8000/v1"\nmodel = "m"', "llm.endpoint", "http:// or https://"),
    ('[llm]\njudge_endpoint = "ftp://judge/v1"', "llm.judge_endpoint", "http:// or https://"),
    ("[llm]\nunknown_knob = 1", "unknown config key 'llm.unknown_knob'", ""),
    # the masking table: a file's name or a table given inline, each checked whole, as it is a file's
    ('[masking]\ntable = {short_chars = "x"}', "masking.table", "no 'categories': a table is given whole"),
    ('[masking]\ntable = "missing.toml"', "masking.table", "missing.toml: masking table file not found"),
    ("[masking]\ntable = 5", "masking.table", 'the path of a table file (a string, such as "my_table.toml") or a table'),
    ("masking = 5", "masking", "must be a table"),
    ('[llm]\nstages = ["instructons"]', "llm.stages", "unknown stage 'instructons'"),
]


@pytest.mark.parametrize(("toml", "key", "reason"), FILE_PROBES, ids=[p[1] for p in FILE_PROBES])
def test_a_bad_config_file_value_is_one_line_naming_its_key(toml, key, reason, tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(toml + "\n")
    status, stderr = _invoke(["run", "-i", "x", "-o", str(tmp_path / "out"), "--config", str(cfg), "--dry-run"])
    line = _one_error_line(stderr)
    assert status == 2
    assert line.startswith(f"{cfg}: {key}"), line  # the file, then its key: no flag was given
    assert "(--" not in line, line
    assert reason in line


FLAG_PROBES = [
    (["--opt", "max_record_bytes=abc"], "ingest.options.max_record_bytes (--opt)", "'abc'"),
    (["--sft-turns", "abc"], "pools.sft_turns (--sft-turns)", "'abc'"),
    (["--sft-turns", "0"], "pools.sft_turns (--sft-turns)", "0"),
    (["--num-cpus", "-1"], "executor.num_cpus (--num-cpus)", "-1"),
    (["--max-quarantine-rate", "1.5"], "run.max_quarantine_rate (--max-quarantine-rate)", "1.5"),
    (["--opt", "source_kind=vendor"], "ingest.options.source_kind (--opt)", "'vendor'"),
    (["--opt", "orphans=maybe"], "ingest.options.orphans (--opt)", "'maybe'"),
    (["--opt", "messages_path=5"], "ingest.options.messages_path (--opt)", "5"),
    (["--format", "sharegpt", "--opt", "orphans=keep"], "ingest.options.orphans (--opt)", "'keep'"),
    (["--format", "swe-agent", "--opt", "messages_column=traj"], "ingest.options.messages_column (--opt)",
     "source_kind"),  # what the format has
    (["--llm-endpoint", "localhost:8000/v1", "--llm-model", "m"], "llm.endpoint (--llm-endpoint)",
     "'localhost:8000/v1'"),
]


@pytest.mark.parametrize(("flags", "key", "value"), FLAG_PROBES, ids=[" ".join(p[0]) for p in FLAG_PROBES])
def test_a_bad_flag_value_is_one_line_naming_key_and_flag(flags, key, value, tmp_path):
    status, stderr = _invoke(["run", "-i", "x", "-o", str(tmp_path / "out"), *flags, "--dry-run"])
    line = _one_error_line(stderr)
    assert status == 2
    assert line.startswith(key), line
    assert line.endswith(value), line


def test_a_bad_flag_through_the_installed_command_is_one_line(tmp_path):
    proc = _lwm("run", "-i", "x", "-o", str(tmp_path / "out"), "--sft-turns", "abc", "--num-cpus", "2", "--dry-run")
    assert proc.returncode == 2
    assert _one_error_line(proc.stderr) == "pools.sft_turns (--sft-turns): must be a positive integer or \"all\", not 'abc'"


@pytest.mark.parametrize(("toml", "key", "secret"), [
    ('api_key_env = "sk-live-4f9a8b7c6d5e4f3a2b1c"', "llm.api_key_env", "sk-live-4f9a8b7c6d5e4f3a2b1c"),
    ('api_key_env = "4f9a8b7c6d5e4f3a2b1c0d9e"', "llm.api_key_env", "4f9a8b7c6d5e4f3a2b1c0d9e"),
    ('endpoint = "http://user:hunter2pw@127.0.0.1:8000/v1"\nmodel = "m"', "llm.endpoint", "hunter2pw"),
], ids=["a pasted key", "a key without a prefix", "a password in the endpoint"])
def test_a_credential_in_the_llm_section_is_refused_without_repeating_it(toml, key, secret, tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(f"[llm]\n{toml}\n")
    status, stderr = _invoke(["run", "-i", "x", "-o", str(tmp_path / "out"), "--config", str(cfg), "--dry-run"])
    line = _one_error_line(stderr)
    assert status == 2
    assert line.startswith(f"{cfg}: {key}: "), line
    assert secret not in stderr


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "MY_PROVIDER_KEY_2", "HF_TOKEN", ""])
def test_an_environment_variable_name_or_none_is_a_valid_api_key_env(name):
    from pipeline.config import resolve

    assert resolve({"llm": {"api_key_env": name}})["llm"]["api_key_env"] == name


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens on it once the socket is closed


def test_an_unreachable_input_url_is_one_line_naming_the_input(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/logs/a.jsonl"
    status, stderr = _invoke(["run", "-i", url, "-o", str(tmp_path / "out"), "--executor", "local", "--progress", "off"])
    line = _one_error_line(stderr)
    assert status == 2
    assert line.startswith(f"run.input (--input): cannot read {url}: "), line


def test_a_manifest_json_directory_fails_at_once_with_one_line(corpus, tmp_path):
    out = tmp_path / "out"
    (out / "manifest.json").mkdir(parents=True)
    status, stderr = _invoke(["run", "-i", str(corpus), "-o", str(out), "--executor", "local", "--progress", "off"])
    assert status == 2
    assert _one_error_line(stderr) == f"{out}/manifest.json is a directory; remove it or choose another --out"
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"]  # no stage ran before the check


def _fail_shard_commits(monkeypatch) -> None:
    """Make every commit under shards/ fail as a full disk does (the shard stage runs last)."""
    commit = pipeline.outputs._commit

    def full(fs, tmp, path):
        if "/shards/" in path:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        commit(fs, tmp, path)

    monkeypatch.setattr(pipeline.outputs, "_commit", full)


def test_a_full_disk_is_one_line_and_the_rerun_is_byte_identical(corpus, tmp_path, monkeypatch):
    args = ["run", "-i", str(corpus), "--executor", "local", "--progress", "off"]
    assert _invoke([*args, "-o", str(tmp_path / "clean")])[0] == 0
    with monkeypatch.context() as mp:
        _fail_shard_commits(mp)
        status, stderr = _invoke([*args, "-o", str(tmp_path / "out")])
    assert status == 2
    assert _one_error_line(stderr) == (f"no space left on device writing {tmp_path / 'out'}; free space and run the "
                                       "same command again (finished tasks are kept)")
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    status, _ = _invoke([*args, "-o", str(tmp_path / "out")])
    assert status == 0
    assert_same_outputs(tmp_path / "clean", tmp_path / "out")


def _mount_tmpfs(path: Path, options: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True).returncode == 0


def test_a_real_full_disk_under_ray_is_one_line_and_the_rerun_is_byte_identical(corpus, tmp_path):
    """A 200 KiB tmpfs as output (needs the right to mount; skipped otherwise), then grown to 64 MiB.

    Both runs are drivers of one local Ray instance started here (the executor is named: on an input this
    small the default one would stay in-process): the one that meets the full disk is an `lwm` process, the
    rerun runs in this process."""
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "size=200k"):
        pytest.skip("cannot mount a tmpfs here")
    ray = pytest.importorskip("ray")
    try:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
        address = ray.get_runtime_context().gcs_address
        args = ["run", "-i", str(corpus), "--executor", "ray", "--ray-address", address, "--progress", "off"]
        proc = _lwm(*args, "-o", str(disk / "out"))
        assert proc.returncode == 2, proc.stderr
        assert _one_error_line(proc.stderr).startswith(f"no space left on device writing {disk / 'out'}")
        assert "Token authentication" not in proc.stderr
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        assert _invoke([*args, "-o", str(disk / "out")])[0] == 0  # the rerun: a driver in this process
        clean = ["run", "-i", str(corpus), "--executor", "local", "--progress", "off", "-o", str(tmp_path / "clean")]
        assert _invoke(clean)[0] == 0  # in-process
        assert_same_outputs(tmp_path / "clean", disk / "out")
    finally:
        ray.shutdown()
        subprocess.run(["umount", str(disk)], capture_output=True)


def test_a_read_only_export_target_is_one_line(corpus, tmp_path):
    run = tmp_path / "run"
    status, stderr = _invoke(["run", "-i", str(corpus), "-o", str(run), "--executor", "local", "--progress", "off"])
    assert status == 0, stderr
    target = tmp_path / "ro"
    if os.geteuid() != 0:
        target.mkdir()
        target.chmod(0o555)
    elif not _mount_tmpfs(target, "ro,size=64k"):
        pytest.skip("running as root without the right to mount: no read-only directory to write into")
    try:
        status, stderr = _invoke(["export", "agentworldbench", str(run), str(target / "bench.jsonl")])
        line = _one_error_line(stderr)
        assert status == 2
        assert line.endswith(f": {target / 'bench.jsonl'}"), line  # the file asked for, not its temporary name
        assert "Read-only file system" in line or "Permission denied" in line
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(target)], capture_output=True)



def test_validate_checks_adapter_options_as_run_does(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text('{"traj_id": "a", "domain": "mcp", "turns": []}\n')
    status, stderr = _invoke(["validate", str(src), "--opt", "max_record_bytes=abc"])
    assert status == 2
    assert _one_error_line(stderr) == "ingest.options.max_record_bytes (--opt): must be an integer, not 'abc'"


def test_debug_shows_the_error_itself_instead_of_one_line(tmp_path):
    from schemas.errors import ConfigError

    result = CliRunner().invoke(main, ["--debug", "run", "-i", "x", "-o", str(tmp_path), "--sft-turns", "abc", "--dry-run"])
    assert isinstance(result.exception, ConfigError)
    assert "lwm: error:" not in result.stderr


@pytest.fixture
def mixed_input(tmp_path) -> Path:
    """An openai-messages file with an orphan tool result (the option `orphans` applies) and a SWE-agent
    trajectory (its adapter has no `orphans`): one input of two sniffed formats."""
    fixtures = ROOT / "tests" / "fixtures"
    src = tmp_path / "in"
    src.mkdir()
    (src / "orphan.jsonl").write_bytes((fixtures / "openai-messages" / "orphan.jsonl").read_bytes())
    (src / "run.traj").write_bytes((fixtures / "swe-agent" / "thought_action_1x.traj").read_bytes())
    return src


def test_an_option_of_some_sniffed_formats_applies_to_those(mixed_input, tmp_path):
    out = tmp_path / "out"
    status, stderr = _invoke(["run", "--executor", "local", "--progress", "off", "-i", str(mixed_input),
                              "-o", str(out), "--opt", "orphans=skip", "--max-quarantine-rate", "0"])
    assert status == 0, stderr
    manifest = json.loads((out / "manifest.json").read_text())
    # without the option, the orphan result quarantines its chat (and the run fails at rate 0)
    assert manifest["counts"]["records"] == {"read": 2, "normalized": 2}
    assert {e["format"] for e in manifest["inputs"]} == {"openai-messages", "swe-agent"}

    status, stderr = _invoke(["validate", str(mixed_input), "--opt", "orphans=skip", "--json"])
    assert status == 0, stderr


def test_an_option_no_format_has_is_one_line_before_anything_is_read(mixed_input, tmp_path):
    out = tmp_path / "out"
    for command in (["run", "--executor", "local", "-o", str(out)], ["run", "-o", str(out), "--dry-run"],
                    ["validate"]):
        args = [*command, *(["-i"] if command[0] == "run" else []), str(mixed_input), "--opt", "orphan=skip"]
        status, stderr = _invoke(args)
        assert status == 2
        line = _one_error_line(stderr)
        assert line.startswith("ingest.options.orphan (--opt): is not an option of any input format; options: "), line
        assert "orphans" in line  # the options there are
        assert not out.exists()


def test_an_option_of_other_formats_than_the_sniffed_ones_is_one_line_naming_them(tmp_path):
    fixtures = ROOT / "tests" / "fixtures"
    src = tmp_path / "in"
    src.mkdir()
    (src / "run.traj").write_bytes((fixtures / "swe-agent" / "thought_action_1x.traj").read_bytes())
    (src / "mini.traj.json").write_bytes((fixtures / "mini-swe-agent" / "acme__sizes-7.traj.json").read_bytes())
    for command in (["run", "--executor", "local", "-o", str(tmp_path / "out")], ["validate"]):
        args = [*command, *(["-i"] if command[0] == "run" else []), str(src), "--opt", "orphans=skip"]
        status, stderr = _invoke(args)
        assert status == 2
        line = _one_error_line(stderr)
        assert line.startswith("no format of this input (mini-swe-agent, swe-agent) has option orphans;"), line


def test_an_option_the_sniffed_format_lacks_leaves_the_output_folder_as_it_was(tmp_path):
    """Refused once the input is sniffed: a folder the run made is gone, one that was there keeps only its files."""
    assert _invoke(["demo", "--domain", "mcp", "--out", str(tmp_path / "in")])[0] == 0
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine\n")
    for out in (tmp_path / "new" / "out", kept):
        status, stderr = _invoke(["run", "--executor", "processes", "--num-cpus", "2", "--progress", "off",
                                  "-i", str(tmp_path / "in"), "-o", str(out), "--opt", "orphans=skip"])
        assert status == 2
        assert _one_error_line(stderr).startswith("format lwm-jsonl has no option orphans"), stderr
    assert not (tmp_path / "new").exists()  # nor the folder above it, which the run made too
    assert [p.name for p in kept.rglob("*")] == ["notes.txt"]  # no _tasks/ of a scan


@pytest.mark.parametrize("opt", ["orphans=maybe", "messages_path=5"])
def test_a_bad_option_value_of_sniffed_input_fails_before_ingest_writes(opt, mixed_input, tmp_path):
    out = tmp_path / "out"
    status, stderr = _invoke(["run", "--executor", "local", "--progress", "off", "-i", str(mixed_input),
                              "-o", str(out), "--opt", opt])
    assert status == 2
    assert _one_error_line(stderr).startswith(f"ingest.options.{opt.partition('=')[0]} (--opt): must be "), stderr
    assert not out.exists()  # nothing scanned, nothing written
    status, stderr = _invoke(["validate", str(mixed_input), "--opt", opt])
    assert status == 2
    assert _one_error_line(stderr).startswith(f"ingest.options.{opt.partition('=')[0]} (--opt): must be ")


def test_validate_exits_1_where_run_would_fail_on_quarantine_and_2_without_input(corpus, tmp_path):
    # the module's corpus: 3 files of 12, one 1-turn and one malformed line: 1 of 38 quarantined, under 5%
    status, stderr = _invoke(["validate", str(corpus)])
    assert status == 0, stderr
    status, stderr = _invoke(["validate", str(corpus), "--max-quarantine-rate", "0.01"])
    assert status == 1
    assert stderr.strip().splitlines()[-1] == ("lwm: quarantine rate 2.6% (1 of 38 records) exceeds the bound 1.0%: "
                                                "lwm run would fail")
    status, stderr = _invoke(["run", "--executor", "local", "--progress", "off", "-i", str(corpus),
                              "-o", str(tmp_path / "out"), "--max-quarantine-rate", "0.01"])
    assert status == 2 and "exceeds the bound 1.0%" in stderr  # what validate foretold
    (tmp_path / "empty").mkdir()
    status, stderr = _invoke(["validate", str(tmp_path / "empty")])
    assert status == 2
    assert _one_error_line(stderr) == f"no input files found in {tmp_path / 'empty'}"


@pytest.mark.parametrize("pair", ["orphans", "=skip", " =skip"])
def test_an_opt_without_a_key_is_one_line(pair, tmp_path):
    status, stderr = _invoke(["run", "-i", "x", "-o", str(tmp_path / "out"), "--opt", pair, "--dry-run"])
    assert status == 2
    assert _one_error_line(stderr) == f"--opt expects KEY=VALUE, got {pair!r}"


def test_an_opt_value_that_is_not_json_is_its_text():
    from pipeline.config import parse_opt

    huge = "9" * 5000  # JSON, but an integer Python will not convert: kept as the text given
    assert parse_opt(["a=1", "b=x y", f"c={huge}", "d=a=b"]) == {"a": 1, "b": "x y", "c": huge, "d": "a=b"}


def test_a_dry_run_refuses_a_missing_input_as_the_run_does(tmp_path):
    missing = tmp_path / "nope"
    for dry_run in ([], ["--dry-run"]):
        status, stderr = _invoke(["run", "-i", str(missing), "-o", str(tmp_path / "out"), *dry_run])
        assert status == 2
        assert _one_error_line(stderr) == f"input not found: {missing}"
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["run", "validate"])
def test_an_empty_input_path_is_one_line_not_the_current_folder(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stray.jsonl").write_text("{}\n")  # what the current folder would have given
    args = ["run", "-i", "", "-o", str(tmp_path / "out")] if command == "run" else ["validate", ""]
    status, stderr = _invoke(args)
    assert status == 2
    assert _one_error_line(stderr) == "an input path is empty; give a file, folder, glob or URL"
    assert not list((tmp_path / "out").glob("*"))  # nothing read, nothing written


@pytest.mark.parametrize("kind", ["not a tokenizer", "a folder without one"])
def test_a_tokenizer_the_run_cannot_read_fails_before_anything_runs(kind, corpus, tmp_path):
    if kind == "not a tokenizer":
        spec = tmp_path / "passwd"
        spec.write_text("root:x:0:0:root:/root:/bin/bash\n")
        expected = f"cannot read tokenizer {spec}: "
    else:
        spec = tmp_path / "model"
        spec.mkdir()
        expected = f"tokenizer file not found: {spec / 'tokenizer.json'}"
    out = tmp_path / "out"
    status, stderr = _invoke(["run", "--executor", "local", "--progress", "off", "-i", str(corpus), "-o", str(out),
                              "--tokenizer", str(spec)])
    assert status == 2
    assert _one_error_line(stderr).startswith(expected)
    assert not list(out.glob("*"))  # no ingest, no dedup: nothing was written


def _tokenizer_file(path: Path, model: str, chat_tokens: bool) -> Path:
    """A small tokenizer.json: a byte-level BPE or a WordLevel model, with or without the ChatML tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] if chat_tokens else ["<|endoftext|>"]
    if model == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    else:
        tok = Tokenizer(models.WordLevel(unk_token="<|endoftext|>"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        trainer = trainers.WordLevelTrainer(special_tokens=specials)
    tok.train_from_iterator(["echo hello world", "ls -la /tmp && cat notes.txt"], trainer)
    tok.save(str(path))
    return path


@pytest.mark.parametrize(("kind", "expected"), [
    ("word-level", "a WordLevel model without byte-level pre-tokenizer; only byte-level BPE"),
    ("no chat tokens", "has no special token '<|im_start|>', which ChatML samples need"),
    ("JSON that is no tokenizer", "not a tokenizer.json (no model section)"),
])
def test_a_tokenizer_json_the_samples_cannot_use_is_one_line_before_ingest(kind, expected, corpus, tmp_path):
    """Such files were refused only when the samples stage loaded them, after ingest and dedup had run."""
    spec = tmp_path / "tokenizer.json"
    if kind == "JSON that is no tokenizer":
        spec.write_text('{"not": "a tokenizer"}')
    else:
        _tokenizer_file(spec, "wordlevel" if kind == "word-level" else "bpe", chat_tokens=kind != "no chat tokens")
    out = tmp_path / "out"
    for extra in ([], ["--dry-run"]):
        status, stderr = _invoke(["run", "--executor", "local", "--progress", "off", "-i", str(corpus), "-o", str(out),
                                  "--tokenizer", str(spec), *extra])
        assert status == 2
        assert _one_error_line(stderr) == f"tokenizer {spec} (tokenizer.spec, --tokenizer): {expected}" + (
            " tokenizer.json files are supported" if kind == "word-level" else
            " (or give --chat-format plain)" if kind == "no chat tokens" else "")
        assert not list(out.glob("*"))  # nothing ran
    if kind == "no chat tokens":  # plain samples need no chat tokens: the same file serves them
        status, stderr = _invoke(["run", "--executor", "local", "--progress", "off", "-i", str(corpus), "-o", str(out),
                                  "--tokenizer", str(spec), "--chat-format", "plain"])
        assert status == 0, stderr


def test_a_ray_address_that_cannot_work_is_one_line_before_anything_runs(corpus, tmp_path):
    import importlib.util

    port = _closed_port()
    key = "executor.ray_address (--ray-address)"
    client = ("a ray:// address needs Ray Client: pip install 'ray[client]'" if importlib.util.find_spec("grpc") is None
              else "nothing answers there")
    cases = {
        "head:abc": f"{key}: expected auto, HOST:PORT or ray://HOST:PORT, not 'head:abc'",
        "no-such-host.invalid": f"{key} no-such-host.invalid: nothing answers there (",  # a bare host: port 6379
        "http://127.0.0.1:8265": f"{key}: expected auto, HOST:PORT or ray://HOST:PORT, not 'http://127.0.0.1:8265'",
        f"127.0.0.1:{port}": f"{key} 127.0.0.1:{port}: nothing answers there (Connection refused); is the cluster "
                             "running (`ray status` on its head)?",
        f"ray://127.0.0.1:{port}": f"{key} ray://127.0.0.1:{port}: {client}",
    }
    for address, expected in cases.items():
        out = tmp_path / "out"
        status, stderr = _invoke(["run", "-i", str(corpus), "-o", str(out), "--ray-address", address])
        assert status == 2, address
        assert _one_error_line(stderr).startswith(expected), (address, stderr)
        assert not list(out.glob("*")), address  # nothing ran


def test_a_bad_ray_address_from_the_environment_is_named_as_such(corpus, tmp_path, monkeypatch):
    port = _closed_port()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    status, stderr = _invoke(["run", "--executor", "ray", "-i", str(corpus), "-o", str(tmp_path / "out")])
    assert status == 2
    assert _one_error_line(stderr).startswith(f"RAY_ADDRESS 127.0.0.1:{port}: nothing answers there")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1")  # a bare host: the head's default port, 6379
    from pipeline.ray_executor import check_cluster_address

    try:
        check_cluster_address("127.0.0.1", "RAY_ADDRESS")
    except Exception as exc:  # nothing listens on 6379 here (or a cluster does: then no error at all)
        assert str(exc).startswith("RAY_ADDRESS 127.0.0.1: nothing answers there"), exc
    check_cluster_address("local")  # Ray's own word for a new local instance


def test_an_option_on_input_no_format_recognizes_leaves_the_files_to_quarantine(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "notes.jsonl").write_text('{"hello": "world"}\n')
    status, stderr = _invoke(["validate", str(src), "--opt", "orphans=skip"])
    assert status == 1  # the file is quarantined (unknown_format), as it is without the option
    assert "unknown_format" in stderr or "quarantine rate 100.0%" in stderr, stderr
    assert "no format of this input" not in stderr


# settings that name something that does not exist, or disagree with each other: (TOML, the error line's start
# after the config file's name)
_LLM = '[llm]\nendpoint = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
PREFLIGHT_PROBES = [
    ("[dedup]\nnum_perm = 16\nbands = 32", "dedup.bands (32) exceeds dedup.num_perm (16)"),
    ('[filter]\nenabled = ["min_turn"]', "filter.enabled: unknown filter(s) min_turn"),
    ('[dedup]\ndecontaminate = ["nonexistent.jsonl"]', "dedup.decontaminate: input not found: nonexistent.jsonl"),
    ('[templates.mapping]\ncpt = ["v99"]', "templates.mapping.cpt: unknown variant 'v99'; known: v0, v1, v2"),
    ('[templates]\ndirs = ["nonexistent_dir"]', "template directory {tmp}/nonexistent_dir does not exist"),
    ('[executor]\nkind = "local"\nray_address = "auto"', "executor.ray_address (--ray-address) auto is for the Ray"),
    ('[masking]\ntable = "missing.toml"', "masking.table: {tmp}/missing.toml: masking table file not found"),
    # a stage of one's own, named by its "module:attribute" path: resolved and checked before any work
    (_LLM + 'stages = ["nomod:x"]', "llm.stages: 'nomod:x': cannot import module 'nomod': No module named 'nomod'"),
    (_LLM + 'stages = ["tests.helpers:NO_SUCH_STAGE"]',
     "llm.stages: 'tests.helpers:NO_SUCH_STAGE': module 'tests.helpers' has no attribute 'NO_SUCH_STAGE'"),
    (_LLM + 'stages = ["json:dumps"]', "llm.stages: 'json:dumps' is not a stage: it lacks name, schema, wants, process, "
                                      "dry_requests, apply (what a stage has: stages/llm/stage.py)"),
]


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
@pytest.mark.parametrize(("toml", "expected"), PREFLIGHT_PROBES, ids=[p[1].split(" ")[0] for p in PREFLIGHT_PROBES])
def test_settings_the_run_would_fail_on_are_one_line_before_any_work(toml, expected, dry_run, corpus, tmp_path,
                                                                      monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.toml"
    config.write_text(toml + "\n")
    out = tmp_path / "out"
    status, stderr = _invoke(["run", "--executor", "local", "--progress", "off", "-i", str(corpus), "-o", str(out),
                              "--config", str(config), *(["--dry-run"] if dry_run else [])])
    assert status == 2
    assert _one_error_line(stderr).startswith(f"{config}: " + expected.format(tmp=tmp_path))  # where to fix it
    assert not out.exists()  # not even the output folder: nothing was read or written


def test_a_setting_the_flags_make_wrong_is_not_named_as_the_config_files(corpus, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('[executor]\nray_address = "auto"\n')  # right for the Ray executor, which the file leaves on
    status, stderr = _invoke(["run", "--executor", "local", "-i", str(corpus), "-o", str(tmp_path / "out"),
                              "--config", str(config), "--dry-run"])
    assert status == 2
    assert _one_error_line(stderr).startswith("executor.ray_address (--ray-address) auto is for the Ray executor")


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
def test_a_mistake_in_the_masking_table_of_a_printed_config_is_one_line_before_any_work(dry_run, corpus, tmp_path):
    """The config `--dry-run` prints holds the masking table inline: a key misspelt there is found as in a file."""
    table = tmp_path / "table.toml"
    table.write_text((ROOT / "masking" / "default_table.toml").read_text())
    named = tmp_path / "named.toml"
    named.write_text('[masking]\ntable = "table.toml"\n')
    printed = CliRunner().invoke(main, ["run", "-i", str(corpus), "-o", "o", "--config", str(named), "--dry-run"])
    assert printed.exit_code == 0, printed.output
    assert printed.output.count("keep = 0.1,") == 1  # the boilerplate category, inline under [masking.table]
    config = tmp_path / "c.toml"
    config.write_text(printed.output.replace("keep = 0.1,", "kep = 0.1,"))
    out = tmp_path / "out"
    status, stderr = _invoke(["run", "--executor", "local", "--progress", "off", "-i", str(corpus), "-o", str(out),
                              "--config", str(config), *(["--dry-run"] if dry_run else [])])
    assert status == 2
    assert _one_error_line(stderr) == (f"{config}: masking.table: category 'boilerplate': unknown key 'kep' "
                                       "(expected name, when, keep, description)")
    assert not out.exists()


@pytest.mark.parametrize("left", ["no manifest", "a manifest"], ids=["interrupted", "rerun in progress"])
def test_decontaminating_against_an_unfinished_run_names_it_before_any_work(left, corpus, tmp_path):
    other = tmp_path / "other"
    args = ["run", "--executor", "local", "--progress", "off", "-i", str(corpus)]
    assert _invoke([*args, "-o", str(other)])[0] == 0
    (other / "_SUCCESS").unlink()  # as a run stopped before its end, or started again over the folder, leaves it
    if left == "no manifest":
        (other / "manifest.json").unlink()
    config = tmp_path / "c.toml"
    config.write_text(f'[dedup]\ndecontaminate = ["{other}"]\n')
    out = tmp_path / "out"
    for dry_run in ([], ["--dry-run"]):
        status, stderr = _invoke([*args, "-o", str(out), "--config", str(config), *dry_run])
        assert status == 2
        assert _one_error_line(stderr) == (f"{config}: dedup.decontaminate: {other}: not a finished run (no "
                                           "_SUCCESS); run `lwm run` to completion first")
        assert not out.exists()


def test_a_config_file_that_is_not_utf8_or_not_a_file_is_one_line(tmp_path):
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b'[run]\nformat = "\xff"\n')
    for path, expected in ((binary, f"{binary}: not UTF-8 text"), (tmp_path, f"{tmp_path}: cannot read the config file")):
        status, stderr = _invoke(["run", "-i", "x", "-o", str(tmp_path / "o"), "--config", str(path), "--dry-run"])
        assert status == 2 and _one_error_line(stderr).startswith(expected)


def test_check_format_refuses_a_bound_outside_zero_to_one(tmp_path):
    outputs = tmp_path / "outputs.jsonl"
    outputs.write_text('{"output": "x"}\n')
    for bound in ("2", "-1"):
        status, stderr = _invoke(["check-format", str(outputs), "--min-adherence", bound])
        assert status == 2 and "Invalid value for '--min-adherence'" in stderr


def test_a_pipe_or_a_device_as_input_is_one_line_not_a_hang(corpus, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_bytes((corpus / sorted(p.name for p in corpus.iterdir())[0]).read_bytes())
    os.mkfifo(src / "p.jsonl")  # nothing ever writes to it: reading it would block forever
    for args, expected in (([str(src)], f"input {src / 'p.jsonl'} is a named pipe"),
                           (["/dev/zero"], "input /dev/zero is a device")):
        status, stderr = _invoke(["run", "--executor", "local", "--progress", "off", "-o", str(tmp_path / "o"),
                                  *[x for a in args for x in ("-i", a)]])
        assert status == 2 and _one_error_line(stderr).startswith(expected)
        status, stderr = _invoke(["validate", *args])
        assert status == 2 and _one_error_line(stderr).startswith(expected)


def test_an_output_folder_inside_the_input_is_left_out_of_it(corpus, tmp_path):
    """A rerun into a folder inside the input reads the input, not its own outputs; an output folder that is
    the input folder is refused before it is touched."""
    import shutil

    src = tmp_path / "in"
    shutil.copytree(corpus, src)
    apart = tmp_path / "apart"
    args = ["run", "--executor", "local", "--progress", "off", "-i", str(src)]
    assert _invoke([*args, "-o", str(apart)])[0] == 0
    inside = src / "out"
    assert _invoke([*args, "-o", str(inside)])[0] == 0
    status, stderr = _invoke([*args, "-o", str(inside)])  # the second run sees the first one's files
    assert status == 0 and "input: left out " in stderr
    assert_same_outputs(apart, inside)
    (inside / "marker").write_text("")
    status, stderr = _invoke([*args, "-o", str(src)])
    assert status == 2 and _one_error_line(stderr).startswith(f"the output folder {src} is, or holds, the input")
    assert (inside / "_SUCCESS").exists()  # the refused run touched nothing


def test_the_output_folder_of_another_run_inside_the_input_is_left_out_of_it(corpus, tmp_path):
    """``logs/`` holding ``logs/out-v1`` from an earlier run: a run over ``logs/`` into another folder reads the
    logs, not out-v1's trajectories, shards and markers (its trajectories and rl shards read as lwm-jsonl and
    openai-messages, and came back as copies of the logs); a file of it named as an input is read."""
    import shutil

    src = tmp_path / "logs"
    shutil.copytree(corpus, src)
    args = ["run", "--executor", "local", "--progress", "off"]
    apart = tmp_path / "apart"
    assert _invoke([*args, "-i", str(src), "-o", str(apart)])[0] == 0
    assert _invoke([*args, "-i", str(src), "-o", str(src / "out-v1")])[0] == 0
    status, stderr = _invoke([*args, "-i", str(src), "-o", str(tmp_path / "v2")])
    assert status == 0, stderr
    note = [line for line in stderr.splitlines() if line.startswith("input: left out ")]
    assert len(note) == 1 and note[0].endswith(f"of the lwm output folder {src / 'out-v1'} (another run's layers, "
                                               "shards and markers; name a file of it as an input to read it)"), note
    assert_same_outputs(apart, tmp_path / "v2")
    part = sorted((src / "out-v1" / "trajectories").glob("*.parquet"))[0]
    status, stderr = _invoke([*args, "-i", str(src), "-i", str(part), "-o", str(tmp_path / "v3")])
    assert status == 0 and "ingest: " in stderr
    manifest = json.loads((tmp_path / "v3" / "manifest.json").read_text())
    assert any(i["uri"].endswith(part.name) for i in manifest["inputs"]), manifest["inputs"]


def _lwm_shell(redirect: str, *args: str) -> subprocess.CompletedProcess:
    """`lwm ARGS` as its own process, its standard streams redirected by `redirect` (a shell fragment)."""
    import shlex

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = str(ROOT)
    command = " ".join(shlex.quote(a) for a in (sys.executable, "-m", "pipeline.cli", *args))
    return subprocess.run(["bash", "-c", f"{command} {redirect}"], capture_output=True, text=True, timeout=300,
                          env=env)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux) to fill a stream")
def test_standard_streams_that_are_closed_or_full(corpus, tmp_path):
    run = ["run", "--progress", "off", "-i", str(corpus)]
    # standard output closed: the run is done, with the outputs of a run that could print
    closed = _lwm_shell(">&-", *run, "-o", str(tmp_path / "closed"))
    assert closed.returncode == 0 and "Traceback" not in closed.stderr and (tmp_path / "closed" / "_SUCCESS").exists()
    # standard output full: the run is done, and the summary that could not be written is one line, not the disk's
    full = _lwm_shell(">/dev/full", *run, "-o", str(tmp_path / "full"))
    assert full.returncode == 2 and (tmp_path / "full" / "_SUCCESS").exists()
    assert full.stderr.strip().splitlines()[-1] == "lwm: error: cannot write to standard output: No space left on device"
    hist = _lwm_shell(">/dev/full", "hist", str(tmp_path / "full"))
    assert hist.returncode == 2 and "cannot write to standard output" in hist.stderr and "free space" not in hist.stderr
    # standard error full: progress and warnings are dropped, the run goes on and says it is done on stdout
    quiet = _lwm_shell("2>/dev/full", *run, "-o", str(tmp_path / "quiet"))
    assert quiet.returncode == 0 and "== pool cpt ==" in quiet.stdout  # the histogram goes to standard output
    assert_same_outputs(tmp_path / "closed", tmp_path / "quiet")


def test_a_cache_that_cannot_be_written_is_one_warning_line_and_the_run_goes_on(corpus, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(blocker))
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--executor", "local", "--progress", "off",
                           "-i", str(corpus), "-o", str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    notes = [line for line in proc.stderr.splitlines() if "cannot cache" in line]
    assert len(notes) == 1 and notes[0].startswith(f"warning: cannot cache the parsed vocabulary at {blocker}/")
    assert "UserWarning" not in proc.stderr and "vocab.py" not in proc.stderr


def test_a_rerun_with_a_missing_input_or_tokenizer_leaves_the_finished_run_alone(corpus, tmp_path):
    out = tmp_path / "out"
    base = ["run", "--executor", "local", "--progress", "off", "-o", str(out)]
    assert _invoke([*base, "-i", str(corpus)])[0] == 0
    for extra, expected in ((["-i", str(tmp_path / "nope.jsonl")], f"input not found: {tmp_path / 'nope.jsonl'}"),
                            (["-i", str(corpus), "--tokenizer", str(tmp_path / "none.json")], "tokenizer")):
        status, stderr = _invoke([*base, *extra])
        assert status == 2 and expected in _one_error_line(stderr)
        assert (out / "_SUCCESS").exists()  # still a finished run that hist, show and export read


def test_a_glob_input_in_the_output_folder_is_read(corpus, tmp_path):
    """Files a glob names are inputs wherever they lie: only folders walked leave the output folder out."""
    import shutil

    folder = tmp_path / "g"
    shutil.copytree(corpus, folder)
    status, stderr = _invoke(["run", "--executor", "local", "--progress", "off", "-i", str(folder / "*.jsonl"),
                              "-o", str(folder)])
    assert status == 0, stderr
    assert (folder / "_SUCCESS").exists() and "left out" not in stderr


def test_a_flag_may_replace_a_bad_value_of_the_config_file(tmp_path):
    from pipeline.config import load_config_file, resolve

    path = tmp_path / "c.toml"
    path.write_text('[run]\nmax_quarantine_rate = 2\n')
    cfg = resolve(load_config_file(str(path)), {"run": {"max_quarantine_rate": 0.5}}, source=str(path))
    assert cfg["run"]["max_quarantine_rate"] == 0.5
    with pytest.raises(Exception, match=rf"^{re.escape(str(path))}: run\.max_quarantine_rate: must be"):
        resolve(load_config_file(str(path)), {}, source=str(path))


def test_an_output_folder_inside_an_input_prefix_on_another_filesystem_is_left_out(corpus):
    """The same on an fsspec filesystem other than the local one (the in-process memory filesystem here, as an
    object-store prefix would be)."""
    import fsspec

    fs = fsspec.filesystem("memory")
    for p in sorted(corpus.glob("*.jsonl")):
        fs.pipe(f"/lwm-inside/in/{p.name}", p.read_bytes())
    args = ["run", "--executor", "local", "--progress", "off", "-i", "memory://lwm-inside/in"]
    try:
        for _ in range(2):
            status, stderr = _invoke([*args, "-o", "memory://lwm-inside/in/out"])
            assert status == 0, stderr
        assert "input: left out " in stderr
        status, stderr = _invoke([*args, "-o", "memory://lwm-inside/in"])
        assert status == 2 and "is, or holds, the input folder" in _one_error_line(stderr)
    finally:
        fs.rm("/lwm-inside", recursive=True)


def test_limits_of_the_process_are_named_with_what_to_do():
    from pipeline.errors import os_error_line

    line = os_error_line(OSError(errno.EMFILE, "Too many open files", "/out/x.parquet"))
    assert line == ("Too many open files: /out/x.parquet (raise the limit of open files, e.g. `ulimit -n 4096`, "
                    "and run the same command again)")
    assert "ulimit -f" in os_error_line(OSError(errno.EFBIG, "File too large"))
    assert "free space" in os_error_line(OSError(errno.ENOSPC, "No space left on device", "/out"))


def test_a_glob_that_reaches_into_the_output_folder_leaves_its_outputs_out(corpus, tmp_path):
    """`-i 'g/*' -o g`: the glob matches the input files and the folders the first run wrote; the second run
    reads the same inputs (the run's own lock, layers and shards are left out), and writes the same bytes."""
    import shutil

    folder = tmp_path / "g"
    shutil.copytree(corpus, folder)
    args = ["run", "--executor", "local", "--progress", "off", "-i", str(folder / "*"), "-o", str(folder)]
    status, stderr = _invoke(args)
    assert status == 0, stderr
    first = json.loads((folder / "manifest.json").read_text())["inputs"]
    assert all(Path(i["uri"]).parent == folder and i["uri"].endswith(".jsonl") for i in first), first
    shutil.copytree(folder, tmp_path / "first")
    status, stderr = _invoke(args)
    assert status == 0 and "input: left out " in stderr, stderr
    assert json.loads((folder / "manifest.json").read_text())["inputs"] == first
    assert_same_outputs(tmp_path / "first", folder)


def test_an_object_store_client_error_is_the_environment_not_a_bug():
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError

    from pipeline.errors import error_line

    line, status = error_line(EndpointConnectionError(endpoint_url="http://127.0.0.1:9/b"))
    assert status == 2 and line.startswith("EndpointConnectionError: Could not connect to the endpoint URL")
    assert error_line(NoCredentialsError()) == ("NoCredentialsError: Unable to locate credentials", 2)
    assert error_line(ValueError("x"))[1] == 1  # a bug stays one


def test_input_files_in_folders_named_like_the_outputs_are_read(corpus, tmp_path):
    """A user's `data/raw/*.jsonl` with `-o data`: lwm's own layer files there are Parquet; the user's JSONL files
    are inputs, named one by one or by a glob."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(corpus, data / "raw")
    (data / "raw" / "notes.tmp-draft").write_text("mine")  # not a name lwm writes: never removed
    named = sorted((data / "raw").glob("*.jsonl"))[0]
    for inputs in ([str(named)], [str(data / "raw" / "*.jsonl")]):
        for _ in range(2):  # the second run meets the first one's files in data/raw
            status, stderr = _invoke(["run", "--executor", "local", "--progress", "off", "-o", str(data),
                                      *[x for i in inputs for x in ("-i", i)]])
            assert status == 0, stderr
        read = {i["uri"] for i in json.loads((data / "manifest.json").read_text())["inputs"]}
        assert read and all(u.endswith(".jsonl") for u in read), read
    assert len(list((data / "raw").glob("*.jsonl"))) == len(list(corpus.glob("*.jsonl")))  # no input was removed
    assert (data / "raw" / "notes.tmp-draft").read_text() == "mine"


@pytest.mark.parametrize(("argv", "preset", "expected"), [
    (["lwm", "run"], None, "1"), (["lwm", "--debug", "validate"], None, "1"), (["lwm", "run"], "4", "4"),
    (["lwm", "train"], None, None), (["lwm", "--debug", "train"], None, None),
])
def test_one_blas_thread_for_every_command_but_train(argv, preset, expected):
    """numpy's OpenBLAS threads reserve address space the pipeline never uses (under `ulimit -v 1000000` on 2 cores
    a small run aborted in the tokenizer without this); `lwm train` keeps them, a user's setting stays."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "RAY_ADDRESS")}
    env["PYTHONPATH"] = str(ROOT)
    if preset:
        env["OPENBLAS_NUM_THREADS"] = preset
    code = f"import sys, os; sys.argv = {argv!r}; import pipeline.cli; print(os.environ.get('OPENBLAS_NUM_THREADS'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.strip() == str(expected), out.stderr


def test_running_out_of_memory_is_the_environment_not_a_bug():
    from pipeline.errors import error_line

    line, status = error_line(MemoryError())
    assert status == 2 and line.startswith("out of memory: ") and "ulimit -v" in line
    # what importing numpy's bundled libraries raised under `ulimit -v 800000` (a run with a 0.8 GB address space)
    line, status = error_line(ImportError("libquadmath-828275a7.so.0.0.0: failed to map segment from shared object"))
    assert status == 2 and line.startswith("out of memory: ")
    assert error_line(ImportError("No module named 'ray'"))[1] == 1  # a missing module is not memory
