"""Classification: the SPEC truth table at every boundary, the paper's intuitions on real text, changed tables."""

from __future__ import annotations

import csv
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from masking.classify import TurnScore, classify, keep_ratio, score_turn
from masking.stats import TurnStats, turn_stats
from masking.table import default_table, load_table
from schemas.errors import ConfigError

LONG = 1000  # an observation length well above the `short` bound


def stats(ol: float, nov: float, r: float, obs_chars: int = LONG) -> TurnStats:
    return TurnStats(ol=ol, nov=nov, jac=0.0, r=r, obs_chars=obs_chars)


TRUTH_TABLE = {
    # echo: OL >= 0.70 and Nov < 0.30
    "echo at ol=0.70": (stats(0.70, 0.29, 1.0), "echo"),
    "ol=0.69 is only boilerplate": (stats(0.69, 0.29, 1.0), "boilerplate"),
    "nov=0.30 is only boilerplate": (stats(0.70, 0.30, 1.0), "boilerplate"),
    "echo wins over boilerplate and transform": (stats(0.80, 0.10, 0.5), "echo"),
    # boilerplate: OL >= 0.50 and Nov < 0.50
    "boilerplate at ol=0.50": (stats(0.50, 0.49, 1.0), "boilerplate"),
    "ol=0.49 at r=1 is other": (stats(0.49, 0.49, 1.0), "other"),
    "boilerplate wins over transform": (stats(0.60, 0.40, 0.5), "boilerplate"),
    "nov=0.50 is not boilerplate": (stats(0.50, 0.50, 1.0), "action"),
    # transform: Nov < 0.50 and R < 1
    "transform below r=1": (stats(0.0, 0.49, 0.99), "transform"),
    "r=1 is not transform": (stats(0.0, 0.49, 1.0), "other"),
    "nov=0.50 is not transform": (stats(0.0, 0.50, 0.99), "action"),
    # expansion: OL >= 0.50 and Nov >= 0.50 and R > 1.5
    "expansion just above r=1.5": (stats(0.50, 0.50, 1.51), "expansion"),
    "r=1.5 is not expansion": (stats(0.50, 0.50, 1.5), "other"),
    "r=1.5 but short (64 chars) is action": (stats(0.50, 0.50, 1.5, obs_chars=64), "action"),
    "r=1.5 and 65 chars is other": (stats(0.50, 0.50, 1.5, obs_chars=65), "other"),
    "ol=0.49 is not expansion": (stats(0.49, 0.90, 2.0), "retrieval"),
    "expansion wins over retrieval": (stats(0.90, 0.90, 5.0), "expansion"),
    # retrieval: Nov >= 0.60 and R > 1
    "retrieval at nov=0.60": (stats(0.0, 0.60, 1.01), "retrieval"),
    "nov=0.59 is not retrieval": (stats(0.0, 0.59, 1.01), "other"),
    "nov=0.59 but short is action": (stats(0.0, 0.59, 1.01, obs_chars=64), "action"),
    "r=1 is not retrieval": (stats(0.0, 0.60, 1.0), "action"),
    # action: Nov >= 0.50 and (R <= 1 or short)
    "action at r=1": (stats(0.0, 0.50, 1.0), "action"),
    "action when short at 64 chars": (stats(0.0, 0.55, 3.0, obs_chars=64), "action"),
    "65 chars is not short": (stats(0.0, 0.55, 3.0, obs_chars=65), "other"),
    "all new and tiny": (stats(0.0, 1.0, 0.01, obs_chars=4), "action"),
    # the empty-set values of SPEC §5
    "empty observation (nov=0, r=0)": (stats(0.0, 0.0, 0.0, obs_chars=0), "transform"),
}


@pytest.mark.parametrize("turn, expected", TRUTH_TABLE.values(), ids=TRUTH_TABLE.keys())
def test_truth_table(turn, expected):
    assert classify(turn) == expected
    assert classify(turn, default_table()) == expected


def test_every_category_is_reached_by_the_truth_table():
    assert {expected for _, expected in TRUTH_TABLE.values()} == set(default_table().names)


def test_keep_ratios_of_the_default_table():
    keeps = {name: keep_ratio(name) for name in default_table().names}
    assert keeps == {
        "echo": 0.05,
        "boilerplate": 0.10,
        "transform": 0.50,
        "expansion": 1.0,
        "retrieval": 1.0,
        "action": 1.0,
        "other": 1.0,
    }


