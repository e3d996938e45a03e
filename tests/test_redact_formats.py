"""Secret formats found missing by an audit of the shards: the AWS secret key beside its key id, provider tokens
without a keyword, Azure SAS signatures and passwords that command lines take without a ``--password`` flag.

Each planted case must come out exactly as expected; each look-alike must come back byte-identical. Secret-shaped
strings are assembled from pieces at run time so this file itself holds no token a scanner would flag.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stages.redact import _RULES, open_gates, redact_text


def _j(*parts: str) -> str:
    return "".join(parts)


AWS_ID = _j("AK", "IA", "Q3XAMPLE7KEY2ID4")
AWS_SECRET = _j("wJalrXUtnFEMI/K7MDENG/", "bPxRfiCYEXAMPLEKEY")  # 40 characters, as AWS makes them

AWS = [
    (f"$ aws configure\nAWS Access Key ID [None]: {AWS_ID}\nAWS Secret Access Key [None]: {AWS_SECRET}\n"
     "Default region name [None]: us-east-1",
     "$ aws configure\nAWS Access Key ID [None]: <SECRET:aws_access_key>\nAWS Secret Access Key [None]: "
     "<SECRET:aws_secret_key>\nDefault region name [None]: us-east-1"),
    # run again: the prompts show masked old values, and only the secret is typed anew
    ("AWS Access Key ID [****************MPLE]: \nAWS Secret Access Key [****************EKEY]: " + AWS_SECRET,
     "AWS Access Key ID [****************MPLE]: \nAWS Secret Access Key [****************EKEY]: <SECRET:aws_secret_key>"),
    (f"Use key {AWS_ID} / {AWS_SECRET} for the demo.", "Use key <SECRET:aws_access_key> / <SECRET:aws_secret_key> for the demo."),
    (f"I created the key {AWS_ID} and its secret {AWS_SECRET}.",
     "I created the key <SECRET:aws_access_key> and its secret <SECRET:aws_secret_key>."),
    (f"Access key ID,Secret access key\n{AWS_ID},{AWS_SECRET}\n",
     "Access key ID,Secret access key\n<SECRET:aws_access_key>,<SECRET:aws_secret_key>\n"),
    (f"secret {AWS_SECRET} belongs to {AWS_ID}", "secret <SECRET:aws_secret_key> belongs to <SECRET:aws_access_key>"),
    (f"aws configure set aws_secret_access_key {AWS_SECRET}", "aws configure set aws_secret_access_key <SECRET:aws_secret_key>"),
    (f"aws configure set profile.dev.aws_secret_access_key '{AWS_SECRET}' && ls",
     "aws configure set profile.dev.aws_secret_access_key '<SECRET:aws_secret_key>' && ls"),
]
AWS_LOOKALIKES = [
    "AWS Secret Access Key [None]: \nDefault region name [None]: us-east-1",
    "Enter the Secret Access Key: it is shown once, in the IAM console.",
    "      Name                    Value             Type    Location\n"
    "access_key     ****************MPLE shared-credentials-file\nsecret_key     ****************EKEY shared-credentials-file",
    "aws configure set aws_secret_access_key $AWS_SECRET_ACCESS_KEY",
]


@pytest.mark.parametrize(("text", "expected"), AWS, ids=[c[1][:40] for c in AWS])
def test_an_aws_secret_key_beside_its_key_id_or_in_its_prompt_is_redacted(text, expected):
    out, counts = redact_text(text)
    assert out == expected
    assert sum(counts.values()) == expected.count("<SECRET:")


@pytest.mark.parametrize("text", AWS_LOOKALIKES, ids=[t[:30] for t in AWS_LOOKALIKES])
def test_an_aws_lookalike_is_unchanged(text):
    assert redact_text(text) == (text, Counter())


def test_only_a_generated_looking_run_near_a_key_id_is_taken_for_its_secret():
    digest = "3f786850e387550fdab836ed7e6dc881de23001b"  # a git SHA: 40 characters too, but hex
    words = "ThisIsFortyCharactersOfCamelCaseLettersX"
    far = f"{AWS_ID}\n" + "log line\n" * 30 + AWS_SECRET
    for text in (f"key {AWS_ID} commit {digest}", f"key {AWS_ID} then {words}", far, f"{AWS_ID}\n\x00\n{AWS_SECRET}"):
        out, counts = redact_text(text)
        assert counts == Counter(aws_access_key=1), text
        assert AWS_ID not in out and out.replace("<SECRET:aws_access_key>", AWS_ID) == text


SENDGRID = _j("SG", ".", "ngeVfQFYQlKU0ufo8x5d1A", ".", "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr")
DIGITALOCEAN = _j("do", "p_v1_", "3f2a9c1b8d7e6f5a4b3c2d1e0f9a8b7c", "6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a")
TELEGRAM = _j("123456789", ":AA", "HdqTcvCH1vGWJxfSeofSAs0K5PALDsaw7")  # the id, then 35 characters
GOOGLE_OAUTH = _j("ya", "29.", "a0AfH6SMBx3kLm9Qr7Tt5Vv1Ww2Xx3Yy4Zz5Aa6Bb7Cc8Dd9")

PROVIDERS = [
    (f"export SENDGRID_KEY={SENDGRID}", "export SENDGRID_KEY=<SECRET:sendgrid_key>"),
    (f"sg = SendGridAPIClient('{SENDGRID}')", "sg = SendGridAPIClient('<SECRET:sendgrid_key>')"),
    (f"doctl auth init -t {DIGITALOCEAN}", "doctl auth init -t <SECRET:digitalocean_token>"),
    (f"DIGITALOCEAN_TOKEN={DIGITALOCEAN}9f8e", "DIGITALOCEAN_TOKEN=<SECRET:digitalocean_token>"),  # a longer one too
    (f"DO {DIGITALOCEAN.replace('dop_', 'doo_')} and {DIGITALOCEAN.replace('dop_', 'dor_')}",
     "DO <SECRET:digitalocean_token> and <SECRET:digitalocean_token>"),
    (f"curl https://api.telegram.org/bot{TELEGRAM}/sendMessage -d chat_id=42",
     "curl https://api.telegram.org/bot<SECRET:telegram_bot_token>/sendMessage -d chat_id=42"),
    (f"bot = Bot('{TELEGRAM}')", "bot = Bot('<SECRET:telegram_bot_token>')"),
    (f"gcloud auth print-access-token\n{GOOGLE_OAUTH}\n", "gcloud auth print-access-token\n<SECRET:google_oauth_token>\n"),
    (f'{{"access_token": "{GOOGLE_OAUTH}", "expires_in": 3599}}',
     '{"access_token": "<SECRET:google_oauth_token>", "expires_in": 3599}'),
    (f"-H 'Authorization: Bearer {GOOGLE_OAUTH}'", "-H 'Authorization: Bearer <SECRET:google_oauth_token>'"),
]
PROVIDER_LOOKALIKES = [
    "See SG. 4 of the manual; SG.1234 and SG.settings.module are not keys.",
    "RSG.aaaaaaaaaaaaaaaaaaaaaa.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",  # inside a longer word
    "droplet dop_v1_ is a prefix; dop_v1_" + "z" * 64 + " is not hex",
    "12:30:45 ready, port 8080:80, 12345678:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",  # no mixed-case body
    "job 123456789:AbCdEfGhIjKlMnOpQrStUvWxYz012345678 started",  # not the bot tokens' AA
    "ya29 is the prefix of Google access tokens; ya29.example_token_placeholder_value is a placeholder",
]


@pytest.mark.parametrize(("text", "expected"), PROVIDERS, ids=[c[1][:40] for c in PROVIDERS])
def test_a_provider_token_without_a_keyword_is_redacted(text, expected):
    out, counts = redact_text(text)
    assert out == expected
    assert sum(counts.values()) == expected.count("<SECRET:")


@pytest.mark.parametrize("text", PROVIDER_LOOKALIKES, ids=[t[:30] for t in PROVIDER_LOOKALIKES])
def test_a_provider_lookalike_is_unchanged(text):
    assert redact_text(text) == (text, Counter())


def test_telegram_s_own_example_token_one_character_short_is_redacted_too():
    text = "https://api.telegram.org/bot110201543:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/getMe"
    assert redact_text(text) == ("https://api.telegram.org/bot<SECRET:telegram_bot_token>/getMe", Counter(telegram_bot_token=1))


SAS_SIG = _j("Ab3De5Gh7Jk9Mn1Pq3St5Vw7Yz9", "%2BBc1Ef3Hi5Kl7No%3D")
SAS = [
    (f"az storage blob download --sas-url 'https://acct.blob.core.windows.net/c/f.txt?sv=2021-06-08&sp=r&sig={SAS_SIG}'",
     "az storage blob download --sas-url 'https://acct.blob.core.windows.net/c/f.txt?sv=2021-06-08&sp=r"
     "&sig=<SECRET:azure_sas_signature>'"),
    (f'"se=2030-01-01&sp=rl&sv=2022-11-02&sr=c&sig={SAS_SIG}"', '"se=2030-01-01&sp=rl&sv=2022-11-02&sr=c&sig=<SECRET:azure_sas_signature>"'),
    ("SharedAccessSignature=sv=2021-06-08&sig=Ab3De5Gh7Jk9Mn1Pq3St5Vw7Yz9+Bc1Ef3Hi5Kl7No=;BlobEndpoint=x",
     "SharedAccessSignature=sv=2021-06-08&sig=<SECRET:azure_sas_signature>;BlobEndpoint=x"),
    # inside an encoded redirect: the decoded view finds it, the placeholder takes its encoded span
    (f"?next=https%3A%2F%2Facct.blob.core.windows.net%2Fc%3Fsv%3D1%26sig%3D{SAS_SIG.replace('%', '%25')}%26x%3D1",
     "?next=https%3A%2F%2Facct.blob.core.windows.net%2Fc%3Fsv%3D1%26sig%3D<SECRET:azure_sas_signature>%26x%3D1"),
]
SAS_LOOKALIKES = [
    "sig = inspect.signature(f); def handler(sig=None, frame=None): kill(pid, sig=signal.SIGTERM)",
    "https://example.com/a?sig=abc&sv=2021-06-08",  # too short for a signature
    "https://example.com/a?sig=signature_of_the_uploaded_document",  # a word, not base64 of an HMAC
    "https://example.com/a?sig=Best%20Regards%2C%20the%20Team",  # an encoded phrase: its escapes are no digits
    "csig=Ab3De5Gh7Jk9Mn1Pq3St5Vw7Yz9Bc1Ef3Hi5Kl7No",  # another parameter's name
]


@pytest.mark.parametrize(("text", "expected"), SAS, ids=[c[1][:40] for c in SAS])
def test_an_azure_sas_signature_in_log_text_is_redacted(text, expected):
    out, counts = redact_text(text)
    assert out == expected
    assert counts == Counter(azure_sas_signature=1)


@pytest.mark.parametrize("text", SAS_LOOKALIKES, ids=[t[:30] for t in SAS_LOOKALIKES])
def test_a_sig_parameter_that_is_no_signature_is_unchanged(text):
    assert redact_text(text) == (text, Counter())


# Passwords given to a tool without a `--password` flag: each form only after its tool's name.
COMMANDS = [
    ("MYSQL_PWD=Kx9mQ2vL78 mysql -u root shop", "MYSQL_PWD=<SECRET:password> mysql -u root shop"),
    ('docker run -e "MYSQL_PWD=Kx9mQ2vL78" mysql:8', 'docker run -e "MYSQL_PWD=<SECRET:password>" mysql:8'),
    ("echo 'Dock3rPw99x' | docker login --username me --password-stdin",
     "echo '<SECRET:password>' | docker login --username me --password-stdin"),
    ("echo Gh1tPw_99 | podman login ghcr.io -u me --password-stdin", "echo <SECRET:password> | podman login ghcr.io -u me --password-stdin"),
    ("docker login -u me -p Dock3rPw99x registry.example.com", "docker login -u me -p <SECRET:password> registry.example.com"),
    ("docker login registry.gitlab.com -u ci -p 'glDeployPw_77'", "docker login registry.gitlab.com -u ci -p '<SECRET:password>'"),
    ("podman login --username=me -p=Podm4nPw quay.io", "podman login --username=me -p=<SECRET:password> quay.io"),
    ("helm registry login ghcr.io -u me -pH3lmPw_x", "helm registry login ghcr.io -u me -p<SECRET:password>"),
    ("echo Us3rPw_new | passwd --stdin deploy", "echo <SECRET:password> | passwd --stdin deploy"),
    ("echo Pa55w0rd_Env | sudo -S apt install x", "echo <SECRET:password> | sudo -S apt install x"),
    ("printf '%s\\n' Pa55w0rd_Env | sudo -k -S -p '' ls /root", "printf '%s\\n' <SECRET:password> | sudo -k -S -p '' ls /root"),
    ('echo -e "vagrant\\n" | sudo -u root -S id', 'echo -e "<SECRET:password>\\n" | sudo -u root -S id'),
    ("sudo -S <<< 'Sud0Pa55word' apt-get update", "sudo -S <<< '<SECRET:password>' apt-get update"),
    ("sudo -S systemctl restart nginx <<< Sud0Pa55word", "sudo -S systemctl restart nginx <<< <SECRET:password>"),
    ("ldapsearch -x -D cn=admin,dc=example,dc=org -w LdapPw0rd99 -b dc=example,dc=org",
     "ldapsearch -x -D cn=admin,dc=example,dc=org -w <SECRET:password> -b dc=example,dc=org"),
    ("ldapadd -x -D cn=admin -w 'LdapPw0rd99' -f users.ldif", "ldapadd -x -D cn=admin -w '<SECRET:password>' -f users.ldif"),
    ("smbclient //fs/share -U alice%SmbPw0rd99 -c ls", "smbclient //fs/share -U alice%<SECRET:password> -c ls"),
    ("smbclient -L fs -U 'CORP\\alice%SmbPw0rd99'", "smbclient -L fs -U 'CORP\\alice%<SECRET:password>'"),
    ("htpasswd -b .htpasswd admin H7passW0rd", "htpasswd -b .htpasswd admin <SECRET:password>"),
    ("htpasswd -bcB -C 10 /etc/nginx/.htpasswd admin 'H7passW0rd'", "htpasswd -bcB -C 10 /etc/nginx/.htpasswd admin '<SECRET:password>'"),
    ("htpasswd -nb admin H7passW0rd > .htpasswd", "htpasswd -nb admin <SECRET:password> > .htpasswd"),
    ("openssl enc -aes-256-cbc -k Op3nSslPassw0rd -in f -out f.enc", "openssl enc -aes-256-cbc -k <SECRET:password> -in f -out f.enc"),
    ("openssl rsa -in k.pem -passin pass:Op3nSsl -out k2.pem", "openssl rsa -in k.pem -passin pass:<SECRET:password> -out k2.pem"),
    ('openssl pkcs12 -export -passout pass:"Pkcs12Pw" -out a.p12', 'openssl pkcs12 -export -passout pass:"<SECRET:password>" -out a.p12'),
]
COMMAND_LOOKALIKES = [
    "mysql -u root -p shop; echo $MYSQL_PWD; MYSQL_PWD=$DB_PASSWORD mysql",
    "echo $PASSWORD | sudo -S ls; echo \"${SUDO_PW}\" | sudo -S id; cat pw.txt | docker login -u me --password-stdin",
    "echo hello | sudo tee /etc/motd; echo 3 | sudo tee /proc/sys/vm/drop_caches",  # sudo without -S reads no password
    "grep -w pattern file; curl -k https://x; psql -U postgres -w; sort -S 1G big.txt; du -k /var; ps -U root",
    "ldapsearch -x -W -D cn=admin -b dc=x; smbclient -L fs -U alice; smbclient -N -L fs",  # prompts, no password given
    "htpasswd -c .htpasswd admin; htpasswd -v .htpasswd admin; htpasswd -D .htpasswd old",  # no -b: it prompts
    "openssl rsa -in k.pem -passin env:KEY_PASS -out k2.pem; openssl rsa -passin file:/run/pass -in k.pem",
    "openssl s_client -connect host:443 -k; git commit -S -m 'signed'",
    'docker login -u me -p "$REGISTRY_PASSWORD" ghcr.io; docker login -u me --password-stdin; docker run -p 8080:80 web',
    "ssh -p 2222 me@host; mkdir -p /srv/login -p; docker login ghcr.io && docker push -q ghcr.io/x",
]


@pytest.mark.parametrize(("text", "expected"), COMMANDS, ids=[c[1][:40] for c in COMMANDS])
def test_a_password_a_tool_takes_on_its_command_line_is_redacted(text, expected):
    out, counts = redact_text(text)
    assert out == expected
    assert counts == Counter(password=1)


@pytest.mark.parametrize("text", COMMAND_LOOKALIKES, ids=[t[:30] for t in COMMAND_LOOKALIKES])
def test_a_command_without_a_literal_password_is_unchanged(text):
    assert redact_text(text) == (text, Counter())


# The gates of the rules above; each must open on every text its rules match (a gate that misses is a leak).
_NEW_GATES = ("capital_a", "aws_secret", "dot_token", "sas", "cli_tool", "login_flag", "short_flag")
_GATED_RULES = [r for r in _RULES if r.gate in _NEW_GATES and r.pattern is not None]


@pytest.mark.parametrize("rule", _GATED_RULES, ids=[f"{r.gate}:{r.pattern.pattern[:30]}" for r in _GATED_RULES])
def test_a_gate_opens_on_every_text_its_rule_matches(rule):
    matched = []

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.from_regex(rule.pattern), st.text(max_size=5), st.text(max_size=5))
    def check(found, before, after):
        text = before + " " + found + " " + after
        if rule.pattern.search(text) is not None:  # a lookbehind may refuse what the padding put before it
            matched.append(text)
            assert rule.gate in open_gates(text), text

    check()
    assert matched


OPENAI = _j("sk", "-proj-", "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr78St90")
OPENAI_LEGACY = _j("sk", "-", "Ab12Cd34Ef56Gh78Ij90", "T3Blbk", "FJ", "Kl12Mn34Op56Qr78St90")
ANTHROPIC = _j("sk", "-ant-", "api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe")


def test_a_model_key_glued_to_an_id_by_a_dash_or_underscore_is_redacted():
    for text, expected in [
        (f"task-7-{OPENAI}", "task-7-<SECRET:openai_key>"),
        (f"zdup-split-{OPENAI}", "zdup-split-<SECRET:openai_key>"),
        (f"run_{OPENAI_LEGACY}", "run_<SECRET:openai_key>"),
        (f"job-{ANTHROPIC}", "job-<SECRET:anthropic_key>"),
    ]:
        assert redact_text(text)[0] == expected


def test_an_id_ending_in_sk_before_a_generated_looking_run_is_unchanged():
    # without a scope or the legacy mark, `-sk-` inside an id is a word's end, not a key's start
    for text in ("task-sk-Learn2024ModelsComparisonTableV2", "risk-sk-Q3Results2024DashboardFinal", "disk_sk-AbC123DeF456GhI789JkL"):
        assert redact_text(text) == (text, Counter()), text


def test_a_split_key_with_a_glued_model_key_is_redacted_in_the_trajectory():
    from schemas.trajectory import Source, SystemPrompt, Trajectory, Turn
    from stages.redact import redact_trajectory

    traj = Trajectory(traj_id="t1", domain="terminal", split_key=f"task-7-{OPENAI}", source=Source(),
                      system=SystemPrompt("task", "keys"), turns=[Turn("ls", "ok")])
    out, counts = redact_trajectory(traj)
    assert out.split_key == "task-7-<SECRET:openai_key>" and counts == Counter(openai_key=1)
