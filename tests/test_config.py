"""Run configuration: defaults, unknown keys, bad values, hashing."""

from __future__ import annotations

import pytest

from pipeline.config import DEFAULTS, FREE_FORM, config_hash, output_config, parse_opt, resolve
from pipeline.ray_executor import RECYCLE_BYTES, RECYCLE_TASKS, RayExecutor
from schemas.errors import ConfigError


def test_defaults_resolve_and_hash_ignores_execution_keys():
    a = resolve()
    b = resolve(overrides={"executor": {"kind": "local", "num_cpus": 3}, "run": {"out": "/elsewhere"}})
    assert config_hash(a) == config_hash(b)
    c = resolve(overrides={"pools": {"sft_turns": "all"}})
    assert config_hash(a) != config_hash(c)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"run": {"nope": 1}}, "unknown config key 'run.nope'"),
        ({"pools": {"ratios": {"cpt": 1.0, "dev": 0.1}}}, "unknown pool 'dev'"),
        ({"pools": {"sft_turns": 0}}, "sft_turns"),
        ({"run": {"max_quarantine_rate": 2}}, "max_quarantine_rate"),
        ({"executor": {"max_tasks_per_worker": -1}}, "max_tasks_per_worker"),
        ({"executor": {"max_tasks_per_worker": "sometimes"}}, "max_tasks_per_worker"),
        ({"render": {"chat_format": "llama"}}, "chat_format"),
    ],
)
def test_bad_values_are_one_clear_error(override, message):
    with pytest.raises(ConfigError, match=message):
        resolve(overrides=override)


def test_parse_opt_types_values():
    assert parse_opt(["a=1", "b=true", "c=x.y.-1", "d=[1, 2]"]) == {"a": 1, "b": True, "c": "x.y.-1", "d": [1, 2]}
    with pytest.raises(ConfigError):
        parse_opt(["novalue"])


def test_auto_worker_recycling_follows_input_size():
    ex = RayExecutor.__new__(RayExecutor)  # no Ray needed for the decision itself
    ex._auto, ex.max_tasks_per_worker, ex._driver_runs_tasks = True, 0, True
    ex.plan_for_input(RECYCLE_BYTES - 1)
    assert ex.max_tasks_per_worker == 0 and ex._driver_runs_tasks
    ex.plan_for_input(RECYCLE_BYTES)
    assert ex.max_tasks_per_worker == RECYCLE_TASKS > 1 and not ex._driver_runs_tasks
    ex._auto, ex.max_tasks_per_worker, ex._driver_runs_tasks = False, 5, True
    ex.plan_for_input(10 * RECYCLE_BYTES)
    assert ex.max_tasks_per_worker == 5 and not ex._driver_runs_tasks


def _leaves(node: dict, path: tuple[str, ...] = ()):
    for key, value in node.items():
        here = (*path, key)
        if isinstance(value, dict) and here not in FREE_FORM:
            yield from _leaves(value, here)
        else:
            yield here, value


def _wrong_type(value):
    """A value of another type than the default's (a fraction for text, text for numbers, lists and tables …)."""
    if isinstance(value, bool):
        return "yes"
    if isinstance(value, str):
        return 2.5
    if isinstance(value, int | float):
        return "big"
    return 5 if value is None else "x"


def _nested(path: tuple[str, ...], value) -> dict:
    for key in reversed(path):
        value = {key: value}
    return value


LEAVES = list(_leaves(DEFAULTS))


@pytest.mark.parametrize(("path", "default"), LEAVES, ids=[".".join(p) for p, _ in LEAVES])
def test_every_key_rejects_a_value_of_the_wrong_type_naming_the_key(path, default):
    with pytest.raises(ConfigError) as err:
        resolve(_nested(path, _wrong_type(default)))
    assert str(err.value).startswith(".".join(path)), str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"ingest": {"split_bytes": 0}}, "ingest.split_bytes: must be ≥ 1, not 0"),
        ({"shards": {"max_rows": 0}}, "shards.max_rows: must be ≥ 1, not 0"),
        ({"pools": {"context_limit": -1}}, "pools.context_limit: must be ≥ 1, not -1"),
        ({"dedup": {"bands": -1}}, "dedup.bands: must be ≥ 0, not -1"),
        ({"run": {"max_quarantine_rate": True}}, "run.max_quarantine_rate (--max-quarantine-rate): must be a finite number"),
        ({"pools": {"ratios": {"cpt": float("nan")}}}, "pools.ratios: ratios must be non-negative numbers"),
        ({"ingest": {"options": {"max_record_bytes": "abc"}}}, "ingest.options.max_record_bytes (--opt): must be an integer"),
        ({"ingest": {"nope": 1}}, "unknown config key 'ingest.nope'"),
        ({"executor": {"num_cpus": -1}}, "executor.num_cpus (--num-cpus): must be ≥ 0, not -1"),
        ({"shards": {"compression_level": 30}}, "shards.compression_level: must be ≤ 22, not 30"),
    ],
)
def test_out_of_range_values_are_one_line_naming_key_and_bound(override, message):
    with pytest.raises(ConfigError) as err:
        resolve(overrides=override)
    assert str(err.value).startswith(message), str(err.value)


def test_adapter_options_beyond_the_common_ones_stay_free_for_the_adapter():
    cfg = resolve(overrides={"ingest": {"options": {"messages_path": "data.messages", "max_record_bytes": 1024}}})
    assert cfg["ingest"]["options"] == {"messages_path": "data.messages", "max_record_bytes": 1024}


