"""Secrets given as a pair rather than as ``KEY=value``: a variable's name and value as two fields (Kubernetes and
Compose ``env:`` lists, ECS task definitions), a (user, password) pair of literals in HTTP client code, a password
quoted on its own after ``curl -u user:``, ``login -p`` of the Azure, OpenShift and Cloud Foundry command lines; and
passwords that SQL statements and more command-line tools (MongoDB's, ``sqlcmd``, ``mssql-cli``, ``gpg``, ``keytool``,
``chpasswd``, ``passwd``, ``openssl passwd``, ``rabbitmqctl``, ``zip``, ``7z``, ``ssh-keygen``, ``net user``) set.

Each planted case must come out exactly as expected; each look-alike must come back byte-identical.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stages.redact import _ENV_PAIR, _RULES, _SSH_KEYGEN_FLAG, open_gates, redact_text

PW = "hunter2pass"

REDACTED = [
    # Kubernetes container env, block style; a letters-only value is a value here, not a name in code
    ("        - name: DB_PASSWORD\n          value: hunter2pass\n",
     "        - name: DB_PASSWORD\n          value: <SECRET:password>\n"),
    ("        - name: DB_PASSWORD\n          value: letmein\n",
     "        - name: DB_PASSWORD\n          value: <SECRET:password>\n"),
    ('  - name: "API_TOKEN"\n    value: "ghx9Q2kLmN4pR7sT"\n', '  - name: "API_TOKEN"\n    value: "<SECRET:token>"\n'),
    ("  - name: AWS_SECRET_ACCESS_KEY\r\n    value: 'a1B2c3D4e5'\r\n",
     "  - name: AWS_SECRET_ACCESS_KEY\r\n    value: '<SECRET:aws_secret_key>'\r\n"),
    # flow style, and the JSON of an ECS task definition or `kubectl get -o json`, also as an escaped JSON string
    ("env: [{name: DB_PASSWORD, value: hunter2pass}]", "env: [{name: DB_PASSWORD, value: <SECRET:password>}]"),
    ('"environment": [{"name": "POSTGRES_PASSWORD", "value": "letmein"}]',
     '"environment": [{"name": "POSTGRES_PASSWORD", "value": "<SECRET:password>"}]'),
    ('{\\"name\\": \\"DB_PASSWORD\\", \\"value\\": \\"hunter2pass\\"}',
     '{\\"name\\": \\"DB_PASSWORD\\", \\"value\\": \\"<SECRET:password>\\"}'),
    # HTTP basic auth as literals in code
    ("requests.get(url, auth=('admin', 'hunter2pass'))", "requests.get(url, auth=('admin', '<SECRET:password>'))"),
    ('session.auth = ("admin", "hunter2pass")', 'session.auth = ("admin", "<SECRET:password>")'),
    ("httpx.get(url, auth=['admin', 'letmein'])", "httpx.get(url, auth=['admin', '<SECRET:password>'])"),
    ("requests.auth.HTTPBasicAuth('admin', 'hunter2pass')", "requests.auth.HTTPBasicAuth('admin', '<SECRET:password>')"),
    ("HTTPDigestAuth('admin', 'hunter2pass')", "HTTPDigestAuth('admin', '<SECRET:password>')"),
    ("aiohttp.BasicAuth('admin', 'hunter2pass')", "aiohttp.BasicAuth('admin', '<SECRET:password>')"),
    # curl with only the password quoted (a shell needs it for `$`, `&` or a space)
    ("curl -u admin:'hunter2pass' https://x/api", "curl -u admin:'<SECRET:password>' https://x/api"),
    ('curl -s --user admin:"p@ss w0rd&x" https://x/api', 'curl -s --user admin:"<SECRET:password>" https://x/api'),
    # `login -p` of more command lines
    ("az login -u user@corp.com -p hunter2pass", "az login -u user@corp.com -p <SECRET:password>"),
    ("oc login -u developer -p hunter2pass https://api.crc:6443",
     "oc login -u developer -p <SECRET:password> https://api.crc:6443"),
    ("cf login -a https://api.example.com -u me -p hunter2pass", "cf login -a https://api.example.com -u me -p <SECRET:password>"),
    # a `login -p` that follows no tool neither counts nor hides the tool's login after it
    ("open the web login page, then docker login -u me -p hunter2pass",
     "open the web login page, then docker login -u me -p <SECRET:password>"),
    ("helm registry login  r.example.com -u me -p hunter2pass", "helm registry login  r.example.com -u me -p <SECRET:password>"),
    # SQL that sets a password (MySQL, PostgreSQL, SQL Server)
    ("CREATE USER 'app'@'%' IDENTIFIED BY 'hunter2pass';", "CREATE USER 'app'@'%' IDENTIFIED BY '<SECRET:password>';"),
    ("ALTER USER 'root'@'localhost' IDENTIFIED WITH mysql_native_password BY 'letmein';",
     "ALTER USER 'root'@'localhost' IDENTIFIED WITH mysql_native_password BY '<SECRET:password>';"),
    ("ALTER USER postgres PASSWORD 'hunter2pass';", "ALTER USER postgres PASSWORD '<SECRET:password>';"),
    ('psql -c "CREATE ROLE app WITH LOGIN ENCRYPTED PASSWORD \'letmein\';"',
     'psql -c "CREATE ROLE app WITH LOGIN ENCRYPTED PASSWORD \'<SECRET:password>\';"'),
    ("create user app with password 'hunter2pass'", "create user app with password '<SECRET:password>'"),
    ("CREATE LOGIN app WITH PASSWORD = 'hunter2pass', CHECK_POLICY = OFF",
     "CREATE LOGIN app WITH PASSWORD = '<SECRET:password>', CHECK_POLICY = OFF"),
    ("SET PASSWORD FOR 'root'@'localhost' = PASSWORD('letmein');",
     "SET PASSWORD FOR 'root'@'localhost' = PASSWORD('<SECRET:password>');"),
    # more tools that take a password on their command line
    ("mongosh -u admin -p hunter2pass --authenticationDatabase admin",
     "mongosh -u admin -p <SECRET:password> --authenticationDatabase admin"),
    ("mongodump -u admin -p 'hunter2pass' --db shop", "mongodump -u admin -p '<SECRET:password>' --db shop"),
    ("/opt/mssql-tools/bin/sqlcmd -S localhost -U sa -P 'hunter2pass' -Q 'SELECT 1'",
     "/opt/mssql-tools/bin/sqlcmd -S localhost -U sa -P '<SECRET:password>' -Q 'SELECT 1'"),
    ("gpg --batch --passphrase hunter2pass -d f.gpg", "gpg --batch --passphrase <SECRET:password> -d f.gpg"),
    ("keytool -genkeypair -alias app -storepass hunter2pass -keystore app.jks",
     "keytool -genkeypair -alias app -storepass <SECRET:password> -keystore app.jks"),
    ("echo 'root:letmein' | chpasswd", "echo 'root:<SECRET:password>' | chpasswd"),
    ("rabbitmqctl change_password admin hunter2pass", "rabbitmqctl change_password admin <SECRET:password>"),
    ("rabbitmqctl add_user admin hunter2pass", "rabbitmqctl add_user admin <SECRET:password>"),
    ("mssql-cli -S localhost -U sa -P hunter2pass", "mssql-cli -S localhost -U sa -P <SECRET:password>"),
    ("zip -P hunter2pass secret.zip notes.txt", "zip -P <SECRET:password> secret.zip notes.txt"),
    ("unzip -P 'hunter2pass' secret.zip", "unzip -P '<SECRET:password>' secret.zip"),
    ("7z x -phunter2pass archive.7z", "7z x -p<SECRET:password> archive.7z"),
    ("ssh-keygen -t ed25519 -N 'hunter2pass' -f key", "ssh-keygen -t ed25519 -N '<SECRET:password>' -f key"),
    ("net user admin hunter2pass /add", "net user admin <SECRET:password> /add"),
    # a new user's password typed twice into passwd, or hashed by openssl for useradd
    ("echo -e 'hunter2pass\\nhunter2pass' | passwd bob", "echo -e '<SECRET:password>\\n<SECRET:password>' | passwd bob"),
    ('printf "hunter2pass\\nhunter2pass\\n" | sudo passwd bob',
     'printf "<SECRET:password>\\n<SECRET:password>\\n" | sudo passwd bob'),
    ("useradd -m -p $(openssl passwd -1 hunter2pass) bob", "useradd -m -p $(openssl passwd -1 <SECRET:password>) bob"),
    ("openssl passwd -6 -salt xyz 'hunter2pass'", "openssl passwd -6 -salt xyz '<SECRET:password>'"),
]

KEPT = [
    # the value comes from elsewhere, is empty, or names no secret
    "        - name: DB_PASSWORD\n          valueFrom:\n            secretKeyRef:\n              name: db\n",
    "        - name: DB_PASSWORD\n          value: ${DB_PASSWORD}\n",
    '        - name: DB_PASSWORD\n          value: ""\n',
    "- name: GITHUB_TOKEN\n  value: ${{ secrets.GITHUB_TOKEN }}\n",
    '{"name": "PASSWORD_FILE", "value": "/run/secrets/db"}',
    '{"name": "DB_HOST", "value": "localhost"}',
    "- name: SECRET_NAME\n  value: my-db-secret\n",
    # a JSON schema field, and what a key named only `token` holds in data (not machine-made)
    '{"name": "password", "type": "string"}',
    '{"name": "token", "value": "Hello"}',
    '{"name": "max_tokens", "value": 4096}',
    "name: token\nvalue: true\n",
    # names, not literals, in code; an empty password
    "requests.get(url, auth=(user, password))",
    "HTTPBasicAuth(username, password)",
    "auth=('admin', '')",
    "oauth=('admin', 'x')",
    # a reference, and no password at all
    "curl -u admin:'$PASSWORD' https://x",
    'curl -u admin:"${API_PASSWORD}" https://x',
    "curl -u admin: https://x",
    # `-p` after another word than a login's tool
    "blaz login -p 8080",
    # SQL without a literal password, a JSON schema that names a login's password, prose
    "CREATE USER app IDENTIFIED BY '$DB_PASSWORD';",
    "ALTER USER bob PASSWORD NULL;",
    '[{"function":{"name":"login","parameters":{"properties":{"password":{"type":"string"}}}}}]',
    "I identified by reading the log that the user password check fails.",
    # tools without a literal password
    "mongosh --port 27017 -u admin -p",
    "sqlcmd -S localhost -U sa -P",
    "ssh-keygen -t ed25519 -N '' -f key",
    "keytool -list -storepass:env STOREPASS -keystore app.jks",
    "chpasswd < users.txt",
    "gpg --batch --passphrase-file pw.txt -d f.gpg",
    "ssh-keygen -t ed25519 -N '' -f key",
    "ssh-keygen -f key.pub; tar -N 2024-01-01 -cf a.tar dir",  # `-N` of another command
    "git log -P 'fix|feat' --oneline",
    "gzip -P 4 big.log",
    "7z a -p archive.7z dir",  # `-p` alone asks for it
    "net user admin /delete",
    "net user admin *",
    "echo -e '$PW\\n$PW' | passwd bob",
    "echo -e 'yes\\nno' | passwd bob",  # two different lines: no password typed twice
    "openssl passwd -stdin < pw.txt",
    "openssl passwd -1 \"$NEW_PASSWORD\"",
]


@pytest.mark.parametrize(("text", "expected"), REDACTED)
def test_a_secret_given_as_a_pair_is_replaced(text: str, expected: str) -> None:
    out, counts = redact_text(text)
    assert out == expected
    assert PW not in out
    assert sum(counts.values()) == 1


@pytest.mark.parametrize("text", KEPT)
def test_a_pair_that_holds_no_secret_is_unchanged(text: str) -> None:
    out, counts = redact_text(text)
    assert out == text
    assert not counts


# Each rule above sits behind a gate; a gate that stays shut on a text its rule matches is a leak.
_NEW_GATES = ("auth_pair", "password_tool", "archive_tool", "net_user", "user_password", "passwd", "sql", "sql_identified")
# rules that match more than they replace: the tool or name that decides stands outside the match
_DECIDED_BY_CONTEXT = (_ENV_PAIR, _SSH_KEYGEN_FLAG)
_GATED_RULES = [r for r in _RULES if r.gate in _NEW_GATES or (r.pattern is not None and "storepass" in r.pattern.pattern)]
_GATED_RULES += [r for r in _RULES if r.pattern is _ENV_PAIR]


@pytest.mark.parametrize("rule", _GATED_RULES, ids=[f"{r.gate}:{r.pattern.pattern[:30]}" for r in _GATED_RULES])
def test_a_gate_opens_on_every_text_its_rule_matches(rule):
    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(st.from_regex(rule.pattern), st.text(max_size=5), st.text(max_size=5))
    def check(found, before, after):
        text = before + " " + found + " " + after
        if rule.pattern in _DECIDED_BY_CONTEXT:  # only the replacements must open the gate
            if rule.apply(text, Counter()) == text:
                return
        elif rule.pattern.search(text) is None:  # `before` ended a word the pattern must not follow
            return
        assert rule.gate in open_gates(text), text

    check()
