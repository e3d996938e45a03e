"""Values under a key that only says ``token`` or ``secret``: ordinary ML and API data stays, real tokens go.

A key named ``token`` also names a tokenizer's special tokens, logprob entries and pagination cursors, so its value
must look made by a machine; a ``secret`` may be chosen by a person, so only phrases, URLs, special tokens and short
words stay under it.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from stages.redact import redact_text

TOKENIZER_CONFIG = json.dumps({"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                               "mask_token": "[MASK]", "bos_token": "<s>", "eos_token": "</s>"})

KEPT = [
    TOKENIZER_CONFIG,
    json.dumps(json.dumps({"mask_token": "[MASK]", "additional_special_tokens": ["[unused1]"], "pad_token": "[unused0]"})),
    "tokenizer = BertTokenizer(vocab, mask_token='[MASK]', cls_token='[CLS]', sep_token='[SEP]', unk_token='<unk>')",
    '{"eos_token": "<|endoftext|>", "pad_token": "<|finetune_right_pad_id|>", "bos_token": "<|begin_of_text|>"}',
    json.dumps({"token": "Hello", "logprob": -0.31, "top_logprobs": [{"token": " world", "logprob": -1.2},
                                                                     {"token": "ĠHello", "logprob": -2.5}]}),
    '{\\"token\\": \\"\\\\u2019s\\", \\"logprob\\": -0.02}',  # an escaped character inside escaped JSON
    "token: 'Hello' id: 15496\ntoken: 'unbelievable' id: 995",
    '{"nextPageToken": "CAoQAA", "items": []}',
    '{"nextPageToken": "CiAKGjBpNDd2Nmp2Zml2cXRwYjBpOXA3cmE3aXE2OBABGAE", "kind": "drive#fileList"}',
    '{"NextToken": "AQICAHh4dGVzdHRva2VuMTIzNDU2Nzg5MA==", "Items": []}',
    "gcloud logging read --page-token=CiAKGjBpNDd2Nmp2Zml2cXRwYjBpOXA3cmE3aXE2OBAB",
    '{"og:token": "https://cdn.example.com/assets/v2/banner_2024.png"}',
    "find . -token '*.log' -o -token 'build_*'",
    'The secret: "rosebud" was the sled.',
    '{"secret": "sellers", "note": "secret: the recipe has 3 parts"}',
]

# (text, kind): real tokens and secrets under the same generic keys
REDACTED = [
    ('{"token": "9f8e7d6c5b4a39281706f5e4d3c2b1a0"}', "token"),
    ('{"token": "Ab3De5Gh\\/Jk9Mn1Pq3St5=="}', "token"),  # base64 with JSON's escaped slash (PHP writes it)
    ('{"access_token": "Ab3De5Gh7Jk9Mn1Pq3St5", "token_type": "bearer"}', "token"),
    ('csrf_token = "abc123def456"', "token"),
    ("TOKEN='xYzAbCdEfGhIjKlMnOpQ'", "token"),  # letters only, but changing case all the time
    ("--token Zx81kQpL0mNa9bc7Yt2", "token"),
    ('{"secret": "Qx8~abc.DEF_12345"}', "secret"),
    ("SECRET_KEY = 'mysecretkey'", "secret"),  # a chosen secret is still one
    ('{"secret": "s3cr3t"}', "secret"),
    ("client_secret: 'django-insecure-9x8y7z'", "secret"),
]


@pytest.mark.parametrize("text", KEPT, ids=[t[:30] for t in KEPT])
def test_a_value_that_is_no_secret_under_a_generic_key_is_unchanged(text):
    assert redact_text(text) == (text, Counter())


@pytest.mark.parametrize(("text", "kind"), REDACTED, ids=[t[:30] for t, _ in REDACTED])
def test_a_real_token_or_secret_under_a_generic_key_is_still_redacted(text, kind):
    out, counts = redact_text(text)
    assert counts == Counter({kind: 1}), out
    assert f"<SECRET:{kind}>" in out