def test_an_opt_flag_adds_to_the_config_files_options():
    """`--opt` overrides the option it names and keeps the others the config file gives."""
    file_config = {"ingest": {"options": {"source_kind": "internal", "max_record_bytes": 5_000_000}}}
    cfg = resolve(file_config, {"ingest": {"options": {"domain": "terminal", "source_kind": "sandbox"}}})
    assert cfg["ingest"]["options"] == {"source_kind": "sandbox", "max_record_bytes": 5_000_000, "domain": "terminal"}
    assert file_config["ingest"]["options"] == {"source_kind": "internal", "max_record_bytes": 5_000_000}
    # the ratios are still a whole: a flag's ratios replace the file's
    cfg = resolve({"pools": {"ratios": {"cpt": 0.5, "sft": 0.5}}}, {"pools": {"ratios": {"cpt": 1.0}}})
    assert cfg["pools"]["ratios"] == {"cpt": 1.0}


def test_recorded_config_drops_input_credentials_and_the_hash_ignores_them():
    a = resolve(overrides={"run": {"input": ["https://bob:pw1@example.com/a.jsonl"]}})
    b = resolve(overrides={"run": {"input": ["https://alice:pw2@example.com/a.jsonl?X-Amz-Signature=ab"]}})
    assert output_config(a)["run"]["input"] == ["https://example.com/a.jsonl"]
    assert config_hash(a) == config_hash(b)
    assert a["run"]["input"] == ["https://bob:pw1@example.com/a.jsonl"]  # the run itself still reads with them


def test_one_input_written_several_ways_hashes_alike_and_another_input_does_not(tmp_path, monkeypatch):
    (tmp_path / "in" / "sub").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)

    def hashed(*inputs: str) -> str:
        return config_hash(resolve(overrides={"run": {"input": list(inputs)}}))

    assert len({hashed(s) for s in ("in", "in/", "./in", "in//", "in/../in", "in/.", "in/./", "in/sub/..",
                                              str(tmp_path / "in"))}) == 1
    assert output_config(resolve(overrides={"run": {"input": ["./in/"]}}))["run"]["input"] == [str(tmp_path / "in")]
    assert hashed("s3://b/logs/") == hashed("s3://b/logs") != hashed("s3://b/logs2")
    assert len({hashed("in"), hashed("other"), hashed("in/*.jsonl"), hashed("in", "other")}) == 4
    assert hashed("https://example.com/logs/") != hashed("https://example.com/logs")  # a web address as given


def test_schema_literals_follow_the_trajectory_schema():
    from typing import get_args

    from pipeline.config_schema import Domain, SourceKind
    from schemas.trajectory import DOMAINS, SOURCE_KINDS
    from stages.filters import FILTER_ORDER
    from stages.tokenizer import ENGINES

    assert set(get_args(Domain)) == {"", *DOMAINS}
    assert set(get_args(SourceKind)) == set(SOURCE_KINDS)
    assert set(FILTER_ORDER) >= set(DEFAULTS["filter"]["enabled"])
    for engine in ENGINES:
        assert resolve(overrides={"tokenizer": {"engine": engine}})["tokenizer"]["engine"] == engine
    with pytest.raises(ConfigError, match=r"^tokenizer\.engine"):
        resolve(overrides={"tokenizer": {"engine": "sentencepiece"}})


def test_a_template_mapping_names_only_the_pools_it_changes():
    cfg = resolve(overrides={"templates": {"mapping": {"sft": ["v3"]}}})
    assert cfg["templates"]["mapping"] == {**DEFAULTS["templates"]["mapping"], "sft": ["v3"]}
    with pytest.raises(ConfigError, match=r"unknown config key 'templates\.mapping\.sfx'"):
        resolve(overrides={"templates": {"mapping": {"sfx": ["v3"]}}})


def test_the_masking_table_can_be_a_file_beside_the_config(tmp_path, monkeypatch):
    import tomllib
    from pathlib import Path

    from pipeline.config import load_config_file

    default = Path(__file__).resolve().parent.parent / "masking" / "default_table.toml"
    (tmp_path / "conf").mkdir()
    mine = tmp_path / "conf" / "mine.toml"
    mine.write_text(default.read_text().replace("keep = 0.05", "keep = 0.07"))
    run = tmp_path / "conf" / "run.toml"
    run.write_text('[masking]\ntable = "mine.toml"\n')
    monkeypatch.chdir(tmp_path)  # the name is read beside the config file, not in the current folder
    cfg = resolve(load_config_file(str(run)))
    assert cfg["masking"]["table"] == tomllib.loads(mine.read_text())
    assert cfg["masking"]["table"]["categories"][0]["keep"] == 0.07
    before = config_hash(cfg)
    mine.write_text(default.read_text())  # the table is the config: another table, another hash
    assert config_hash(resolve(load_config_file(str(run)))) != before
    with pytest.raises(ConfigError, match=r"masking\.table: .*nope\.toml: masking table file not found"):
        resolve(overrides={"masking": {"table": str(tmp_path / "nope.toml")}})
    (tmp_path / "bad.toml").write_text('[[categories]]\nname = "x"\nwhen = "nonsense >"\nkeep = 1.0\n')
    with pytest.raises(ConfigError, match=r"masking\.table: .*bad\.toml: "):
        resolve(overrides={"masking": {"table": str(tmp_path / "bad.toml")}})
    (tmp_path / "a-folder.toml").mkdir()  # any other reason a file cannot be read is one line too
    with pytest.raises(ConfigError, match=r"masking\.table: .*a-folder\.toml: cannot read the masking table file"):
        resolve(overrides={"masking": {"table": str(tmp_path / "a-folder.toml")}})
