"""The demo corpus of six domains (android has its own test module): determinism, shape, the
observation style of each domain, masking-category variety and near-duplicate survival."""

from __future__ import annotations

import collections
import itertools
import json
import re
from pathlib import Path

import pytest
import regex

from masking import load_table, score_turn
from pipeline.demo import DEFAULT_N, generate, write_demo
from schemas.errors import ConfigError, InvalidRecord
from schemas.trajectory import DOMAINS, Trajectory
from stages.ingest import registry
from stages.ingest.reading import expand_inputs

SIX = ("mcp", "search", "terminal", "swe", "web", "os")
ALL_CATEGORIES = {"retrieval", "expansion", "action", "transform", "boilerplate", "echo", "other"}
PROMPT = re.compile(r"^[a-z]+@[\w-]+:[~/][^\n]*[#$] $")
INDEXED = re.compile(r"^\s*\[(\d+)\] \S")
RECT = re.compile(r"rect=\((\d+),(\d+),(\d+),(\d+)\)")


@pytest.fixture(scope="module")
def corpus() -> dict[str, list[dict]]:
    return {domain: generate(domain) for domain in SIX}


@pytest.fixture(scope="module")
def categories(corpus) -> dict[str, collections.Counter]:
    table = load_table(None)
    counts = {}
    for domain, trajs in corpus.items():
        counts[domain] = collections.Counter()
        for d in trajs:
            for turn in d["turns"]:
                _stats, category, _keep = score_turn(turn["action"], turn["observation"], table)
                counts[domain][category] += 1
    return counts


def test_unknown_domain_and_bad_sizes_are_config_errors(tmp_path):
    with pytest.raises(ConfigError) as err:
        write_demo("browser", str(tmp_path))
    assert all(domain in str(err.value) for domain in DOMAINS)
    for bad_n in (0, -3, 2.5, True):
        with pytest.raises(ConfigError):
            generate("terminal", 0, bad_n)
    with pytest.raises(ConfigError):
        generate("terminal", "0", 5)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("domain", SIX)
