"""A letters-only secret in an environment assignment (or alone on a YAML line) is redacted; code of the same shape
stays: type annotations, keyword arguments, schema lines, object entries; an INI file's ``password = letmein`` under a
``[section]`` header is redacted too."""

from __future__ import annotations

from collections import Counter

import pytest

from stages.env_assignments import ENVIRONMENT, MAPPING, assignment_context, dockerfile_env_value
from stages.redact import redact_text

# (text, expected)
ENVIRONMENT_CASES = [
    ("export DB_PASSWORD=letmein", "export DB_PASSWORD=<SECRET:password>"),
    ("PGPASSWORD=correcthorsebatterystaple psql -h db", "PGPASSWORD=<SECRET:password> psql -h db"),
    ("docker run --rm -e MYSQL_ROOT_PASSWORD=supersecret -e MYSQL_DATABASE=shop mysql:8",
     "docker run --rm -e MYSQL_ROOT_PASSWORD=<SECRET:password> -e MYSQL_DATABASE=shop mysql:8"),
    ("    POSTGRES_PASSWORD: supersecret", "    POSTGRES_PASSWORD: <SECRET:password>"),
    ("export API_TOKEN=abcdefghijklmnopqrstuvwxyzabcdef", "export API_TOKEN=<SECRET:token>"),
    ('export API_TOKEN="abcdefghijklmnopqrstuvwxyzabcdef"', 'export API_TOKEN="<SECRET:token>"'),
    ("export db_password=letmein", "export db_password=<SECRET:password>"),
    ("export A=1 DB_PASSWORD=letmein B=2", "export A=1 DB_PASSWORD=<SECRET:password> B=2"),
    ("declare -x DB_PASSWORD=letmein", "declare -x DB_PASSWORD=<SECRET:password>"),
    ("cd /app && PGPASSWORD=letmein psql -h db", "cd /app && PGPASSWORD=<SECRET:password> psql -h db"),
    ("root@box:/app# PGPASSWORD=letmein psql", "root@box:/app# PGPASSWORD=<SECRET:password> psql"),
    ("(PGPASSWORD=letmein psql)", "(PGPASSWORD=<SECRET:password> psql)"),
    ("env -i PATH=/bin DB_PASSWORD=letmein ./run.sh", "env -i PATH=/bin DB_PASSWORD=<SECRET:password> ./run.sh"),
    ("sudo DB_PASSWORD=letmein ./run.sh", "sudo DB_PASSWORD=<SECRET:password> ./run.sh"),
    ("docker run --env=POSTGRES_PASSWORD=supersecret postgres", "docker run --env=POSTGRES_PASSWORD=<SECRET:password> postgres"),
    ("docker build --build-arg NPM_TOKEN=abcdefghijklmnopqrstuvwxyz .", "docker build --build-arg NPM_TOKEN=<SECRET:token> ."),
    ("kubectl create secret generic db --from-literal=password=letmein",
     "kubectl create secret generic db --from-literal=password=<SECRET:password>"),
    ("FROM python:3.12\nENV DB_PASSWORD=letmein\nENV API_TOKEN abcdefghijklmnopqrstuvwxyzabcdef\n"
     'ENV SECRET_KEY "my secret phrase"\nARG NPM_TOKEN=abcdefghijklmnopqrstuvwxyz',
     "FROM python:3.12\nENV DB_PASSWORD=<SECRET:password>\nENV API_TOKEN <SECRET:token>\n"
     'ENV SECRET_KEY "<SECRET:secret>"\nARG NPM_TOKEN=<SECRET:token>'),
    ("DB_HOST=localhost\nDB_PASSWORD=letmein\nSECRET_KEY=changeme",
     "DB_HOST=localhost\nDB_PASSWORD=<SECRET:password>\nSECRET_KEY=<SECRET:secret>"),
    ("services:\n  db:\n    environment:\n      POSTGRES_PASSWORD: supersecret\n      - MYSQL_PASSWORD=supersecret",
     "services:\n  db:\n    environment:\n      POSTGRES_PASSWORD: <SECRET:password>\n      - MYSQL_PASSWORD=<SECRET:password>"),
    ("MYSQL_PWD=letmein mysql -u root", "MYSQL_PWD=<SECRET:password> mysql -u root"),
    ('echo "DB_PASSWORD=letmein" >> .env', 'echo "DB_PASSWORD=<SECRET:password>" >> .env'),
    ('"Env": ["DB_PASSWORD=letmein", "PATH=/usr/bin"]', '"Env": ["DB_PASSWORD=<SECRET:password>", "PATH=/usr/bin"]'),
    # inside JSON strings, where line breaks and tabs are escapes
    ('{"command": "PGPASSWORD=letmein psql -h db"}', '{"command": "PGPASSWORD=<SECRET:password> psql -h db"}'),
    ('{"command": "cd /app\\nexport DB_PASSWORD=letmein\\nls"}', '{"command": "cd /app\\nexport DB_PASSWORD=<SECRET:password>\\nls"}'),
    ('{"c": "FROM x\\nENV DB_PASSWORD letmein\\n"}', '{"c": "FROM x\\nENV DB_PASSWORD <SECRET:password>\\n"}'),
    ('{"c": "env:\\n\\tPOSTGRES_PASSWORD: supersecret\\n"}', '{"c": "env:\\n\\tPOSTGRES_PASSWORD: <SECRET:password>\\n"}'),
]
# A lower- or mixed-case `name: value` alone on its line: YAML, a credentials block in a task prompt.
MAPPING_CASES = [
    ("password: letmein", "password: <SECRET:password>"),
    ("database:\n  password: secret  # dev only", "database:\n  password: <SECRET:password>  # dev only"),
    ("Username: theagentcompany\nPassword: theagentcompany\n", "Username: theagentcompany\nPassword: <SECRET:password>\n"),
    ('"\\nPassword: theagentcompany\\n"', '"\\nPassword: <SECRET:password>\\n"'),
    ("- db_password: hunter", "- db_password: <SECRET:password>"),
]
# Code, schemas and prose of the same shapes: unchanged.
LOOKALIKES = [
    "def login(self, password: str, token: Optional[str] = None) -> bool:",
    'class Settings(BaseSettings):\n    DB_PASSWORD: str\n    API_TOKEN: SecretStr\n    SECRET_KEY: str = "change-me"',
    "@dataclass\nclass Creds:\n    password: str\n    token: bytes\n    secret: Secret\n    PASSWORD: ClassVar[str]",
    "interface Login {\n  password: string;\n  token?: string\n  api_key: string\n}",
    "type Creds = { password: string, token: string }",
    "conn = connect(\n    user=user,\n    password=password,\n)",
    "client = Client(\n    api_key=api_key,\n    token=token)",
    "env = dict(\n    DB_PASSWORD=password,\n    API_TOKEN=token,\n)",
    'def f(\n    password: str,\n    token: str = "",\n):',
    "components:\n  schemas:\n    Login:\n      properties:\n        password:\n          type: string\n"
    "        token: {type: string}",
    "password: string\ntoken: any\nsecret: object",
    "password: SecretStr\npassword: Optional[str]\npassword: str | None\nAPI_TOKEN: Final = 'x'",
    "  token: identifier",  # a lexer dump: under `token` a value must look generated outside an environment
    "secret: rosebud",  # under `secret` a short word stays outside an environment
    "const body = {\n  username: username,\n  password: password\n};",
    "User.create(email: email, password: password)",
    "  db_password: password",
    "Password: see the vault\nPassword: Hunter\nToken: expired\n  password: none",
    "password_file: secrets\nexport PASSWORD_FILE=/run/secrets/db\nENV PASSWORD_FILE /run/secrets/pw",
    "export TOKENIZERS_PARALLELISM=false MAX_TOKENS=4096 HF_HUB_DISABLE_IMPLICIT_TOKEN=1 USE_AUTH_TOKEN=true",
    'export DB_PASSWORD=$DB_PASSWORD\nexport DB_PASSWORD="${DB_PASSWORD}"\nexport DB_PASSWORD=\nENV API_TOKEN=${API_TOKEN}',
    "API_TOKEN=get_token()\nTOKEN=settings.TOKEN\nSECRET_KEY = secret_key\n    SECRET_KEY=secret_key,\nf(API_TOKEN=token)",
    "self.password = password\npassword=password\nthe password=letmein case is a keyword argument in prose",
    "echo TOKEN=abc\n2024-01-01 INFO API_TOKEN=missing",
    'print(f"token: {token}")\nlogger.info("password: %s", pw)',
    "env:\n  - name: DB_PASSWORD\n    valueFrom:\n      secretKeyRef: {name: db, key: password}",
    "TOKEN_TYPE=bearer\nexport GIT_ASKPASS=echo\nARG NPM_TOKEN\nENV PATH /usr/local/bin:$PATH",
    "      POSTGRES_PASSWORD: ${POSTGRES_PASSWORD}\n      POSTGRES_PASSWORD: Example",
]


