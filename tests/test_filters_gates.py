"""Filter regexes searched alternative by alternative behind their literals: same answers as the one regex."""

from __future__ import annotations

import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stages.filters import CAPTCHA, HTTP_ERRORS, REJECTIONS, env_failure_of, is_rejection
from stages.literal_gates import fold_text
from tests.helpers import make_traj

# The patterns as they were written as single regexes: the oracle of `Alternation.found`.
ORACLES = {
    "rejections": re.compile(
        r"(?im)^[ \t]*invalid action\b|\bformat error\b|\bcannot be exec\w*"
        r"|\byour proposed edit has introduced new syntax error|\bcommand not found\s*$"
        r"|\bunknown (?:command|tool|action)\b"
        r"|\binvalid (?:tool|arguments?|parameters?|json)\b|\bvalidation errors? for\b|\bjsondecodeerror\b"
        r"|\b(?:failed to|could not|unable to) parse\b"
    ),
    "captcha": re.compile(
        r"(?i)\b(?:re|h)?captcha\b|\bverify (?:that )?you(?:'|’)?re human\b|\bverify you are (?:a )?human\b"
        r"|\bi(?:'|’)?m not a robot\b|\bi am not a robot\b|\bunusual traffic from your computer network\b"
    ),
    "http": re.compile(
        r"(?i)\b(?:400[ \t]*[-:–]?[ \t]*bad request|401[ \t]*[-:–]?[ \t]*unauthorized|403[ \t]*[-:–]?[ \t]*forbidden"
        r"|404[ \t]*[-:–]?[ \t]*not found|429[ \t]*[-:–]?[ \t]*too many requests"
        r"|500[ \t]*[-:–]?[ \t]*internal server error|502[ \t]*[-:–]?[ \t]*bad gateway"
        r"|503[ \t]*[-:–]?[ \t]*service (?:temporarily )?unavailable|504[ \t]*[-:–]?[ \t]*gateway time-?out)\b"
        r"|this site can(?:'|’)?t be reached|we(?:'|’)?re having trouble finding that site"
        r"|(?-i:\bERR_(?:CONNECTION|NAME_NOT_RESOLVED|INTERNET_DISCONNECTED|TIMED_OUT|ADDRESS_UNREACHABLE"
        r"|NETWORK_CHANGED|EMPTY_RESPONSE|TOO_MANY_REDIRECTS|SSL_PROTOCOL_ERROR|CERT_)\w*)"
    ),
}
ALTERNATIONS = {"rejections": REJECTIONS, "captcha": CAPTCHA, "http": HTTP_ERRORS}
_ALL_CHARS = "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF)


def test_fold_maps_every_character_a_letter_matches_to_that_letter():
    # Whatever `re` matches case-insensitively to an ASCII letter (all of Unicode tried), the fold turns into it,
    # so a match of an alternative always leaves its literal in the folded text.
    for letter in "abcdefghijklmnopqrstuvwxyz":
        matched = re.findall(f"(?i){letter}", _ALL_CHARS)
        assert len(matched) >= 2, letter
        for ch in matched:
            assert fold_text(ch) == letter, (letter, hex(ord(ch)))
    assert fold_text("İNVALİD ACTıON ſ K") == "invalid action s k"


_ALTERNATIVES = [(name, alt, flags, literal) for name, a in ALTERNATIONS.items()
                 for flags in [re.IGNORECASE | (re.MULTILINE if name == "rejections" else 0)]
                 for alt, literal in a.alternatives]


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_every_match_of_an_alternative_holds_its_literal(data):
    name, alt, flags, literal = data.draw(st.sampled_from(_ALTERNATIVES))
    text = data.draw(st.from_regex(re.compile(alt, flags)))
    match = re.compile(alt, flags).search(text)
    assert match is not None
    assert literal == literal.lower()
    assert literal in fold_text(match.group(0)), (name, alt, literal, match.group(0))


_PIECES = [lit for _, _, _, lit in _ALTERNATIVES] + [
    "Invalid Action", "INVALID JSON", "failed to parse", "Could not Parse", "ınvalid action", "İnvalid tool",
    "parſe", "unable to parſe", "unknown Tool", "Validation Errors for", "JSONDecodeError",
    "Traceback (most recent call last):", "bash: foo: command not found  ", "Format Error", "cannot be executed",
    "reCAPTCHA", "hcaptcha", "verify you’re human", "I'm not a robot", "I am not a robot", "verify that you're Human",
    "404 - Not Found", "404:not found", "503 Service Temporarily Unavailable", "504 Gateway Time-out", "502–Bad Gateway",
    "This site can’t be reached", "We're having trouble finding that site", "ERR_CONNECTION_REFUSED", "err_connection",
    "ERR_CERT_X", "400", "bad request", "\n", " ", "\t", "x", "_", "-", ":", "’", "'", "K", "ſ", "é", "İ", "ı",
]


@pytest.mark.parametrize("name", sorted(ALTERNATIONS))
def test_found_equals_the_single_regex(name):
    @settings(max_examples=400, deadline=None)
    @given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=6), max_size=12))
    def check(parts):
        text = "".join(parts)
        assert ALTERNATIONS[name].found(text) == bool(ORACLES[name].search(text)), text

    check()


def test_rejections_and_env_failures_of_known_texts():
    assert is_rejection("bash: foo: command not found\n")
    assert is_rejection("Error: Invalid arguments for tool")
    assert not is_rejection("  Traceback (most recent call last):\n  File x")  # a program ran and crashed
    assert is_rejection("unable to PARSE the request")
    assert is_rejection("İnvalid action; see parse")  # the regex's own case folding, with the keyword gate open
    assert not is_rejection("the parser could not finish")
    assert not is_rejection("all fine, 3 files changed")
    web = make_traj(3, seed=1)
    web.domain = "web"
    web.turns[1].observation = "page\n503 Service Unavailable\n"
    assert env_failure_of(web) == "http_error"
    web.turns[1].observation = "Please verify you’re human"
    assert env_failure_of(web) == "captcha"
    web.turns[1].observation = "node: ERR_INVALID_ARG_TYPE at 404 items"
    assert env_failure_of(web) is None


@pytest.mark.parametrize("gate", ["curl", "netrc"])
def test_redaction_gates_open_on_every_text_their_rule_matches(gate):
    from stages.redact import _RULES, open_gates, redact_text

    (rule,) = [r for r in _RULES if r.gate == gate]

    @settings(max_examples=300, deadline=None)
    @given(st.from_regex(rule.pattern), st.text(max_size=5), st.text(max_size=5))
    def check(found, before, after):
        text = before + " " + found + " " + after
        assert rule.pattern.search(text) is not None
        assert gate in open_gates(text), text

    check()
    assert redact_text("machine h login u password hunter2x9")[1] == {"password": 1}
    assert redact_text("curl -u admin:S3cr3tPw9 https://x")[1] == {"password": 1}
    assert "netrc" not in open_gates("Machine login: token Password") and "curl" not in open_gates("CURL --User a:b")
