"""Keys of more services found by their prefix alone, wherever they stand: Groq (``gsk_``), Replicate (``r8_``), xAI
(``xai-``), Perplexity (``pplx-``), HashiCorp Vault (``hvs.``, ``hvb.``, ``hvr.``) and age (``AGE-SECRET-KEY-1``).

Token-shaped strings are assembled from pieces at run time so this file itself holds no token a scanner would flag.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stages.redact import _RULES, open_gates, redact_text

BODY = "Xy7Qk2Lm9Np4Rs8Tv3Wz6Bc1Df5Gh0Jk"  # 32 characters, letters and digits

GROQ = "gs" + "k_" + (BODY + BODY)[:52]
REPLICATE = "r" + "8_" + (BODY + BODY)[:37]
XAI = "xa" + "i-" + (BODY * 3)[:80]
PERPLEXITY = "pp" + "lx-" + (BODY * 2)[:48]
VAULT = "hv" + "s." + "CAESI" + (BODY * 3)[:90]
AGE = "AGE-SECRET-" + "KEY-1" + ("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L" * 2)[:58]

TOKENS = [
    (f"export GROQ_KEY_FOR_CI=1; curl -d @q.json https://api.groq.com?k={GROQ}", GROQ, "groq_key"),
    (f"client = Replicate(api_token='{REPLICATE}')", REPLICATE, "replicate_token"),
    (f"I used {XAI} for the grok calls.", XAI, "xai_key"),
    (f"key: {PERPLEXITY}", PERPLEXITY, "perplexity_key"),
    (f"$ vault login {VAULT}\nSuccess! You are now authenticated.", VAULT, "vault_token"),
    (f"# created: 2024-01-01\n# public key: age1xyz\n{AGE}\n", AGE, "age_secret_key"),
]

LOOKALIKES = [
    "gsk_" + "config_loader_module_for_the_tests_of_this_project_ok",  # a name: no digit, and underscores
    "the r8_ register holds 37 bits",
    "xai-" + "explainability-toolkit-and-more-words-than-sixty-characters-long",
    "pplx-" + "a" * 48,  # no digit
    "hvs.example",
    "AGE-SECRET-KEY-1 is how age secret keys start",
]


@pytest.mark.parametrize(("text", "token", "kind"), TOKENS, ids=[k for _, _, k in TOKENS])
def test_a_service_key_is_replaced_by_its_prefix_alone(text, token, kind):
    out, counts = redact_text(text)
    assert token not in out
    assert out == text.replace(token, f"<SECRET:{kind}>")
    assert counts == Counter({kind: 1})


@pytest.mark.parametrize("text", LOOKALIKES, ids=[t[:20] for t in LOOKALIKES])
def test_a_word_that_only_starts_like_a_key_is_unchanged(text):
    assert redact_text(text) == (text, Counter())


_PREFIXES = ("gsk_", "r8_", "xai-", "pplx-", "hv[sbr]", "AGE-SECRET")
_TOKEN_RULES = [r for r in _RULES if r.pattern is not None and r.pattern.pattern.startswith(_PREFIXES)]


def test_every_prefix_has_its_rule():
    assert len(_TOKEN_RULES) == len(_PREFIXES)


@pytest.mark.parametrize("rule", _TOKEN_RULES, ids=[r.pattern.pattern[:12] for r in _TOKEN_RULES])
def test_a_gate_opens_on_every_text_its_rule_matches(rule):
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.from_regex(rule.pattern), st.text(max_size=5), st.text(max_size=5))
    def check(found, before, after):
        text = before + " " + found + " " + after
        if rule.pattern.search(text) is not None:
            assert rule.gate in open_gates(text), text

    check()