@pytest.mark.parametrize(("text", "expected"), ENVIRONMENT_CASES, ids=[e[:40] for _, e in ENVIRONMENT_CASES])
def test_a_letters_only_secret_in_an_environment_assignment_is_redacted(text, expected):
    out, counts = redact_text(text)
    assert out == expected
    assert sum(counts.values()) == expected.count("<SECRET:")


@pytest.mark.parametrize(("text", "expected"), MAPPING_CASES, ids=[e[:40] for _, e in MAPPING_CASES])
def test_a_lowercase_word_alone_on_a_yaml_line_under_a_secret_key_is_redacted(text, expected):
    out, counts = redact_text(text)
    assert out == expected
    assert counts == Counter(password=1)


INI_CASES = [
    ("[client]\nuser = root\npassword = letmein\n", "[client]\nuser = root\npassword = <SECRET:password>\n"),
    ("[mysqld]\npassword=letmein", "[mysqld]\npassword=<SECRET:password>"),
    ("$ cat ~/.my.cnf\n[client]\nuser=root\npassword=Letmein  # local only\nhost=localhost\n",
     "$ cat ~/.my.cnf\n[client]\nuser=root\npassword=<SECRET:password>  # local only\nhost=localhost\n"),
    ("[database]\r\n  db_password = hunter\r\n", "[database]\r\n  db_password = <SECRET:password>\r\n"),
]
INI_LOOKALIKES = [
    "password = letmein\n",  # no section header: Python's `password = password` has this shape
    "def connect():\n    password = letmein\n",
    "[client]\npassword = password\n",
    "[client]\npassword = get_password()\n",
    "[client]\n    password = self.password\n",
    "[client]\nprint(password = letmein)\n",
    "[auth]\ntoken = identifier\n",  # what a key that only says `token` holds must look machine-made
]