def test_write_demo_is_byte_identical_per_seed_and_differs_across_seeds(tmp_path, domain):
    first = write_demo(domain, str(tmp_path / "a"), seed=3, n=25)
    again = write_demo(domain, str(tmp_path / "b"), seed=3, n=25, native=True)
    other = write_demo(domain, str(tmp_path / "c"), seed=4, n=25)
    assert first == [str(tmp_path / "a" / f"{domain}.jsonl")]
    data = Path(first[0]).read_bytes()
    assert data == Path(again[0]).read_bytes()  # native is lwm-jsonl itself outside android
    assert data != Path(other[0]).read_bytes()
    lines = data.decode("utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == 26
    assert lines[:-1] == [json.dumps(d, ensure_ascii=False, sort_keys=True) for d in generate(domain, 3, 25)]
    assert [p.name for p in (tmp_path / "a").iterdir()] == [f"{domain}.jsonl"]  # no temporary file left behind
    # A smaller corpus is a prefix of a larger one with the same seed.
    assert generate(domain, 3, 25) == generate(domain, 3, 60)[:25]


def test_written_corpus_reads_back_through_the_lwm_jsonl_adapter(tmp_path):
    for domain in SIX:
        write_demo(domain, str(tmp_path), seed=2, n=6)
    units = expand_inputs([str(tmp_path)])
    assert sorted(Path(u.uri).name for u in units) == sorted(f"{d}.jsonl" for d in SIX)
    opts = {"domain": None, "source_kind": "sandbox"}
    for unit in units:
        name, _score = registry.sniff(unit)
        assert name == "lwm-jsonl", unit.uri
        adapter = registry.get_adapter(name)
        read_back = []
        for record in adapter.read(unit, opts):
            assert not isinstance(record, InvalidRecord), record
            read_back += [t.to_dict() for t in adapter.normalize(record, opts)]
        expected = generate(Path(unit.uri).stem, 2, 6)
        for got, want in zip(read_back, expected, strict=True):
            assert got["source"]["locator"] and got["source"]["uri"].endswith(".jsonl")
            assert {**got, "source": None} == {**want, "source": None}


def test_android_is_dispatched_to_its_own_module(tmp_path):
    trajs = generate("android", 1, 3)
    assert [d["domain"] for d in trajs] == ["android"] * 3
    paths = write_demo("android", str(tmp_path), seed=1, n=3)
    assert paths and all(Path(p).is_file() for p in paths)


@pytest.mark.parametrize("domain", SIX)
def test_corpus_shape(corpus, domain):
    trajs = corpus[domain]
    assert len(trajs) == DEFAULT_N == 240
    for d in trajs:
        traj = Trajectory.from_dict(d)
        assert traj.domain == domain
        assert (traj.source.kind, traj.source.format) == ("sandbox", "lwm-jsonl")
        assert 2 <= len(traj.turns) <= 24
        assert all(turn.action and turn.observation is not None for turn in traj.turns)
        assert traj.system.task_description and traj.system.action_space
        assert 1 <= len(traj.system.demonstrations) <= 2
        assert (traj.system.initial_state is not None) == (domain in ("terminal", "swe", "web", "os"))
        meta = json.loads(traj.meta)
        assert meta["generator"] == "lwmkit-demo" and meta["seed"] == 0
    lengths = [len(d["turns"]) for d in trajs]
    assert max(lengths) > 15 and len(set(lengths)) >= 8
    assert len({d["traj_id"] for d in trajs}) == len(trajs)
    with_instruction = sum(d["system"]["simulation_instruction"] is not None for d in trajs)
    assert 0.2 * len(trajs) < with_instruction < 0.6 * len(trajs)
    # Several attempts per task: split keys are shared, and one key never mixes two tasks.
    attempts = collections.Counter(d["split_key"] for d in trajs)
    assert len(trajs) / 4 < len(attempts) < len(trajs) / 1.5
    assert max(attempts.values()) >= 3
    tasks = collections.defaultdict(set)
    for d in trajs:
        tasks[d["split_key"]].add(d["system"]["task_description"])
    assert all(len(v) == 1 for v in tasks.values())


@pytest.mark.parametrize("domain", ("mcp", "swe"))
def test_tool_calls_use_only_declared_tools(corpus, domain):
    spaces = set()
    for d in corpus[domain]:
        declared = {tool["name"]: tool for tool in json.loads(d["system"]["action_space"])}
        spaces.add(frozenset(declared))
        for turn in d["turns"]:
            call = json.loads(turn["action"])
            assert list(call) == ["name", "arguments"]
            assert call["name"] in declared, (call["name"], sorted(declared))
            if domain == "mcp":
                assert set(call["arguments"]) <= set(declared[call["name"]]["inputSchema"]["properties"])
    assert len(spaces) >= 4  # the action space is per trajectory


def test_every_domain_has_four_categories_and_all_seven_occur(categories):
    for domain, counts in categories.items():
        assert len(counts) >= 4, (domain, dict(counts))
    assert set().union(*categories.values()) == ALL_CATEGORIES
    # Where the corpus was designed to put each category:
    assert categories["mcp"]["echo"] > 0 and categories["mcp"]["boilerplate"] > 0 and categories["mcp"]["other"] > 0
    assert categories["terminal"]["transform"] > 0 and categories["swe"]["transform"] > 0
    assert categories["web"]["action"] > 0 and categories["os"]["echo"] > 0


def test_known_turn_kinds_land_in_their_category(corpus):
    table = load_table(None)

    def category(turn: dict) -> str:
        return score_turn(turn["action"], turn["observation"], table)[1]

    mcp = [t for d in corpus["mcp"] for t in d["turns"]]
    assert {category(t) for t in mcp if json.loads(t["action"])["name"] == "think"} == {"echo"}
    assert {category(t) for t in mcp if t["observation"] == "sent"} == {"action"}
    terminal = [t for d in corpus["terminal"] for t in d["turns"]]
    # An output-less command shows only the next prompt: new words, mostly shorter than the keystrokes.
    mkdir = collections.Counter(
        category(t) for t in terminal if json.loads(t["action"])[0]["keystrokes"].startswith("mkdir -p")
    )
    assert set(mkdir) <= {"action", "retrieval"} and mkdir["action"] > 0.7 * sum(mkdir.values())
    search = [t for d in corpus["search"] for t in d["turns"] if json.loads(t["action"])["action"] == "search"]
    assert {category(t) for t in search} == {"expansion"}


def test_terminal_style(corpus):
    seen = collections.Counter()
    for d in corpus["terminal"]:
        assert PROMPT.match(d["system"]["initial_state"])
        for turn in d["turns"]:
            (keys,) = json.loads(turn["action"])
            assert set(keys) == {"keystrokes", "duration"} and keys["keystrokes"].endswith("\n")
            *output, last = turn["observation"].split("\n")
            assert PROMPT.match(last), last
            seen["prompt only"] += not output
            seen["pytest"] += " passed" in turn["observation"]
            seen["pip"] += "Successfully installed" in turn["observation"]
            seen["not found"] += "command not found" in turn["observation"]
    assert all(seen[k] >= 10 for k in ("prompt only", "pytest", "pip", "not found")), seen


def test_web_style(corpus):
    for d in corpus["web"]:
        before = d["system"]["initial_state"]
        for turn in d["turns"]:
            after = turn["observation"]
            assert after != before  # every action changes the page (the GUI filters drop no-op turns)
            tree = after.split("\n\n", 1)[1] if after.startswith("Tab 0 (current): ") else after
            assert all(INDEXED.match(line) for line in tree.split("\n"))
            action = json.loads(turn["action"])
            if "element" in action:
                shown = {int(m.group(1)) for line in before.split("\n") if (m := INDEXED.match(line))}
                assert action["element"] in shown
            before = after


def test_os_style(corpus):
    clicks = 0
    for d in corpus["os"]:
        before = d["system"]["initial_state"]
        for turn in d["turns"]:
            after = turn["observation"]
            assert after != before
            assert all(INDEXED.match(line) and RECT.search(line) for line in after.split("\n"))
            action = json.loads(turn["action"])
            if action["action"] in ("click", "double_click", "right_click"):
                rects = [tuple(map(int, m.groups())) for m in RECT.finditer(before)]
                assert any(x1 <= action["x"] <= x2 and y1 <= action["y"] <= y2 for x1, y1, x2, y2 in rects)
                clicks += 1
            before = after
    assert clicks > 200


def test_search_and_swe_style(corpus):
    for d in corpus["search"]:
        for turn in d["turns"]:
            action = json.loads(turn["action"])
            if action["action"] == "search":
                assert turn["observation"].startswith(f'Search results for "{action["query"]}"')
    views = submits = 0
    for d in corpus["swe"]:
        for turn in d["turns"]:
            call = json.loads(turn["action"])
            if call["arguments"].get("command") == "view" and call["arguments"]["path"].endswith(".py"):
                assert re.search(r"^ +\d+\t", turn["observation"], re.M)
                views += 1
            if call["name"] == "submit" and d["outcome"] and d["outcome"]["success"]:
                assert turn["observation"].startswith("diff --git a/src/")
                submits += 1
    assert views > 100 and submits > 20


def _shingles(d: dict, k: int = 5) -> set[tuple[str, ...]]:
    text = "\n".join(f"{t['action']}\n{t['observation']}" for t in d["turns"])
    words = [w.lower() for w in regex.findall(r"[\p{L}\p{N}_]+", text)]
    return {tuple(words[i : i + k]) for i in range(max(1, len(words) - k + 1))}


@pytest.mark.parametrize("domain", SIX)
def test_few_near_duplicates(corpus, domain):
    shingles = [_shingles(d) for d in corpus[domain]]
    near = set()
    for i, j in itertools.combinations(range(len(shingles)), 2):
        a, b = shingles[i], shingles[j]
        if min(len(a), len(b)) >= 0.8 * max(len(a), len(b)) and len(a & b) >= 0.8 * len(a | b):
            near.add(j)
    assert len(near) <= 0.05 * len(shingles), sorted(near)


@pytest.mark.parametrize("domain", SIX)
def test_the_native_flag_for_a_domain_without_a_native_form_is_one_line(domain, tmp_path):
    from tests.helpers import lwm_in_process

    proc = lwm_in_process("demo", "-d", domain, "-o", str(tmp_path / "demo"), "--native")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"lwm: error: --native: the {domain} demo has no native log format but "
                                        "lwm-jsonl (write it without --native); domains with one: android"]
    assert not (tmp_path / "demo").exists()
    assert lwm_in_process("demo", "-d", "android", "-o", str(tmp_path / "android"), "-n", "2",
                          "--native").returncode == 0
