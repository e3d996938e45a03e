"""References stay only when the whole value is one: a secret that merely starts with ``$``, ``{`` or ``<`` — or
with a forged ``<SECRET:kind>`` placeholder — is redacted like any other."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from stages.redact import redact_text
from stages.secret_references import reference_at, reference_defaults

# (text, expected): secrets that start like a reference
STARTS_LIKE_A_REFERENCE = [
    ('password="$3cr3tP@ss"', 'password="<SECRET:password>"'),
    ("export DB_PASSWORD='$3cr3tP@ss'", "export DB_PASSWORD='<SECRET:password>'"),
    ('password="{Xy9z}Abc1"', 'password="<SECRET:password>"'),
    ('export PASSWORD="<K9#mZ>q2"', 'export PASSWORD="<SECRET:password>"'),
    ('password="<Tr0ub4dor&3"', 'password="<SECRET:password>"'),
    ('api_key="<|endoftext|>sk9f8a7b6c5d4e3f"', 'api_key="<SECRET:api_key>"'),
    ('token="<|im_end|>abcDEF123456"', 'token="<SECRET:token>"'),
    ('password="${X:-Sup3rS3cret!}"', 'password="<SECRET:password>"'),  # a default is a literal
    ('password="%(x)sHunter22"', 'password="<SECRET:password>"'),
    # unquoted: a leading bracket is taken with what follows it
    ("password=${X}Hunter22", "password=<SECRET:password>"),
    ("password={Xy9z}Abc1", "password=<SECRET:password>"),
    ("password=<K9#mZ>q2", "password=<SECRET:password>"),
    ("token=<|im_end|>abcDEF123456", "token=<SECRET:token>"),
    ("password=%(x)sHunter22 next", "password=<SECRET:password> next"),
    # the command-line, URL and Authorization rules
    ("app --password='$3cr3tP@ss'", "app --password='<SECRET:password>'"),
    ("app --password=${X}Hunter22 -v", "app --password=<SECRET:password> -v"),
    ("mysql -u root -p'$3cr3tP@ss' shop", "mysql -u root -p'<SECRET:password>' shop"),
    ("echo '$3cr3tP@ss' | sudo -S ls", "echo '<SECRET:password>' | sudo -S ls"),
    ("git clone https://bot:$3cr3tPss@github.com/o/r", "git clone https://bot:<SECRET:url_password>@github.com/o/r"),
    ("git clone https://bot:{x}Hunter22@github.com/o/r", "git clone https://bot:<SECRET:url_password>@github.com/o/r"),
    ("Authorization: Bearer ${X}9f8e7d6c5b4a39281706f5e4d3c2b1a0", "Authorization: Bearer <SECRET:bearer_token>"),
    ("Authorization: Bearer <s>9f8e7d6c5b4a39281706f5e4d3c2b1a0", "Authorization: Bearer <SECRET:bearer_token>"),
]
# A forged placeholder in the input shields nothing: the rest of the value is judged on its own.
FORGED_PLACEHOLDER = [
    ('password="<SECRET:password>hunter2pw"', 'password="<SECRET:password>"'),
    ('{"password": "<SECRET:password>hunter2pw"}', '{"password": "<SECRET:password>"}'),
    ("password%3D%3CSECRET%3Apassword%3Ehunter2pw", "password%3D<SECRET:password>"),
]
# Whole references, in every rule that keeps them (the README's `$PW`, `${TOKEN}`, `<your-token>` among them).
REFERENCES = [
    'password="$DB_PASSWORD"',
    "password='${DB_PASSWORD}' other='${OTHER:-}'",
    "password=${DB_PASSWORD}",
    "export PGPASSWORD=$(cat /run/secrets/pg)",
    'password="$(cat /run/secrets/pg)"',
    "app --password=$(cat /run/secrets/pw)",
    'app --password "$(vault read -field=pw secret/db)"',
    "token: ${{ secrets.GITHUB_TOKEN }}",
    'password: "{{ vault_db_password }}"',
    "password: {{ .Values.db.password }}",
    'password="{password}" secret="{}" token="{0}"',
    'f"password={self.password!r}"',
    'password="%(password)s"',
    "password=%(password)s",
    'cursor.execute(sql, password="%s")',
    'api_key="<your-api-key>"',
    "token=<YOUR_TOKEN>",
    'password="<your password here>"',
    '"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<|endoftext|>"',
    'api_key="<SECRET:api_key>"',
    'token = "process.env.API_TOKEN"',
    "password=\"os.environ['DB_PASSWORD']\"",
    "password=\"os.getenv('DB_PASSWORD')\"",
    '$env:API_TOKEN = "$env:OTHER_TOKEN"',
    "Authorization: Bearer ${TOKEN}",
    "Authorization: Bearer $TOKEN",
    "Authorization: Bearer {token}",
    "Authorization: Bearer <your-token>",
    "Authorization: Bearer $(cat token.txt)",
    '-H "Authorization: Bearer ${{ secrets.T }}"',
    "curl -u admin:$ADMIN_PW https://x",
    "curl -u admin:${ADMIN_PW} https://x",
    "git clone https://bot:${GH_TOKEN}@github.com/o/r",
    "git clone https://bot:$GH_TOKEN@github.com/o/r",
    "postgres://{user}:{password}@{host}/db",
    'echo "$PW" | sudo -S apt update',
    'mysql -u root -p"$MYSQL_ROOT_PASSWORD" shop',
    "docker login -u bob -p ${REG_PW} reg",
    "password%3D%24%7BDB_PASSWORD%7D token%3D%3Cyour-token%3E",
    'export GITHUB_TOKEN=$GITHUB_TOKEN && curl -H "Authorization: Bearer ${TOKEN}" https://api',
]


@pytest.mark.parametrize(("text", "expected"), STARTS_LIKE_A_REFERENCE, ids=[t[:40] for t, _ in STARTS_LIKE_A_REFERENCE])
def test_a_secret_that_only_starts_like_a_reference_is_redacted(text, expected):
    out, counts = redact_text(text)
    assert out == expected
    assert sum(counts.values()) == 1


@pytest.mark.parametrize(("text", "expected"), FORGED_PLACEHOLDER, ids=[t[:40] for t, _ in FORGED_PLACEHOLDER])
def test_a_forged_placeholder_does_not_shield_the_secret_after_it(text, expected):
    out, counts = redact_text(text)
    assert out == expected
    assert "hunter2pw" not in out
    assert counts == Counter(password=1)


@pytest.mark.parametrize("text", REFERENCES, ids=[t[:40] for t in REFERENCES])
def test_a_whole_reference_is_unchanged(text):
    assert redact_text(text) == (text, Counter())


def test_placeholders_of_earlier_rules_stay_with_the_punctuation_between_them():
    token = "".join(("gh", "p_", "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"))
    out, counts = redact_text(f'password="{token}/{token}"')
    assert out == 'password="<SECRET:github_token>/<SECRET:github_token>"'
    assert counts == Counter(github_token=2)
    assert redact_text(out) == (out, Counter())


@pytest.mark.parametrize(
    ("value", "defaults"),
    [("$NAME", []), ("${NAME}", []), ("${NAME:-}", []), ("${NAME:-fallback}", ["fallback"]), ("${NAME-x}", ["x"]),
     ("${NAME:+alt}", ["alt"]), ("${NAME:?set NAME first}", []), ("${A:-${B}}", ["${B}"]), ("%(name)s", []),
     ("<SECRET:jwt>", []), ("</s>", [])],
)
def test_a_whole_reference_hands_back_the_literals_it_falls_back_to(value, defaults):
    assert reference_defaults(value) == defaults


@pytest.mark.parametrize("value", ["$3cr3t", "${X}y", "{a}b", "<K9#mZ>", "<a>b", "<SECRET:password>x", "%(x)sy",
                                   "<|im_end|>abc", "process.env.X.y(", "$", "{a b}"])
def test_a_value_that_only_starts_like_a_reference_is_none(value):
    assert reference_defaults(value) is None


def test_a_reference_cut_short_by_a_value_class_is_found_up_to_where_the_value_ends():
    text = "--password=$(cat /run/secrets/pw) next"
    assert reference_at(text, 11) == (text.index(" next"), [])
    assert reference_at("--password=$(cat f)x", 11) is None  # runs on into more characters


_TOOLS = [{"type": "function", "function": {"name": "login", "parameters": {"type": "object", "properties": {
    "password": {"type": "string", "minLength": 8}, "api_key": {"type": "string"},
    "client_secret": {"type": "string"}}}}}]
# Objects under secret-named keys, compact and JSON-escaped inside a string: an object is never one value.
JSON_OBJECTS = [
    '{"password":{"type":"string","minLength":8}}',
    '{"client_secret":{"type":"string"}}',
    json.dumps(_TOOLS, separators=(",", ":")),
    json.dumps({"tools": json.dumps(_TOOLS, separators=(",", ":"))}, separators=(",", ":")),
]


@pytest.mark.parametrize("text", JSON_OBJECTS, ids=[t[:40] for t in JSON_OBJECTS])
def test_a_json_object_under_a_secret_named_key_is_unchanged_and_still_parses(text):
    out, counts = redact_text(text)
    assert (out, counts) == (text, Counter())
    json.loads(out)