PROPERTIES_CASES = [
    ("spring.datasource.password=changeme\n", "spring.datasource.password=<SECRET:password>\n"),
    ("server.port=8080\nspring.datasource.password=secret", "server.port=8080\nspring.datasource.password=<SECRET:password>"),
    ("mail.smtp.password: Letmein\n", "mail.smtp.password: <SECRET:password>\n"),
]
PROPERTIES_LOOKALIKES = [
    "self.password=password",  # an attribute set to its own name
    "self.password=pw",
    "    this.password=password;",
    "jdbc.password = letmein",  # spaces around `=`: Python's attribute assignment has this shape
    "obj.password=get_pw()",
    "config.password: str",
    "db.password=${DB_PASSWORD}",
    "echo db.password=letmein",  # not at the line's start
]


CONFIG_FILE_CASES = INI_CASES + PROPERTIES_CASES
CONFIG_FILE_LOOKALIKES = INI_LOOKALIKES + PROPERTIES_LOOKALIKES


@pytest.mark.parametrize(("text", "expected"), CONFIG_FILE_CASES, ids=[e[:40] for _, e in CONFIG_FILE_CASES])
def test_a_letters_only_password_on_an_ini_or_java_properties_line_is_redacted(text, expected):
    out, counts = redact_text(text)
    assert out == expected
    assert counts == Counter(password=1)


@pytest.mark.parametrize("text", CONFIG_FILE_LOOKALIKES, ids=[t[:40] for t in CONFIG_FILE_LOOKALIKES])
def test_a_config_shaped_line_of_code_or_without_a_section_is_unchanged(text):
    assert redact_text(text) == (text, Counter())


@pytest.mark.parametrize("text", LOOKALIKES, ids=[t[:40] for t in LOOKALIKES])
def test_code_of_the_same_shape_is_unchanged(text):
    assert redact_text(text) == (text, Counter())


def _context(text: str, key: str, value: str) -> str | None:
    key_start = text.index(key)
    value_start = text.index(value, key_start + len(key))
    quoted = text[value_start] in "\"'"
    inner = value.strip("\"'")
    return assignment_context(text, key_start, key_start + len(key), value_start, value_start + len(value), inner, quoted)


@pytest.mark.parametrize(
    ("text", "key", "value", "context"),
    [("export pw_token=abc", "pw_token", "abc", ENVIRONMENT),
     ("PGPASSWORD=abc psql", "PGPASSWORD", "abc", ENVIRONMENT),
     ("pgpassword=abc psql", "pgpassword", "abc", None),  # a lower-case name alone: a keyword argument
     ("DB_PASSWORD=abc,", "DB_PASSWORD", "abc", None),  # a call's argument
     ("echo DB_PASSWORD=abc", "DB_PASSWORD", "abc", None),
     ("DB_PASSWORD: abc", "DB_PASSWORD", "abc", ENVIRONMENT),
     ('DB_PASSWORD: "Abc"', "DB_PASSWORD", '"Abc"', ENVIRONMENT),
     ("DB_PASSWORD: Abc", "DB_PASSWORD", "Abc", None),  # a class name, perhaps
     ("password: abc", "password", "abc", MAPPING),
     ("password: abc more", "password", "abc", None),
     ("x password: abc", "password", "abc", None),
     ("password: str", "password", "str", None),
     ("db_password: password", "db_password", "password", None)],
)
def test_the_context_of_an_assignment_comes_from_its_line(text, key, value, context):
    assert _context(text, key, value) == context


def test_a_dockerfile_legacy_env_line_gives_the_rest_of_its_line_as_the_value():
    text = "ENV SECRET_KEY my secret phrase\nRUN make"
    start, end, quoted = dockerfile_env_value(text, 4, 14)
    assert (text[start:end], quoted) == ("my secret phrase", False)
    assert dockerfile_env_value("RUN SECRET_KEY x", 4, 14) is None
    assert dockerfile_env_value("ENV SECRET_KEY=x", 4, 14) is None  # the `=` form is an ordinary assignment
