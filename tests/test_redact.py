"""Secret redaction: every planted kind becomes its placeholder, look-alikes stay, nothing leaks end to end.

Secret-shaped strings are assembled from pieces at run time so this file itself holds no token a scanner
would flag.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.stats import Stats
from schemas.trajectory import Demonstration, Source, SystemPrompt, Trajectory, Turn
from stages.redact import build_redactor, redact_text, redact_trajectory
from tests.helpers import lwm_in_process


def _j(*parts: str) -> str:
    return "".join(parts)


AWS_ID = _j("AK", "IA", "Q3XAMPLE7KEY2ID4")
AWS_SECRET = _j("wJalrXUtnFEMI/K7MDENG/", "bPxRfiCYzEXAMPLEKEY")
GITHUB = _j("gh", "p_", "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8")
GITHUB_PAT = _j("github", "_pat_", "11ABCDEFG0abcdefghijkl_", "mnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg")
GITLAB = _j("gl", "pat-", "x8Yz3AbCdEfGhIjKlMnOp")
SLACK = _j("xo", "xb-", "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx")
SLACK_HOOK_PATH = _j("T0ABCDEF1/B0GHIJKL2/", "aBcDeFgHiJkLmNoPqRsTuVwX")
OPENAI = _j("sk", "-proj-", "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90")
ANTHROPIC = _j("sk", "-ant-", "api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe")
HF = _j("hf", "_", "AbCdEfGhIjKlMnOpQrStUvWxYz01234567")
STRIPE = _j("sk", "_live_", "51Hx2Yz3Ab4Cd5Ef6Gh7Ij8Kl")
NPM = _j("np", "m_", "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8")
PYPI = _j("pypi", "-AgEIcHlwaS5vcmc", "CJDk0NTI3YTMtNmE3Zi00YjQ1LWE2OTMtZTQ3MTgwYjE5ZTg0AAIq")
GCP_API = _j("AI", "za", "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q")
JWT = _j("ey", "JhbGciOiJIUzI1NiJ9", ".", "eyJzdWIiOiIxMjM0NTY3ODkwIn0", ".", "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U")
AZURE_KEY = _j("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq", "/K1SZFPTOtr/KBHBeksoGMGw==")
KEY_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj"
PEM = _j("-----BEGIN ", "PRIVATE KEY-----\n", KEY_BODY, "\n", KEY_BODY[::-1], "\n-----END ", "PRIVATE KEY-----")
KEY_ID = "0123456789abcdef0123456789abcdef01234567"

# (text with a secret, the text expected after redaction)
CASES = [
    (f"export AWS_ACCESS_KEY_ID={AWS_ID}", "export AWS_ACCESS_KEY_ID=<SECRET:aws_access_key>"),
    (f"export AWS_SECRET_ACCESS_KEY={AWS_SECRET}", "export AWS_SECRET_ACCESS_KEY=<SECRET:aws_secret_key>"),
    (f"aws_secret_access_key = {AWS_SECRET}", "aws_secret_access_key = <SECRET:aws_secret_key>"),
    (f"git push https://{GITHUB}@github.com/o/r", "git push https://<SECRET:github_token>@github.com/o/r"),
    (f"token: {GITHUB_PAT}", "token: <SECRET:github_token>"),
    (f"GITLAB_TOKEN={GITLAB}", "GITLAB_TOKEN=<SECRET:gitlab_token>"),
    (f"slack {SLACK} posted", "slack <SECRET:slack_token> posted"),
    (f"curl https://hooks.slack.com/services/{SLACK_HOOK_PATH}", "curl https://hooks.slack.com/services/<SECRET:slack_webhook>"),
    (f"client = OpenAI(api_key='{OPENAI}')", "client = OpenAI(api_key='<SECRET:openai_key>')"),
    (f"key {ANTHROPIC}", "key <SECRET:anthropic_key>"),
    (f"huggingface-cli login --token {HF}", "huggingface-cli login --token <SECRET:huggingface_token>"),
    (f"stripe.api_key = \"{STRIPE}\"", "stripe.api_key = \"<SECRET:stripe_key>\""),
    (f"//registry.npmjs.org/:_authToken={NPM}", "//registry.npmjs.org/:_authToken=<SECRET:npm_token>"),
    (f"password = {PYPI}", "password = <SECRET:pypi_token>"),
    (f"maps key {GCP_API}&q=x", "maps key <SECRET:gcp_api_key>&q=x"),
    (f"Authorization: Bearer {JWT}", "Authorization: Bearer <SECRET:jwt>"),
    ("Authorization: Basic dXNlcjpodW50ZXIy", "Authorization: Basic <SECRET:basic_auth>"),
    ("-H 'authorization: token 9f8e7d6c5b4a39281706f5e4d3c2b1a0'", "-H 'authorization: token <SECRET:bearer_token>'"),
    (f"AccountName=acct;AccountKey={AZURE_KEY};EndpointSuffix=core.windows.net",
     "AccountName=acct;AccountKey=<SECRET:azure_storage_key>;EndpointSuffix=core.windows.net"),
    ("AZURE_CLIENT_SECRET=Qx8~abc.DEF_12345-ghijklMNOP", "AZURE_CLIENT_SECRET=<SECRET:azure_client_secret>"),
    (f"key:\n{PEM}\ndone", "key:\n<SECRET:private_key>\ndone"),
    (json.dumps({"private_key_id": KEY_ID, "private_key": PEM + "\n"}),
     '{"private_key_id": "<SECRET:gcp_private_key_id>", "private_key": "<SECRET:private_key>\\n"}'),
    ("git clone https://deploy:s3cr3t-Pa55@git.example.com/repo.git",
     "git clone https://deploy:<SECRET:url_password>@git.example.com/repo.git"),
    ("postgres://app:Xy9!pw@db:5432/app", "postgres://app:<SECRET:url_password>@db:5432/app"),
    # SQLAlchemy's driver schemes, schemes with digits, and a password holding a raw `@`
    ("DATABASE_URL=postgresql+psycopg2://app:Pa55wordXYZ123@h/db",
     "DATABASE_URL=postgresql+psycopg2://app:<SECRET:url_password>@h/db"),
    ("aws s3 ls s3://AKID:Pa55wordXYZ123@bucket/k", "aws s3 ls s3://AKID:<SECRET:url_password>@bucket/k"),
    ("psql postgres://user:p@ssW0rd123@host/db -c 'select 1'",
     "psql postgres://user:<SECRET:url_password>@host/db -c 'select 1'"),
    ('{"password": "hunter2!", "user": "bob"}', '{"password": "<SECRET:password>", "user": "bob"}'),
    ('{\\"db_password\\": \\"hunter2!\\"}', '{\\"db_password\\": \\"<SECRET:password>\\"}'),
    ("DB_PASSWORD=Tr0ub4dor&3", "DB_PASSWORD=<SECRET:password>&3"),
    ("password=token=abc123", "password=<SECRET:password>"),
    ("secret_key: 'django-insecure-9x8y7z'", "secret_key: '<SECRET:secret>'"),
    ("X-Api-Key: 5f4dcc3b5aa765d61d8327deb882cf99", "X-Api-Key: <SECRET:api_key>"),
    ("docker login -u bob --password Hunter22 registry", "docker login -u bob --password <SECRET:password> registry"),
    ("app --api-key=abc123DEF456ghi", "app --api-key=<SECRET:api_key>"),
    ("mysql -u root -pS3cretPw shop", "mysql -u root -p<SECRET:password> shop"),
    ("sshpass -p 'Pa55word' ssh host", "sshpass -p '<SECRET:password>' ssh host"),
    ("curl -u admin:Adm1nPw https://x", "curl -u admin:<SECRET:password> https://x"),
]

DOCKER_AUTH = "ZGVwbG95Okh1bnRlcjIyIQ=="  # base64 of deploy:Hunter22!
# Formats without a `key=value` separator, and a token a terminal wrapped at its width.
MORE_CASES = [
    ("$ cat ~/.netrc\nmachine api.example.com\n  login bob\n  password c4cd94da15ea0544802c2cfd5ec4ead324327430\n",
     "$ cat ~/.netrc\nmachine api.example.com\n  login bob\n  password <SECRET:password>\n"),
    ("machine git.example.com login ci password Tr1cky-pw", "machine git.example.com login ci password <SECRET:password>"),
    (json.dumps({"auths": {"https://index.docker.io/v1/": {"auth": DOCKER_AUTH}}}),
     '{"auths": {"https://index.docker.io/v1/": {"auth": "<SECRET:docker_auth>"}}}'),
    (json.dumps(json.dumps({"auth": DOCKER_AUTH})), json.dumps(json.dumps({"auth": "<SECRET:docker_auth>"}))),
    ("$ cat ~/.pgpass\ndb.example.com:5432:shop:alice:s3cr3t-Pg\n*:*:*:postgres:Pg!pw2024\n",
     "$ cat ~/.pgpass\ndb.example.com:5432:shop:alice:<SECRET:password>\n*:*:*:postgres:<SECRET:password>\n"),
    (f"$ echo $GITHUB_TOKEN\n{GITHUB[:17]}\n{GITHUB[17:]}\n$ ", "$ echo $GITHUB_TOKEN\n<SECRET:github_token>\n\n$ "),
    (f"key={AWS_ID[:9]}\r\n{AWS_ID[9:]} ok", "key=<SECRET:aws_access_key>\r\n ok"),
    (f"Bearer {JWT[:30]}\n{JWT[30:]}", "Bearer <SECRET:jwt>\n"),
    (f"token {AWS_ID}\nnext line of output", "token <SECRET:aws_access_key>\nnext line of output"),  # the next line stays
    (f"$ echo $T\n{GITHUB}\nok", "$ echo $T\n<SECRET:github_token>\nok"),  # a narrow line: not a wrap
]
MORE_LOOKALIKES = [
    "machine learning password reset: see the docs",
    "main.c:12:5: error: expected ';'\nutil.py:3:1: E302 expected 2 blank lines",
    '{"auth": "required", "auth_type": "oauth"}',
    "see sk-\nlearn docs, AKIA\nis not a key",
    "12:30:45 ready\n2024-01-01 10:00:00:123 started",
]

LOOKALIKES = [
    "commit 3f786850e387550fdab836ed7e6dc881de23001b (HEAD -> main)",
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "request id 123e4567-e89b-12d3-a456-426614174000",
    "data:image/png;base64," + "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==" * 3,
    "numpy==1.26.4, torch 2.3.0+cu121, version v1.2.3-rc.1",
    "The password must be at least 8 characters. Reset your password or token in Settings.",
    "open the task-list-of-the-weekly-sprint-planning-board and risk-assessment-document-2024",
    "see https://docs.python.org/3/library/secrets.html and http://localhost:8080/api/v1/items?id=42",
    "PASSWORD_FILE=/run/secrets/db_password TOKEN_URL=https://oauth2.example.com/token",
    "def login(self, password: str, token: Optional[str] = None) -> bool:",
    "self.token = token; password = getpass.getpass(); api_key = os.environ['OPENAI_API_KEY']",
    '{"max_tokens": 1024, "token_type": "Bearer", "expires_in": 3600, "password_required": true}',
    "mysql -u root -p shop",
    "export GITHUB_TOKEN=$GITHUB_TOKEN && curl -H \"Authorization: Bearer ${TOKEN}\" https://api",
    "hf_hub_download(repo_id='gpt2', filename='config.json') and sk-learn is not a key",
    "AKIAshort is not a key, nor is xAKIAIOSFODNN7EXAMPLEx",
    "Password: \nSorry, try again.",
]


@pytest.mark.parametrize(("text", "expected"), CASES + MORE_CASES, ids=[c[1][:40] for c in CASES + MORE_CASES])
def test_planted_secret_becomes_its_placeholder(text, expected):
    out, counts = redact_text(text)
    assert out == expected
    assert sum(counts.values()) == expected.count("<SECRET:")


def test_at_least_fifteen_kinds_are_covered():
    kinds = Counter()
    for text, _ in CASES:
        kinds.update(redact_text(text)[1])
    assert len(kinds) >= 20, sorted(kinds)


@pytest.mark.parametrize("text", LOOKALIKES + MORE_LOOKALIKES, ids=[t[:30] for t in LOOKALIKES + MORE_LOOKALIKES])
def test_lookalike_is_unchanged(text):
    assert redact_text(text) == (text, Counter())


# A provider token glued to the word before it: a tool name, an env name or a run of output without a separator.
GLUED = [
    (f"gh_{GITHUB}", "gh_<SECRET:github_token>"),
    (f"GITHUB_TOKEN_{GITHUB}", "GITHUB_TOKEN_<SECRET:github_token>"),
    (f'{{"name": "call_{GITHUB}"}}', '{"name": "call_<SECRET:github_token>"}'),
    (f"x{GITHUB} 1{GITHUB}", "x<SECRET:github_token> 1<SECRET:github_token>"),
    (f"id_{JWT} x{JWT} 7{JWT} auth-{JWT}", "id_<SECRET:jwt> x<SECRET:jwt> 7<SECRET:jwt> auth-<SECRET:jwt>"),
    (f"ci_{GITLAB} x{GITLAB} 9{GITLAB} ci-{GITLAB}", " ".join(f"{p}<SECRET:gitlab_token>" for p in ("ci_", "x", "9", "ci-"))),
    (f"x{HF} 2{HF} -{HF}", "x<SECRET:huggingface_token> 2<SECRET:huggingface_token> -<SECRET:huggingface_token>"),
    (f"x{AWS_ID} 1{AWS_ID} id{AWS_ID} {_j('x', 'AK', 'IAIOSFODNN7EXAMPLE')}",
     "x<SECRET:aws_access_key> 1<SECRET:aws_access_key> id<SECRET:aws_access_key> x<SECRET:aws_access_key>"),
]
# What gluing could take by mistake: a word ending in a prefix (`weighs_` holds `ghs_`) before a hex digest, and
# `AKIA` inside a run of capitals and digits, as base64 of sparse binary data has them.
GLUED_LOOKALIKES = [
    "self.weighs_3f786850e387550fdab836ed7e6dc881de23001b = None",
    "coughs_3F786850E387550FDAB836ED7E6DC881DE23001B",
    "use_hf_transfer=1; load_hf_dataset_from_cache(path); weigh_ghp_count",
    "model = from_hf_AutoModelForSequenceClassification(path)",  # `_hf_` + a long name: code, not a token
    "monkeyJumpedOverTheFence.and.surveyJsonSchema.validate()",
    "data:application/octet-stream;base64,iVBORw0KGgoAAAANSUhEUgAA" + "AKIA" + "A" * 16 + "/8Q9" + "AKIA" + "B" * 16 + "+w==",
    "base64: TWFu" + "0AKIA" + "Q" * 16 + "=",
]


@pytest.mark.parametrize(("text", "expected"), GLUED, ids=[c[1][:40] for c in GLUED])
def test_token_glued_to_the_word_before_it_is_redacted(text, expected):
    out, counts = redact_text(text)
    assert out == expected
    (kind,) = counts
    assert counts[kind] == expected.count("<SECRET:")


def test_a_github_token_after_a_word_boundary_needs_no_mixed_case():
    """The mixed-case guard is for tokens glued to a word (`weighs_` + a digest); one standing alone is a token."""
    body = "abcdefghijklmnopqrstuvwxyz0123456789"
    for text in (f"ghp_{body}", f"token ghs_{body.upper()} end", f"GH=ghp_{body}"):
        assert redact_text(text)[1] == Counter({"github_token": 1}), text


@pytest.mark.parametrize("text", GLUED_LOOKALIKES, ids=[t[:30] for t in GLUED_LOOKALIKES])
def test_word_glued_to_a_prefix_lookalike_is_unchanged(text):
    assert redact_text(text) == (text, Counter())


BEARER_BODY = "9f8e7d6c5b4a39281706f5e4d3c2b1a0ZqWx"
# A percent-encoded credential: the placeholder takes its encoded span, the rest of the text stays encoded.
ENCODED = [
    ("https://x.com/cb?next=https%3A%2F%2Fdeploy%3AHunt3r2Secret99%40git.example.com%2Fr",
     "https://x.com/cb?next=https%3A%2F%2Fdeploy%3A<SECRET:url_password>%40git.example.com%2Fr"),
    ("/login?to=%2Fv1%2Fdata%3Fapi_key%3DZx81kQpL0mNa9bc7Yt2", "/login?to=%2Fv1%2Fdata%3Fapi_key%3D<SECRET:api_key>"),
    ("password%3DHunt3r2Secret99", "password%3D<SECRET:password>"),
    (f"Authorization%3A%20Bearer%20{BEARER_BODY}", "Authorization%3A%20Bearer%20<SECRET:bearer_token>"),
    ("postgres%3A%2F%2Fadmin%3AS3cr3t%40db", "postgres%3A%2F%2Fadmin%3A<SECRET:url_password>%40db"),
    # escapes inside the secret go with it; lowercase hex; a redirect encoded twice
    ("form: user=bob&password%3DHunt%21er2%40x%26next%3D1", "form: user=bob&password%3D<SECRET:password>%26next%3D1"),
    ("cb=postgres%3a%2f%2fapp%3aPw9%21x%40db%2fshop", "cb=postgres%3a%2f%2fapp%3a<SECRET:url_password>%40db%2fshop"),
    ("?r=https%253A%252F%252Fdeploy%253AHunt3r2Secret99%2540git.example.com",
     "?r=https%253A%252F%252Fdeploy%253A<SECRET:url_password>%2540git.example.com"),
    # two secrets in one encoded run, and one in plain text before it
    (f"{GITHUB} next=https%3A%2F%2Fu%3AHunt3r2Secret99%40h%2Fp%3Ftoken%3DZx81kQpL0mNa9bc7Yt2%26page%3D2",
     "<SECRET:github_token> next=https%3A%2F%2Fu%3A<SECRET:url_password>%40h%2Fp%3Ftoken%3D<SECRET:token>%26page%3D2"),
]
ENCODED_LOOKALIKES = [
    "https://www.bing.com/search?q=Michael+Jackson+%27Human+Nature%27+lyrics&FORM=QBLH",
    "Preparing to unpack .../07-libgc1_1%3a8.2.2-3_amd64.deb ...",
    "Preparing to unpack .../passwd_1%3a4.13+dfsg1-1_amd64.deb ...",  # a Debian epoch, not `passwd_1: <value>`
    "?at=12%3A30%3A45&host=10.0.0.1%3A8080&secret_key_id=7",
    "https://accounts.example.com/login?continue=https%3A%2F%2Fmail.example.com%2Fmail%2Fu%2F0%2F&service=mail",
    "?redirect_uri=https%3A%2F%2Fapp.example.com%2Fcb&token_type=bearer&scope=read%20write&state=a%2Bb%3D%3D",
    "password%3D&user%3Dbob password%3D%24%7BDB_PASSWORD%7D password%3D%2A%2A%2A%2A token%3D%3Cyour-token%3E",
    "https%3A%2F%2Fuser%40example.com%2Fpath http%3A%2F%2Flocalhost%3A8080%2Fapi%3Fid%3D42",
    "data:image/svg+xml,%3Csvg%20xmlns%3D%22http%3A%2F%2Fwww.w3.org%2F2000%2Fsvg%22%3E%3Cpath%20d%3D%22M12%202L2%207%22%2F%3E",
    'printf("%3d items, %2d%% done\\n", n, pct); s = "%5Bkey%5D%3Dvalue"',
    "caf%C3%A9 50%25 off, 100% sure, %zz and a lone %",
]


@pytest.mark.parametrize(("text", "expected"), ENCODED, ids=[c[1][:40] for c in ENCODED])
def test_percent_encoded_credential_is_redacted_where_it_is_encoded(text, expected):
    out, counts = redact_text(text)
    assert out == expected
    assert sum(counts.values()) == expected.count("<SECRET:")


@pytest.mark.parametrize("text", ENCODED_LOOKALIKES, ids=[t[:30] for t in ENCODED_LOOKALIKES])
def test_percent_encoded_text_without_a_secret_comes_back_byte_identical(text):
    assert redact_text(text) == (text, Counter())


def test_encoded_run_whose_secrets_cannot_be_placed_back_comes_back_decoded_without_them():
    # dots encoded too: the text between the two tokens, ".", occurs inside each, so it cannot say where the first ends
    text = "?jwt%3D" + JWT.replace(".", "%2E") + "%2E" + JWT.replace(".", "%2E") + " page%3D2"
    assert redact_text(text) == ("?jwt=<SECRET:jwt>.<SECRET:jwt> page%3D2", Counter(jwt=2))


_URL_PIECES = ["password", "token", "api_key", "Authorization", "Bearer", "https", "://", "u", ":", "@", "=", "&", "?",
               "/", " ", "Hunt3r2Secret99", BEARER_BODY, "${X}", "***", "h.example.com", "'", '"', ";", "+", "-", "%"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_URL_PIECES), min_size=1, max_size=14))
def test_a_text_and_its_percent_encoding_lose_the_same_secrets(pieces):
    from urllib.parse import quote, unquote

    text = "".join(pieces)
    plain, plain_counts = redact_text(text)
    encoded, counts = redact_text(quote(text, safe=""))
    assert counts == plain_counts
    assert unquote(encoded) == plain
    if not counts:
        assert encoded == quote(text, safe="")


def test_emails_only_when_asked():
    text = "Signed-off-by: Ada Lovelace <ada@example.org>, cc bob.smith+ci@mail.example.co.uk"
    assert redact_text(text)[0] == text
    out, counts = redact_text(text, emails=True)
    assert out == "Signed-off-by: Ada Lovelace <<SECRET:email>>, cc <SECRET:email>"
    assert counts == Counter(email=2)


def test_json_text_stays_valid_json():
    meta = json.dumps({"env": {"OPENAI_API_KEY": OPENAI, "HOME": "/root"}, "cmd": f"git clone https://u:pw9@h/r {GITHUB}",
                       "key": PEM})
    out, counts = redact_text(meta)
    value = json.loads(out)
    assert value == {"env": {"OPENAI_API_KEY": "<SECRET:openai_key>", "HOME": "/root"},
                     "cmd": "git clone https://u:<SECRET:url_password>@h/r <SECRET:github_token>",
                     "key": "<SECRET:private_key>"}
    assert counts == Counter(openai_key=1, url_password=1, github_token=1, private_key=1)


def test_truncated_private_key_is_removed_up_to_its_last_base64_line():
    text = f"-----BEGIN RSA PRIVATE KEY-----\n{KEY_BODY}\n{KEY_BODY}\n(output truncated)"
    assert redact_text(text)[0] == "<SECRET:private_key>\n(output truncated)"


def _trajectory(**texts: str) -> Trajectory:
    return Trajectory(
        traj_id="t1",
        domain="terminal",
        split_key="t1",
        source=Source(),
        system=SystemPrompt(
            task_description=texts.get("task", "plain"),
            action_space=texts.get("space", "plain"),
            initial_state=texts.get("state"),
            demonstrations=[Demonstration(texts.get("demo_action", "ls"), texts.get("demo_obs", "a b"))],
            simulation_instruction=texts.get("instruction"),
        ),
        turns=[
            Turn(texts.get("action", "ls"), texts.get("obs", "x"), texts.get("reasoning"), texts.get("turn_meta")),
            Turn("pwd", "/app"),
        ],
        meta=texts.get("meta"),
    )


def test_every_text_field_of_a_trajectory_is_redacted():
    fields = {"task": f"use {GITHUB}", "space": f"key {OPENAI}", "state": f"GITLAB={GITLAB}",
              "demo_action": f"echo {HF}", "demo_obs": f"{NPM} ok", "instruction": f"jwt {JWT}",
              "action": f"export AWS_SECRET_ACCESS_KEY={AWS_SECRET}", "obs": f"id {AWS_ID}",
              "reasoning": f"the key is {ANTHROPIC}", "turn_meta": json.dumps({"password": "Zz9!zz"}),
              "meta": json.dumps({"auth": f"Bearer {JWT}"})}
    out, counts = redact_trajectory(_trajectory(**fields))
    dumped = json.dumps(out.to_dict())
    for secret in (GITHUB, OPENAI, GITLAB, HF, NPM, JWT, AWS_SECRET, AWS_ID, ANTHROPIC, "Zz9!zz"):
        assert secret not in dumped
    assert sum(counts.values()) == 11 and counts["jwt"] == 2  # one secret per field, the JWT in two
    assert out.system.initial_state == "GITLAB=<SECRET:gitlab_token>"
    assert out.turns[0].reasoning == "the key is <SECRET:anthropic_key>"
    assert out.turns[1] == Turn("pwd", "/app")


def test_clean_trajectory_is_returned_as_is():
    traj = _trajectory(obs="nothing to see", meta='{"model": "m"}')
    out, counts = redact_trajectory(traj)
    assert out is traj and not counts


def test_field_holding_the_join_separator_is_still_redacted_field_by_field():
    out, counts = redact_trajectory(_trajectory(obs=f"a\n\x00\nb {GITHUB}", action="export PASSWORD=Pw12345!"))
    assert out.turns[0].observation == "a\n\x00\nb <SECRET:github_token>"
    assert out.turns[0].action == "export PASSWORD=<SECRET:password>"
    assert counts == Counter(github_token=1, password=1)


def test_build_redactor_counts_kinds_and_can_be_disabled():
    assert build_redactor({"redact": {"enabled": False, "emails": False}}) == []
    (step,) = build_redactor({"redact": {"enabled": True, "emails": True}})
    stats = Stats()
    out = step(_trajectory(obs=f"{AWS_ID} mail ada@example.org", action=f"x {AWS_ID}"), stats)
    assert out.turns[0].observation == "<SECRET:aws_access_key> mail <SECRET:email>"
    assert stats.to_dict() == {"redacted.aws_access_key": 2, "redacted.email": 1, "trajectories.redacted": 1}


_SECRETS = [text for text, _ in CASES if text.startswith(("export", "GITLAB", "slack", "key ", "token:"))]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(_SECRETS + LOOKALIKES[:8]), min_size=1, max_size=8), st.sampled_from(["\n", " ", "; "]))
def test_mixed_text_loses_every_secret_and_keeps_every_lookalike(pieces, sep):
    out, _ = redact_text(sep.join(pieces))
    for piece in pieces:
        if piece in LOOKALIKES:
            assert piece in out
    for secret in (AWS_ID, AWS_SECRET, GITLAB, SLACK, ANTHROPIC, GITHUB_PAT):
        assert secret not in out
    assert redact_text(out)[0] == out  # placeholders are stable


def test_real_logs_only_lose_their_page_tokens(shared_data):
    """Real agent logs: the only hits are five web-page meta tokens, the three `curl -u user:password`
    commands of the OpenHands V1 sample, the two `Password: theagentcompany` lines of its task prompts (the
    same service password, in a credentials block) and the two `password="yourpassword"` arguments of a MySQL
    example in the glaive sample (hand-checked)."""
    hits = Counter()
    for path in sorted(shared_data.rglob("*")):
        if path.is_file():
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            redacted, counts = redact_text(text)
            hits.update(counts)
            if path.name == "output.jsonl" and path.parent.name == "openhands-v1":
                assert text.count("curl -u theagentcompany:theagentcompany") == 3
                assert text.count("\\nPassword: theagentcompany\\n") == 2
                assert counts["password"] == 5
                assert "theagentcompany:theagentcompany" not in redacted
                assert redacted.count("curl -u theagentcompany:<SECRET:password>") == 3
                assert redacted.count("\\nPassword: <SECRET:password>\\n") == 2
            elif path.parent.name == "sharegpt-glaive" and counts:
                assert text.count('password=\\"yourpassword\\"') == counts["password"] == 2
                assert redacted.count('password=\\"<SECRET:password>\\"') == 2
            elif counts:
                assert "OriginTrialToken" in text or "csrf-token" in text, path
    assert hits == Counter(token=5, password=7)


# --- end to end: every domain through `lwm run` ------------------------------------------------------------

PLANTED = [AWS_ID, AWS_SECRET, GITHUB, GITLAB, SLACK, SLACK_HOOK_PATH, OPENAI, ANTHROPIC, HF, STRIPE, NPM, PYPI,
           GCP_API, JWT, AZURE_KEY, KEY_BODY, KEY_ID, "s3cr3t-Pa55", "hunter2!", "S3cretPw", "Hunter22", "Adm1nPw"]
KEPT = ["3f786850e387550fdab836ed7e6dc881de23001b", "123e4567-e89b-12d3-a456-426614174000",
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
        "task-list-of-the-weekly-sprint", "version v1.2.3-rc.1"]


def _tool(name: str, **args) -> str:
    return json.dumps({"name": name, "arguments": args})


def _tools(*names: str) -> str:
    return json.dumps([{"name": n, "description": f"{n} tool"} for n in names])


def _domain_records() -> list[dict]:
    """One trajectory per domain; secrets in commands, tool arguments, observations and system prompts."""
    keys = lambda text: json.dumps([{"keystrokes": text + "\n", "duration": 0.5}])  # noqa: E731
    recs = {
        "terminal": ([(keys(f"export AWS_ACCESS_KEY_ID={AWS_ID}"), "root@box:/app# "),
                      (keys("env | grep -i key"), f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}\nOPENAI_API_KEY={OPENAI}"),
                      (keys("mysql -u root -pS3cretPw shop"), "mysql> commit 3f786850e387550fdab836ed7e6dc881de23001b")],
                     f"Shell on a box. Never print {GITHUB}.", "keystrokes"),
        "mcp": ([(_tool("http_get", url="https://api.x.io", headers={"Authorization": f"Bearer {JWT}"}), '{"ok": true}'),
                 (_tool("notify", url=f"https://hooks.slack.com/services/{SLACK_HOOK_PATH}"), "sent, request id "
                  "123e4567-e89b-12d3-a456-426614174000"),
                 (_tool("http_get", url="https://deploy:s3cr3t-Pa55@git.example.com/info"), f"token {SLACK}")],
                "Call web APIs for the user.", _tools("http_get", "notify")),
        "search": ([(_tool("search", query="stripe test key format"), f"Example: {STRIPE} is a live key"),
                    (_tool("search", query="npm token"), f"//registry.npmjs.org/:_authToken={NPM}"),
                    (_tool("open", url="https://pypi.org/help"), f"password = {PYPI}\nversion v1.2.3-rc.1")],
                   f"Research assistant; maps key {GCP_API}", "search, open"),
        "swe": ([(_tool("bash", command="cat .env"), f"ANTHROPIC_API_KEY={ANTHROPIC}\nHF_TOKEN={HF}"),
                 (_tool("bash", command="cat sa.json"), json.dumps({"private_key_id": KEY_ID, "private_key": PEM})),
                 (_tool("bash", command="docker login --password Hunter22 reg"), "Login Succeeded")],
                "Fix the failing test in the repo.", _tools("bash")),
        "android": ([('{"action_type": "click", "index": 3}', f'[ 3] | android.widget.EditText | res=app:id/key | text="{GITLAB}"'),
                     ('{"action_type": "click", "index": 4}', '[ 4] | android.widget.Button | text="Save key"'),
                     ('{"action_type": "click", "index": 5}', '[ 5] | android.widget.TextView | text="Saved task-list-of-the-weekly-sprint"')],
                    "Store the API token in the settings screen.", "click, type, scroll"),
        "web": ([('{"action": "type", "id": 7, "text": "https://admin:hunter2!@router.local/"}',
                  'textbox "password" value="••••••••"'),
                 ('{"action": "click", "id": 9}', f'img "logo" src="data:image/png;base64,{KEPT[2]}"'),
                 ('{"action": "click", "id": 11}', f"AccountName=acct;AccountKey={AZURE_KEY};EndpointSuffix=core.windows.net")],
                "Log in and copy the storage connection string.", "click, type"),
        "os": ([('{"action": "type", "text": "curl -u admin:Adm1nPw https://x"}', "window Terminal: 200 OK"),
                ('{"action": "hotkey", "keys": ["ctrl", "c"]}', f"window Terminal: export PASSWORD='hunter2!' {GITHUB}"),
                ('{"action": "click", "x": 5, "y": 9}', "window Editor: notes.txt opened")],
               "Use the desktop.", "click, type, hotkey"),
    }
    out = []
    for domain, (turns, task, space) in recs.items():
        out.append({"traj_id": f"secret-{domain}", "domain": domain, "split_key": f"secret-{domain}",
                    "system": {"task_description": task, "action_space": space},
                    "turns": [{"action": a, "observation": o} for a, o in turns],
                    "meta": {"operator": f"token={OPENAI}"}})
    return out


@pytest.fixture(scope="module")
def redacted_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("redact")
    lines = [json.dumps(r) for r in _domain_records()]
    # A record that fails validation and names secrets in the field its quarantine reason quotes.
    lines.append(json.dumps({"traj_id": "bad", "domain": f"shell {GITHUB}", "split_key": "b",
                             "system": {"task_description": "", "action_space": ""},
                             "turns": [{"action": "a", "observation": AWS_ID}]}))
    src = tmp / "secrets.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp / "out"
    proc = lwm_in_process("run", "--executor", "local", "-i", str(src), "-o", str(out), "--progress", "off",
                          "--max-quarantine-rate", "0.5")
    assert proc.returncode == 0, proc.stderr
    return out


def _table_texts(path: Path, tok) -> list[str]:
    table = pq.read_table(path)
    texts = []
    for name in table.column_names:
        values = table.column(name).to_pylist()
        if name in ("input_ids", "prompt_ids"):
            texts += [tok.decode(ids) for ids in values if ids]
        else:
            texts += [json.dumps(v, default=str) for v in values]
    return texts


def _leaks(texts: list[str]) -> list[str]:
    return sorted({s for s in PLANTED for t in texts if s in t or json.dumps(s)[1:-1] in t})


def test_no_secret_survives_in_shards_or_work_files(redacted_run):
    from stages.tokenizer import load_tokenizer

    tok = load_tokenizer()
    files = [p for p in redacted_run.rglob("*.parquet") if p.relative_to(redacted_run).parts[0] not in ("raw", "quarantine")]
    shard_files = [p for p in files if p.relative_to(redacted_run).parts[0] == "shards"]
    assert shard_files
    texts = [t for p in files for t in _table_texts(p, tok)]
    assert sum("<SECRET:" in t for t in texts) > 0
    assert _leaks(texts) == []


def test_no_secret_in_trajectories_and_lookalikes_kept(redacted_run):
    trajs = [r for p in (redacted_run / "trajectories").glob("*.parquet") for r in pq.read_table(p).to_pylist()]
    assert sorted(t["domain"] for t in trajs) == sorted(["terminal", "mcp", "search", "swe", "android", "web", "os"])
    dumped = json.dumps(trajs)
    assert _leaks([dumped]) == []
    for kept in KEPT:
        assert kept in dumped


def test_manifest_counts_kinds_and_leaks_nothing(redacted_run):
    text = (redacted_run / "manifest.json").read_text()
    assert _leaks([text]) == []
    redacted = json.loads(text)["counts"]["redacted"]
    assert len(redacted) >= 15, redacted
    assert redacted["github_token"] == 2 and redacted["password"] >= 4
    assert json.loads(text)["counts"]["trajectories"]["redacted"] == 7


def test_quarantine_detail_leaks_no_secret(redacted_run):
    rows = [r for p in (redacted_run / "quarantine").glob("*.parquet") for r in pq.read_table(p).to_pylist()]
    assert [r["reason"] for r in rows] == ["bad_domain"]
    assert _leaks([json.dumps(rows)]) == []


# --- ids, locators and cut quarantine details -------------------------------------------------------------


def test_ids_source_and_locator_of_a_trajectory_are_redacted():
    traj = Trajectory(
        traj_id=f"run-{GITHUB}", domain="terminal", split_key=f"task {AWS_ID}",
        source=Source("public", "lwm-jsonl", "https://deploy:s3cr3t-Pa55@git.example.com/a.jsonl", f"member {SLACK}"),
        system=SystemPrompt("task", "keys"), turns=[Turn("ls", "ok")],
    )
    out, counts = redact_trajectory(traj)
    assert (out.traj_id, out.split_key) == ("run-<SECRET:github_token>", "task <SECRET:aws_access_key>")
    assert out.source.uri == "https://deploy:<SECRET:url_password>@git.example.com/a.jsonl"
    assert out.source.locator == "member <SECRET:slack_token>"
    assert counts == Counter(github_token=1, aws_access_key=1, url_password=1, slack_token=1)


def test_a_quarantine_detail_is_redacted_before_it_is_cut():
    from schemas.errors import InvalidRecord
    from stages.normalize import quarantine_row

    body = GITHUB[4:]
    for at in range(470, 500, 3):  # the token straddles the 500-character cut
        err = InvalidRecord("bad_value", "x" * at + " " + GITHUB + " tail", f"member {NPM}.json")
        row = quarantine_row(err, "in.jsonl", "lwm-jsonl")
        assert len(row["detail"]) <= 500
        assert not any(body[i : i + 8] in row["detail"] for i in range(len(body) - 7)), row["detail"][-40:]
        assert row["locator"] == "member <SECRET:npm_token>.json"


@pytest.fixture(scope="module")
def id_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("ids")
    good = [{"traj_id": f"deploy-{GITHUB}-{i}", "domain": "terminal", "split_key": f"{NPM}-{i}",
             "system": {"task_description": "list files", "action_space": "keystrokes"},
             "turns": [{"action": "ls", "observation": f"a{i}.txt"}, {"action": "pwd", "observation": "/app"}]}
            for i in range(6)]
    # the quoted domain puts the token across the 500-character cut of the quarantine detail
    bad = {"traj_id": "bad", "domain": "x" * 470 + " " + HF, "split_key": "b",
           "system": {"task_description": "t", "action_space": "a"}, "turns": [{"action": "a", "observation": "b"}]}
    src = tmp / "ids.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in [*good, bad]) + "\n")
    out = tmp / "out"
    proc = lwm_in_process("run", "--executor", "local", "-i", str(src), "-o", str(out), "--progress", "off",
                          "--max-quarantine-rate", "0.5")
    assert proc.returncode == 0, proc.stderr
    return out


def test_secrets_in_ids_and_quarantine_details_reach_no_output_outside_raw(id_run):
    from stages.tokenizer import load_tokenizer

    tok = load_tokenizer()
    files = [p for p in id_run.rglob("*.parquet") if p.relative_to(id_run).parts[0] != "raw"]
    texts = [t for p in files for t in _table_texts(p, tok)]
    texts += [p.read_text() for p in id_run.rglob("*.json")]
    pieces = [s[i : i + 10] for s in (GITHUB, NPM, HF) for i in range(4, len(s) - 9)]
    assert sorted({p for p in pieces for t in texts if p in t}) == []
    trajs = [r for p in (id_run / "trajectories").glob("*.parquet") for r in pq.read_table(p).to_pylist()]
    assert sorted(t["traj_id"] for t in trajs) == [f"deploy-<SECRET:github_token>-{i}" for i in range(6)]
    rows = [r for p in (id_run / "quarantine").glob("*.parquet") for r in pq.read_table(p).to_pylist()]
    assert [r["reason"] for r in rows] == ["bad_domain"] and "<SECRET:hugging" in rows[0]["detail"]


WHSEC = _j("wh", "sec_", "AbCdEfGhIjKlMnOpQrStUvWx12")
PAT_GENERATED = _j("github", "_pat_", "11AbC2dEf3GhI4jKl5MnO6_", "pQr7StU8vWx9YzA0bCd1EfG2hIj3KlM4nOp5QrS6tUv7WxY8zAb9Cd")
# each provider token with the length of its prefix: a terminal may wrap it anywhere after the prefix
WRAPPABLE = [(GITHUB, 4), (PAT_GENERATED, 11), (GITLAB, 6), (SLACK, 5), (OPENAI, 3), (ANTHROPIC, 3), (HF, 3),
             (STRIPE, 8), (NPM, 4), (PYPI, 5), (AWS_ID, 4), (GCP_API, 4), (JWT, 3), (WHSEC, 6)]


@pytest.mark.parametrize(("token", "prefix"), WRAPPABLE, ids=[t[:6] for t, _ in WRAPPABLE])
def test_a_token_wrapped_at_any_column_after_its_prefix_is_still_redacted(token, prefix):
    rest = token[prefix:]
    for cut in range(prefix, len(token) - 1, 2):
        for brk in ("\n", "\r\n"):
            width = 80 if cut < 70 else 120  # a terminal wraps the line at its width
            head = (" " * width + token[:cut])[-width:]
            text = f"{head}{brk}{token[cut:]}\n$ "
            out, counts = redact_text(text)
            assert sum(counts.values()) == 1, (cut, out)
            assert not any(rest[i : i + 8] in out.replace(brk, "") for i in range(len(rest) - 7)), (cut, out)