def _words(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def test_exact_boundaries_from_real_strings():
    action = " ".join(_words("w", 10))
    # 7 of 10 action words echoed plus 2 new: OL = 0.7 exactly, Nov = 2/9 -> echo.
    echo = turn_stats(action, " ".join(_words("w", 7) + _words("n", 2)))
    assert (echo.ol, classify(echo)) == (0.7, "echo")
    # 7 echoed plus 3 new: Nov = 0.3 exactly -> no longer echo.
    mirror = turn_stats(action, " ".join(_words("w", 7) + _words("n", 3)))
    assert (mirror.nov, classify(mirror)) == (0.3, "boilerplate")


def test_short_bound_from_real_strings():
    action = "a b c"  # OL = 1/3 and Nov = 1/2 below; R far above 1
    at_bound = "a " + "n" * 62
    over_bound = "a " + "n" * 63
    assert (len(at_bound), score_turn(action, at_bound).category) == (64, "action")
    assert (len(over_bound), score_turn(action, over_bound).category) == (65, "other")


def test_empty_action_and_empty_observation_from_real_strings():
    assert score_turn("", "total 0\ndrwxr-xr-x 2 root root 40 .\n").category == "retrieval"  # R = len(obs) = 34
    assert score_turn("", "y").category == "action"  # R = 1, all new
    assert score_turn('{"keystrokes": "clear\\n"}', "") == TurnScore(
        TurnStats(ol=0.0, nov=0.0, jac=0.0, r=0.0, obs_chars=0), "transform", 0.5
    )
    assert score_turn("", "").category == "transform"


def test_punctuation_only_action():
    assert score_turn("{}", "ok") == TurnScore(TurnStats(ol=0.0, nov=1.0, jac=0.0, r=1.0, obs_chars=2), "action", 1.0)


def _call(name: str, **arguments) -> str:
    return json.dumps({"name": name, "arguments": arguments}, separators=(", ", ": "))


README = """# tinyhttp

A minimal HTTP/1.1 server written in C for embedded boards.

## Build

    make && make install

The server listens on port 8080 by default; pass `-p` to change it.
Static files are served from ./public, and every request is logged to stderr.
"""
THOUGHT = "The failing test imports parse_header before it is defined, so I should move the helper above its first use."
PAGE = (
    "Install\nDownload the installer for your platform from the releases page, run it, and follow the prompts. "
    "On Linux, extract the archive to /opt and add the bin folder to your PATH. Verify the installation by "
    "running the version command; it prints the release number and build date."
)
REVIEW = (
    "I ordered the blue kettle last week. It arrived two days late, the box was dented, and the lid does not "
    "close properly, so it leaks when boiling. Customer support has not answered my two emails. I want a refund."
)
EVENT = {
    "title": "Design review",
    "date": "2025-03-04",
    "start": "10:00",
    "end": "11:00",
    "attendees": ["ana@example.com", "li@example.com"],
}
INTUITIONS = {
    "a file read returning its contents": (
        _call("read_file", path="/home/dev/tinyhttp/README.md"),
        README,
        "retrieval",
    ),
    "think(x) -> {thought: x}": (_call("think", thought=THOUGHT), json.dumps({"thought": THOUGHT}), "echo"),
    "send_email -> sent": (
        _call("send_email", to="maria@example.com", subject="Q3 budget", body="Hi Maria, the Q3 budget is attached."),
        '"sent"',
        "action",
    ),
    "a fetch returning the page plus metadata": (
        _call("fetch", url="https://docs.example.org/guide/install"),
        json.dumps(
            {
                "url": "https://docs.example.org/guide/install",
                "status": 200,
                "content_type": "text/html; charset=utf-8",
                "title": "Install - Example Guide",
                "content": PAGE,
            }
        ),
        "expansion",
    ),
    "a long input -> a status word": (
        _call("classify_ticket", text=REVIEW, labels=["billing", "shipping", "defect", "refund", "other"]),
        '"refund"',
        "transform",
    ),
    "an API mirroring its request": (
        _call("create_event", **EVENT),
        json.dumps({"id": "evt_5f2c91", "status": "confirmed", **EVENT, "created": "2025-02-27T16:02:11Z"}),
        "boilerplate",
    ),
}


@pytest.mark.parametrize("action, observation, expected", INTUITIONS.values(), ids=INTUITIONS.keys())
def test_paper_intuitions_on_real_text(action, observation, expected):
    score = score_turn(action, observation)
    assert score.category == expected
    assert score.keep == keep_ratio(expected)


def test_think_echo_has_no_new_words():
    score = score_turn(_call("think", thought=THOUGHT), json.dumps({"thought": THOUGHT}))
    assert score.stats.nov == 0.0


def _mcp_atlas_turns(shared_data) -> dict[str, tuple[str, str]]:
    """(action, observation) of the first call of each tool in the mcp-atlas sample, as an adapter would pair them."""
    csv.field_size_limit(1 << 30)
    turns: dict[str, tuple[str, str]] = {}
    with open(shared_data / "openai-messages" / "mcp-atlas" / "sample_tasks.csv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            calls = {}
            for message in json.loads(row["TRAJECTORY"]):
                for call in message.get("tool_calls") or []:
                    fn = call["function"]
                    calls[call["id"]] = (fn["name"], _call(fn["name"], **json.loads(fn["arguments"])))
                if message.get("role") == "tool":
                    name, action = calls[message["tool_call_id"]]
                    content = message["content"]
                    observation = content if isinstance(content, str) else "\n".join(p["text"] for p in content)
                    turns.setdefault(name, (action, observation))
    return turns


def test_real_mcp_turns_from_shared_data(shared_data):
    turns = _mcp_atlas_turns(shared_data)
    read = score_turn(*turns["filesystem_read_text_file"])  # a CSV file's contents
    assert (read.category, read.stats.obs_chars) == ("retrieval", 6518)
    fetch = score_turn(*turns["fetch_fetch"])  # "Contents of <url>:" then the page text
    assert (fetch.category, fetch.stats.obs_chars) == ("expansion", 14918)
    listing = score_turn(*turns["filesystem_list_allowed_directories"])  # "Allowed directories:\n/data"
    assert (listing.category, listing.stats.obs_chars) == ("action", 26)


def _spec_reference(s: TurnStats) -> str:
    """SPEC §5 written out by hand, in its precedence order."""
    if s.ol >= 0.7 and s.nov < 0.3:
        return "echo"
    if s.ol >= 0.5 and s.nov < 0.5:
        return "boilerplate"
    if s.nov < 0.5 and s.r < 1:
        return "transform"
    if s.ol >= 0.5 and s.nov >= 0.5 and s.r > 1.5:
        return "expansion"
    if s.nov >= 0.6 and s.r > 1:
        return "retrieval"
    if s.nov >= 0.5 and (s.r <= 1 or s.obs_chars <= 64):
        return "action"
    return "other"


_GRID = st.sampled_from([0.0, 0.29, 0.3, 0.49, 0.5, 0.59, 0.6, 0.69, 0.7, 1.0])
_ANY_STATS = st.builds(
    TurnStats,
    st.one_of(_GRID, st.floats(0, 1)),
    st.one_of(_GRID, st.floats(0, 1)),
    st.floats(0, 1),
    st.one_of(st.sampled_from([0.0, 0.99, 1.0, 1.01, 1.5, 1.51]), st.floats(0, 1e6)),
    st.sampled_from([0, 1, 63, 64, 65, 10_000]),
)


@given(_ANY_STATS)
def test_default_table_agrees_with_the_spec_written_by_hand(turn):
    assert classify(turn) == _spec_reference(turn)


@given(st.text(max_size=300), st.text(max_size=300))
def test_classification_is_total_and_deterministic(action, observation):
    first = score_turn(action, observation)
    assert first.category in default_table().names
    assert score_turn(action, observation) == first
    assert first.keep == keep_ratio(first.category)


@given(_ANY_STATS)
def test_novel_turns_always_keep_everything_by_default(turn):
    if turn.nov >= 0.5:
        assert keep_ratio(classify(turn)) == 1.0


@given(st.text(max_size=300), st.text(max_size=300))
def test_novel_real_strings_always_keep_everything_by_default(action, observation):
    score = score_turn(action, observation)
    if score.stats.nov >= 0.5:
        assert score.keep == 1.0


def _default_mapping() -> dict:
    return default_table().to_dict()


def test_changed_keep_changes_the_keep_not_the_category():
    mapping = _default_mapping()
    mapping["categories"][0]["keep"] = 0.2
    table = load_table(mapping)
    think = (_call("think", thought=THOUGHT), json.dumps({"thought": THOUGHT}))
    assert score_turn(*think).keep == 0.05
    assert score_turn(*think, table) == score_turn(*think)._replace(keep=0.2)
    assert keep_ratio("echo", table) == 0.2


def test_reordered_precedence_changes_the_category():
    mapping = _default_mapping()
    echo, boilerplate = mapping["categories"][0], mapping["categories"][1]
    mapping["categories"][0], mapping["categories"][1] = boilerplate, echo
    table = load_table(mapping)
    assert table.names[:2] == ("boilerplate", "echo")
    assert classify(stats(0.9, 0.0, 1.0), table) == "boilerplate"
    assert classify(stats(0.9, 0.0, 1.0)) == "echo"


def test_changed_short_bound_changes_the_category():
    mapping = _default_mapping()
    mapping["short_chars"] = 100
    turn = stats(0.0, 0.55, 3.0, obs_chars=80)
    assert classify(turn) == "other"
    assert classify(turn, load_table(mapping)) == "action"


def test_user_categories_and_a_jaccard_rule():
    table = load_table(
        {
            "categories": [
                {"name": "near_copy", "when": "jac >= 0.9", "keep": 0.0},
                {"name": "rest", "when": "otherwise", "keep": 1.0},
            ]
        }
    )
    assert score_turn("status: ok", "Status: OK", table) == TurnScore(
        turn_stats("status: ok", "Status: OK"), "near_copy", 0.0
    )
    assert score_turn("ls", "a.txt b.txt", table).category == "rest"


def test_unknown_category_has_no_keep_ratio():
    with pytest.raises(ConfigError, match=r"unknown turn category 'echoes'.*echo, boilerplate"):
        keep_ratio("echoes")
