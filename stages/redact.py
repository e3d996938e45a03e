"""Secret redaction (SPEC §10): credentials in any text field become typed placeholders ``<SECRET:kind>``.

It runs in the ingest task before the trajectories layer is written, so ``raw/`` keeps the original
bytes and every later layer (trajectories, samples, shards) sees only placeholders. A placeholder keeps
the surrounding text readable: ``export AWS_SECRET_ACCESS_KEY=<SECRET:aws_secret_key>``,
``https://deploy:<SECRET:url_password>@git.example.com/``, ``Authorization: Bearer <SECRET:jwt>``.

Kinds (each rule sits behind a gate — a substring or a literal-anchored pattern that one C-level scan
of the text's UTF-8 bytes decides, rare gates sharing one scan — so the common case, no secret anywhere,
costs about twenty fast scans per text and no rule regex at all):

- ``private_key`` — PEM/OpenSSH/PGP private key blocks, also with escaped ``\\n`` inside JSON strings,
  and truncated blocks without their END line; ``gcp_private_key_id`` — the ``private_key_id`` of a
  Google service-account JSON (its ``private_key`` is a PEM block);
- ``aws_access_key`` (``AKIA``/``ASIA``/``ABIA``/``ACCA`` + 16); ``aws_secret_key`` also without a key name: a
  40-character base64 run with mixed case and a digit, ``/`` or ``+`` at most 200 characters from a redacted key id
  in the same field (``aws configure`` prompts, a credentials CSV, prose), after the ``Secret Access Key [...]:``
  prompt, or in ``aws configure set aws_secret_access_key X``; ``gcp_api_key`` (``AIza…``),
  ``google_oauth_token`` (``ya29.…`` without a Bearer header), ``azure_storage_key`` (``AccountKey=``/
  ``SharedAccessKey=`` in connection strings), ``azure_sas_signature`` (the ``sig=`` of a SAS URL or token: 20+
  characters of possibly percent-encoded base64 with digits and capitals), ``digitalocean_token``
  (``dop_v1_``/``doo_v1_``/``dor_v1_`` + 64 or more hex digits);
- tokens: ``github_token``, ``gitlab_token``, ``slack_token``, ``slack_webhook``, ``anthropic_key``,
  ``openai_key`` (``sk-…``, ``sk-proj-…``; the body must look generated — digits and capitals, or 32+
  characters without dashes — so slugs like ``sk-learn-tutorial-2`` stay), ``huggingface_token``,
  ``stripe_key``, ``npm_token``, ``pypi_token``, ``sendgrid_key`` (``SG.`` + 22 + ``.`` + 43),
  ``telegram_bot_token`` (a bot id of 8–10 digits, ``:AA`` and a mixed-case rest), ``jwt`` (``eyJ….eyJ….…``),
  ``groq_key`` (``gsk_`` + 52), ``replicate_token`` (``r8_`` + 37), ``xai_key`` (``xai-`` + 60–100),
  ``perplexity_key`` (``pplx-`` + 40–64), ``vault_token`` (HashiCorp Vault's ``hvs.``/``hvb.``/``hvr.`` + 90 or more),
  ``age_secret_key`` (``AGE-SECRET-KEY-1`` + 58 bech32 characters);
- GitHub (a glued one's body mixed case), GitLab, Hugging Face (not after ``_``: ``from_hf_AutoModel…`` is a name),
  JWT and AWS tokens also glued to the word before them (``gh_ghp_…``, ``call_eyJ…``, ``1glpat-…``, ``xAKIA…``); an ``AKIA`` key only where no longer run of
  capitals and digits holds it and no ``+``, ``/`` or ``=`` follows (base64). The other prefixes still need a word
  boundary: ``sk-``, ``sk_live_``, ``xoxb-`` or ``AIza`` end ordinary words and base64 (``task-…``, ``disk_live_…``);
  after a ``-`` or ``_`` only ``sk-ant-`` and an OpenAI key with a scope (``sk-proj-``, ``sk-svcacct-``,
  ``sk-admin-``) or the ``T3BlbkFJ`` mark of legacy keys count (``task-7-sk-proj-…`` in an id);
- ``url_password`` (``scheme://user:PASS@``), ``bearer_token``/``basic_auth`` (``Authorization:``
  headers and a bare ``Bearer <long token>``);
- command-line passwords: ``--password X``, ``--password=X``, ``--api-key X`` …; ``-pSECRET`` only
  after ``mysql``/``mariadb`` tools and ``-p``/``-a`` after ``sshpass``/``redis-cli`` (a bare ``-p``
  is a port, a path or a parent flag far more often than a password); ``curl -u user:PASS`` (also ``user:'PASS'``);
  HTTP basic auth as literals in code (``auth=('user', 'PASS')``, ``HTTPBasicAuth('user', 'PASS')``); SQL that sets one
  (``IDENTIFIED BY 'PASS'``, ``ALTER USER … PASSWORD 'PASS'``, ``SET PASSWORD … = 'PASS'``); likewise each only
  after its tool: ``MYSQL_PWD=PASS``, ``echo PASS | sudo -S`` and ``sudo -S … <<< PASS``, ``echo PASS | docker
  login … --password-stdin`` (any ``login``, ``passwd --stdin``), ``docker login -p PASS`` (podman, helm registry, ``az``,
  ``oc``, ``cf``, …), ``mongosh -p PASS``, ``sqlcmd -P PASS``, ``keytool -storepass PASS``, ``echo 'user:PASS' | chpasswd``,
  ``echo -e 'PASS\\nPASS' | passwd``, ``openssl passwd PASS``, ``rabbitmqctl add_user``/``change_password USER PASS``,
  ``mssql-cli -P PASS``, ``zip``/``unzip -P PASS``, ``7z -pPASS``, ``ssh-keygen -N``/``-P PASS``, ``net user NAME PASS``,
  ``ldapsearch``/``ldapadd``/… ``-w PASS``,
  ``smbclient``/``rpcclient`` ``-U user%PASS``, ``htpasswd -b [FILE] USER PASS``, ``openssl`` ``-k PASS`` and
  ``-passin``/``-passout pass:PASS``;
- credential files: ``.netrc`` entries (``machine H login U password PASS``), ``.pgpass`` lines
  (``host:port:db:user:PASS``), Docker ``config.json`` ``"auth": "<base64 of user:pass>"`` (``docker_auth``);
- a provider token (``ghp_…``, ``AKIA…``, ``eyJ…`` …) that a terminal wrapped over two lines;
- assignments ``KEY=…``, ``export KEY=…``, ``KEY: …``, ``"key": "…"`` whose key names a secret
  (secret, password, passwd, passphrase, token, api_key/apikey, access_key, secret_key, private_key,
  credential, auth_key, client_secret): ``aws_secret_key``, ``azure_client_secret``, ``password``,
  ``token``, ``api_key`` or ``secret`` by the key's name. A key of kind ``token`` also names tokenizer entries,
  logprobs and lexer output, so its value must look machine-made (8+ characters, no space, a digit or case
  changing all the time, not a ``[SPECIAL]`` token); under a ``secret`` a phrase or a short word stays;
- a variable given as a name and a value whose name names a secret (``- name: DB_PASSWORD`` then ``value: …`` in a
  Kubernetes or Compose ``env:`` list, ``{"name": "DB_PASSWORD", "value": "…"}`` in an ECS task definition): the value is
  data, so a word of letters counts, and the same allowances as for an assignment hold;
- any of the above percent-encoded (``next=https%3A%2F%2Fdeploy%3APASS%40host``, ``password%3DPASS``, also
  encoded twice): a run between whitespace that holds an escape of ASCII punctuation, a space or a line break is
  read decoded (``+`` stays: it is a space only in forms, and base64 holds it), and the placeholder takes the encoded
  span of the secret, the rest of the run staying as written;
- ``email`` — only when asked (``emails=True``).

What stays, by decision: values that are not secrets but references or descriptions — empty values,
placeholders, ``$VAR``/``${VAR}``/``{var}``/``%(x)s``/``<your-token>`` references when they are the whole value
(`stages.secret_references`: ``"$3cr3tP@ss"`` or ``"<SECRET:password>hunter2pw"`` only start like one), masked values
(``***``), booleans and null words, numbers (except 4+ digits under a password key), paths
(``PASSWORD_FILE=/run/secrets/db`` — keys ending in ``_file``, ``_path``, ``_url``, ``_type``,
``_count``, ``_id`` … name something else), pagination cursors (``nextPageToken``, ``NextToken``,
``continuation_token``); tokenizer special tokens (``"mask_token": "[MASK]"``, ``"bos_token": "<s>"``) and
logprob entries (``{"token": "Hello"}``); unquoted code (``password=self.password``,
``token=os.environ["T"]``, ``password: str``): a bare word of letters is a name, not a secret — except where
the assignment is configuration (`stages.env_assignments`: ``export DB_PASSWORD=letmein``, ``PGPASSWORD=… psql``,
``-e NAME=…``, Dockerfile ``ENV``, ``.env`` and compose lines, a lone ``password: letmein`` YAML line), where it is a
value, and the ``token``/``secret`` allowances above do not hold in an environment. Look-alikes never match:
git SHAs and hex digests, UUIDs, base64 images, version strings, ``password`` in prose, ``sk-`` inside words
(``task-list``), URLs without credentials.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import itertools
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import unquote

from schemas.stats import Stats
from schemas.trajectory import Demonstration, Trajectory
from stages.env_assignments import ENVIRONMENT, assignment_context, dockerfile_env_value
from stages.secret_references import BRACKETED_START, reference_at, reference_defaults
from stages.steps import trajectory_step

PLACEHOLDER = "<SECRET:{}>"

# A replacer gets a match and returns (replacement, kind), or None to leave the match as it is.
Replacer = Callable[[re.Match], tuple[str, str] | None]


# Tokens anchored on a capital A, in one scan: AWS key ids (AKIA…), Google API keys (AIza…) and the secret half of a
# Telegram bot token (`123456789:AA…`).
_CAPITAL_A_GATE = re.compile(rb"A(?:KIA|SIA|BIA|CCA|Iza|A(?<=[0-9]:AA)[A-Za-z0-9_\-]{32})")
# The rare phrases ending in `key` that open gates of their own, in one scan of the lowercased bytes: the checks that
# tell them apart run only on the texts that hold one.
_KEY_PHRASE_GATE = re.compile(
    rb"key(?:(?<=private key)|(?<=private_key)_id|=(?<=accountkey=)|=(?<=sharedaccesskey=)|(?<=secret[ _]access[ _]key))"
)
_AWS_SECRET_NAME_GATE = re.compile(rb"secret[ _]access[ _]key")
_UNDERSCORE_TOKEN_GATE = re.compile(rb"_[A-Za-z0-9]{16}")
_DASH_TOKEN_GATE = re.compile(rb"-[A-Za-z0-9_\-]{20}")
_DOT_TOKEN_GATE = re.compile(rb"\.[A-Za-z0-9_\-]{20}")
_CLI_TOOL_GATE = re.compile(rb"m(?:ysql|ariadb)")
# SQL that sets a password: `IDENTIFIED BY '…'`, `ALTER USER … PASSWORD '…'`, `SET PASSWORD … = '…'`.
_SQL_PASSWORD_GATE = re.compile(rb"password(?:[ \t]+|[ \t]*=[ \t]*|[ \t]*\([ \t]*)['\"]")  # a literal first: one fast scan
_PASSWD_PIPE_GATE = re.compile(rb"\|[ \t]*(?:sudo[ \t]+)?passwd")  # `… | passwd user`
_NET_USER_GATE = re.compile(rb"net[ \t]+user")  # Windows' `net user NAME PW`
_SQL_IDENTIFIED_GATE = re.compile(rb"identified[ \t]+(?:by|with|as)[ \t]")
_SQL_SET_GATE = re.compile(rb"set[ \t]+password")
_SQL_LEAD = re.compile(rb"\b(?:user|role|login|set)\b")  # before it on its line, in a statement that sets one
_DOCKER_AUTH_GATE = re.compile(rb'auth\\?"')  # `"auth"`, also JSON-escaped
# See `_AUTH_PAIR`; the literal first makes it one fast scan.
_AUTH_PAIR_GATE = re.compile(rb"auth(?:(?<![\w-]auth)[ \t]*=[ \t]*[(\[]|\((?<=basicauth\()|\((?<=digestauth\()|\((?<=proxyauth\())")
# Over the lowercased bytes of a text with a keyword: tools whose name or password flag holds `pass` (sshpass, htpasswd,
# `login --password-stdin`, `passwd --stdin`, openssl's `-passin pass:…`).
_PASS_TOOL_GATE = re.compile(rb"pass(?:(?<=sshpass)|wd(?<=htpasswd)|wd[ \t]+--stdin|word-stdin|(?:in|out)[ \t]+['\"]?pass:)")
# The short flags that tools take a password with or after: `sudo -S` (from stdin), `ldapsearch -w`, `smbclient -U
# user%PASS`, `openssl enc -k`.
_SHORT_FLAG_GATE = re.compile(rb"-(?:[SUkw](?![A-Za-z0-9_-])|-user=|-stdin)")
_PGPASS_GATE = re.compile(rb":(?:\d{1,5}|\*):[^:\s]+:[^:\s]+:\S")
# Prefixes of the provider tokens above; a token whose line ends inside it was wrapped by a terminal.
_WRAP_HEAD = r"(?:gh[pousr]_|github_pat_|gl(?:pat|dt|rt|ptt)-|xox[a-z]-|sk-|hf_|npm_|pypi-|whsec_|[sr]k_(?:live|test)_|A(?:KIA|SIA|BIA|CCA|Iza)|eyJ)"
# Its gate runs over the reversed bytes: the scan then starts from a literal newline (fast) and reads the line's
# last token-like run backwards, up to one of the prefixes above (each spelled backwards, then a word boundary).
_WRAPPED_GATE_REVERSED = re.compile(
    rb"\n(?<=[A-Za-z0-9_\-]\n)\r?[A-Za-z0-9_.\-]*?"
    rb"(?:_[pousr]hg|_tap_buhtig|-(?:tap|td|tr|ttp)lg|-[a-z]xox|-ks|_fh|_mpn|-ipyp|_ceshw|_(?:evil|tset)_k[sr]"
    rb"|(?:AIK|AIS|AIB|ACC|azI)A|Jye)(?![A-Za-z0-9_\-])"
)
# Escapes of ASCII punctuation, space, tab and line breaks: what encoders escape and what the rules' separators are made
# of. An escaped letter or digit and the bytes of a non-ASCII character stay as written (value classes take `%`), and so
# does a colon between digits: a time, a port or a Debian epoch (`passwd_1%3a4.13`), never `key: value`.
_ESCAPE = r"%(?:0[9AaDd]|2[0-9A-Fa-f]|3[B-Fb-f]|(?<![0-9]%)3[Aa]|3[Aa](?![0-9])|40|5[B-Fb-f]|60|7[B-Eb-e])"
_ESCAPE_GATE = re.compile(_ESCAPE.encode("ascii"))
_PERCENT_BYTE = ord("%")  # an int needle is one memchr; a bytes needle costs a buffer lookup per text
_KEYWORDS = ("secret", "pass", "token", "key", "credential")
_KEYWORD_BYTES = tuple(w.encode("ascii") for w in _KEYWORDS)


def open_gates(text: str) -> set[str]:
    """The gates `text` opens: one C-level scan each over its UTF-8 bytes (raw, or ASCII-lowercased)."""
    raw = text.encode("utf-8", "surrogatepass")
    low = raw.lower()
    gates = set()
    if b"key" in low:
        gates.add("keyword")
        if _KEY_PHRASE_GATE.search(low):
            if b"PRIVATE KEY" in raw:
                gates.add("private_key")
            if b"private_key_id" in raw:
                gates.add("private_key_id")
            if b"accountkey=" in low or b"sharedaccesskey=" in low:
                gates.add("azure")
            if _AWS_SECRET_NAME_GATE.search(low):
                gates.add("aws_secret")
    elif b"pass" in low or b"token" in low or b"secret" in low or b"credential" in low:
        gates.add("keyword")
    if "keyword" in gates:
        if b"-" in raw:
            gates.add("flag")
        if _PASS_TOOL_GATE.search(low):
            gates.add("cli_tool")
        if b"chpasswd" in low or b"change_password" in low:
            gates.add("user_password")
        if b"passwd" in low and (b"openssl" in low or _PASSWD_PIPE_GATE.search(low)):
            gates.add("passwd")
    if _CAPITAL_A_GATE.search(raw):
        gates.add("capital_a")
    if _UNDERSCORE_TOKEN_GATE.search(raw):
        gates.add("underscore_token")
    if _DASH_TOKEN_GATE.search(raw):
        gates.add("dash_token")
    if _DOT_TOKEN_GATE.search(raw):
        gates.add("dot_token")
    if b"eyJ" in raw:
        gates.add("jwt")
    has_at = b"@" in raw
    if has_at:
        gates.add("email")
    if b"://" in raw:
        if has_at:
            gates.add("url")
        if b"hooks.slack.com" in raw:
            gates.add("slack_webhook")
    # `auth` is rare: one scan decides for the checks behind it (an `auth"` in raw lowercases to one in low).
    if b"auth" in low:
        if b"authoriz" in low:
            gates.add("authorization")
        if _DOCKER_AUTH_GATE.search(raw):
            gates.add("docker_auth")
        if _AUTH_PAIR_GATE.search(low):
            gates.add("auth_pair")
    if b"bearer" in low:
        gates.add("bearer")
    if _CLI_TOOL_GATE.search(low) or b"redis-cli" in low:
        gates.add("cli_tool")
    if b"login" in raw and b"-p" in raw:  # web pages hold both often: only the one rule behind it runs then
        gates.add("login_flag")
    if b"mongo" in low or b"sqlcmd" in low or b"mssql-cli" in low or b"ssh-keygen" in low or b"add_user" in low:
        gates.add("password_tool")
    if b"zip" in low or b"7z" in low:
        gates.add("archive_tool")
    if _NET_USER_GATE.search(low):
        gates.add("net_user")
    if _SQL_IDENTIFIED_GATE.search(low):
        gates.add("sql_identified")
    if b"password" in low and _sql_sets_password(low):
        gates.add("sql")
    if _SHORT_FLAG_GATE.search(raw):
        gates.add("short_flag")
    # The curl and netrc rules are case-sensitive: their literals must occur as written.
    if b"curl" in raw and b"-u" in raw:
        gates.add("curl")
    if "keyword" in gates and b"password" in raw and b"machine" in raw and b"login" in raw:
        gates.add("netrc")
    if _PGPASS_GATE.search(raw):
        gates.add("pgpass")
    if b"=" in raw and b"sig=" in raw:  # one memchr keeps the texts without any `=` from the slower scan
        gates.add("sas")
    if b"\n" in raw and _WRAPPED_GATE_REVERSED.search(raw[::-1]):
        gates.add("wrapped")
    if _PERCENT_BYTE in raw and _ESCAPE_GATE.search(raw):
        gates.add("percent")
    return gates


def _sql_sets_password(low: bytes) -> bool:
    """Whether a statement sets a password: ``SET PASSWORD``, or a quoted `password` value after `user`, `role`, `login`
    or `set` on its line (the rules look 200 characters back)."""
    if _SQL_SET_GATE.search(low):
        return True
    for m in _SQL_PASSWORD_GATE.finditer(low):
        start = max(low.rfind(b"\n", 0, m.start()) + 1, m.start() - 800)  # 200 characters of up to 4 bytes
        if _SQL_LEAD.search(low, start, m.start()):
            return True
    return False


@dataclass(frozen=True)
class SecretRule:
    """One way of finding a secret: a gate name and a regex with its replacer (or a whole-text function)."""

    gate: str
    pattern: re.Pattern | None
    replace: Replacer | None = None
    scan: Callable[[str, Counter], str] | None = None  # for rules that are not a single regex

    def apply(self, text: str, counts: Counter) -> str:
        if self.scan is not None:
            return self.scan(text, counts)

        def sub(m: re.Match) -> str:
            out = self.replace(m)
            if out is None:
                return m.group(0)
            counts[out[1]] += 1
            return out[0]

        return self.pattern.sub(sub, text)


def _whole(kind: str, check: Callable[[str], bool] | None = None) -> Replacer:
    """Replace the whole match (or only when `check` accepts it)."""

    def repl(m: re.Match) -> tuple[str, str] | None:
        if check is not None and not check(m.group(0)):
            return None
        return PLACEHOLDER.format(kind), kind

    return repl


def _value(group: str, kind: str | Callable[[re.Match], str], keep: Callable[[re.Match], bool] | None = None) -> Replacer:
    """Replace one named group and keep the rest of the match."""

    def repl(m: re.Match) -> tuple[str, str] | None:
        if keep is not None and keep(m):
            return None
        k = kind(m) if callable(kind) else kind
        start, end = m.span(group)
        s0 = m.start()
        text = m.group(0)
        return text[: start - s0] + PLACEHOLDER.format(k) + text[end - s0 :], k

    return repl


def _random_like(body: str) -> bool:
    """Digits plus mixed case, or a long dash-free run: how generated keys look, unlike slugs."""
    has_digit = any(c.isdigit() for c in body)
    has_upper = any(c.isupper() for c in body)
    return has_digit and (has_upper or (len(body) >= 32 and "-" not in body and "_" not in body))


def _mixed_case(body: str) -> bool:
    return any(c.isupper() for c in body) and any(c.islower() for c in body)


def _has_digit(body: str) -> bool:
    return any(c.isdigit() for c in body)


# --- values that are references, descriptions or code, not secrets --------------------------------------

_MASKED = re.compile(r"[*xX.•#_-]+|(?i:redacted|hidden|masked|none|null|nil|true|false|yes|no|undefined|required|optional)")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_PATH_STARTS = ("/", "./", "../", "~/")
_PLACEHOLDER_RE = re.compile(r"<SECRET:[a-z_]+>")


def _is_reference_or_masked(value: str, kind: str = "password") -> bool:
    """Empty, masked, or a whole reference (`stages.secret_references`) whose fallback literals are no secrets."""
    v = value.strip()
    if not v or _MASKED.fullmatch(v):
        return True
    defaults = reference_defaults(v)
    return defaults is not None and all(keep_value(d, False, kind) for d in defaults)


def _reference_covers(m: re.Match, group: str, kind: str = "password") -> bool:
    """A reference that starts the value and runs at least to its end: a value class stops at a space or a brace
    that a reference may hold (``--password=$(cat /run/secrets/pw)``, ``Bearer ${TOKEN}``)."""
    found = reference_at(m.string, m.start(group))
    return found is not None and found[0] >= m.end(group) and all(keep_value(d, False, kind) for d in found[1])


def _case_switches(word: str) -> int:
    return sum(1 for a, b in itertools.pairwise(word) if a.isalpha() and b.isalpha() and a.isupper() != b.isupper())


def _is_code_name(value: str, following: str) -> bool:
    """An unquoted name: a dotted identifier, a call/subscript, or a word of letters (``str``, ``password``)."""
    if not _IDENTIFIER.fullmatch(value):
        return False
    if "." in value or following[:1] in ("(", "["):
        return True
    if any(c.isdigit() for c in value):
        return False
    # A long letters-only run switching case all the time is a generated key, not a name.
    return not (len(value) >= 16 and _case_switches(value) * 4 >= len(value))


# A tokenizer's special tokens ([CLS], [MASK], [unused1]); the `<s>`, `<unk>`, `<|endoftext|>` shapes are references.
_SPECIAL_TOKEN = re.compile(r"\[[^\[\]\s]{1,32}\]")


def _looks_generated(value: str) -> bool:
    """How a machine-made token looks: 8+ characters without spaces, with a digit or changing case all the time
    (unlike ``Hello``, `` world`` or ``CAoQAA`` in logprobs and page cursors, or a special token). A backslash is
    an escaped character (``\\u2019s``), except JSON's optional ``\\/`` in base64."""
    value = value.replace("\\/", "/")
    if len(value) < 8 or any(c.isspace() or c == "\\" for c in value) or "://" in value or _SPECIAL_TOKEN.fullmatch(value):
        return False
    return _has_digit(value) or _case_switches(value) * 3 >= len(value)


def _is_prose_or_token_shape(value: str) -> bool:
    """Values a generic ``secret`` key holds in prose and data, never a secret: a phrase, a URL, a special token, a
    short word (``The secret: "rosebud"``); a chosen secret like ``mysecretkey`` or ``s3cr3t`` still counts."""
    if any(c.isspace() for c in value) or "://" in value or _SPECIAL_TOKEN.fullmatch(value):
        return True
    return len(value) < 8 and not _has_digit(value)


def keep_value(value: str, quoted: bool, kind: str, following: str = "", context: str | None = None) -> bool:
    """Whether an assigned value is not a secret (see the module docstring for the decisions); `context` is where
    the assignment stands (`stages.env_assignments`), None for code or no telling."""
    if "<SECRET:" in value and (rest := _PLACEHOLDER_RE.sub("", value)) != value:
        # Placeholders of earlier rules stay; what else the value holds is judged on its own, so that a forged
        # placeholder (``<SECRET:password>hunter2pw``) shields nothing.
        return not any(c.isalnum() for c in rest) or keep_value(rest.strip(), quoted, kind, following, context)
    if _is_reference_or_masked(value, kind):
        return True
    if _NUMBER.fullmatch(value):
        return kind != "password" or len(value) < 4
    if value.startswith(_PATH_STARTS):
        return True
    # A key that only says `token` names tokenizer entries, logprobs and lexer output too: its value must look made
    # by a machine, as real tokens are. A `secret` may be chosen by a person, so only phrases and short words stay.
    # An environment holds none of those.
    generic = (kind == "token" and not _looks_generated(value)) or (kind == "secret" and _is_prose_or_token_shape(value))
    if generic and context != ENVIRONMENT:
        return True
    if quoted:
        return False
    if context is not None and "." not in value and following[:1] not in ("(", "["):
        return False  # a word there is a value, not a name
    return _is_code_name(value, following)


def _context_may_matter(value: str, quoted: bool, kind: str) -> bool:
    """Whether `keep_value` may judge `value` otherwise in an environment or mapping line than in code."""
    return kind in ("token", "secret") or (not quoted and "." not in value and bool(_IDENTIFIER.fullmatch(value)))


def _kept_assignment(m: re.Match, key_start: int, key_end: int, kind: str) -> bool:
    """Whether the value of a `_SEPARATOR_VALUE` match after the key at ``key_start:key_end`` stays."""
    quoted = m.group("qv") is not None
    value = m.group("qv" if quoted else "uv")
    following = m.string[m.end() : m.end() + 1]
    if not keep_value(value, quoted, kind, following):
        return False
    if not _context_may_matter(value, quoted, kind):
        return True
    value_start = m.start("q") if quoted else m.start("uv")
    context = assignment_context(m.string, key_start, key_end, value_start, m.end(), value, quoted)
    return context is None or keep_value(value, quoted, kind, following, context)


# --- assignments: found from their key word, then the separator and value are matched ----------------------

_SECRET_NAME = re.compile(
    r"(?:client[_.-]?secret|secret[_.-]?key|secret|passwd|password|passphrase|token|api[_.-]?key|apikey"
    r"|access[_.-]?key|private[_.-]?key|auth[_.-]?key|credentials?)(?![a-z])",
    re.IGNORECASE,
)
_NOT_SECRET_SUFFIXES = (
    "_file", "_path", "_dir", "_url", "_uri", "_endpoint", "_length", "_len", "_count", "_size", "_limit",
    "_type", "_ttl", "_timeout", "_expiry", "_expires", "_expires_in", "_expires_at", "_expiration", "_name",
    "_hint", "_env", "_var", "_policy", "_prompt", "_field", "_header", "_required", "_enabled", "_min",
    "_max", "_format", "_pattern", "_regex", "_id", "_ids", "_arn", "_version", "_source", "_location",
)
# An unquoted value ends at whitespace, a quote or code punctuation, but a bracketed start (``${DB_PASSWORD}``,
# ``{Xy9z}Abc1``) is taken whole with what follows it, for `keep_value` to judge as one value.
_UNQUOTED = r"[^\s\"'`\\,;&|<>(){}\[\]]"
_SEPARATOR_VALUE = re.compile(
    r"\\*[\"']?[ \t]*(?::=|=>|[:=])(?![=>])[ \t]*"
    r"(?:(?P<q>\\*[\"'`])(?P<qv>(?:(?!(?P=q))[^\n]){1,512}?)(?P=q)|(?P<uv>" + BRACKETED_START + _UNQUOTED + r"{0,512}"
    r"|" + _UNQUOTED + r"{1,512}))"
)
# Pagination cursors (`nextPageToken`, AWS `NextToken`, `continuation_token`): opaque, never credentials.
_CURSOR_NAMES = ("pagetoken", "nexttoken", "continuationtoken", "synctoken")
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_MAX_KEY = 128


def assignment_kind(key: str) -> str:
    """The placeholder kind a key name implies (``AWS_SECRET_ACCESS_KEY`` → ``aws_secret_key``)."""
    k = key.lower()
    if "secret" in k and "aws" in k:
        return "aws_secret_key"
    if "secret" in k and ("azure" in k or k.startswith("arm_")):
        return "azure_client_secret"
    if "pass" in k:
        return "password"
    if "token" in k:
        return "token"
    if "api" in k:
        return "api_key"
    return "secret"


def _names_no_secret(key: str) -> bool:
    """A key that names something about a secret (``PASSWORD_FILE``, ``token_type``) or a pagination cursor."""
    k = key.lower().replace(".", "_").replace("-", "_")
    return k.endswith(_NOT_SECRET_SUFFIXES) or k.replace("_", "").endswith(_CURSOR_NAMES)


def _key_spans(text: str) -> list[tuple[int, int]]:
    """Spans of key-like runs (``[A-Za-z0-9_.-]``) that contain one of the keywords."""
    # One byte per character ('?' for non-ASCII), so byte offsets are character offsets; bytes scan fastest.
    folded = text.encode("ascii", "replace").lower()
    spans = set()
    n = len(text)
    for word in _KEYWORD_BYTES:
        pos = folded.find(word)
        while pos >= 0:
            start, end = pos, pos + len(word)
            while start > 0 and text[start - 1] in _KEY_CHARS and pos - start < _MAX_KEY:
                start -= 1
            while end < n and text[end] in _KEY_CHARS and end - pos < _MAX_KEY:
                end += 1
            spans.add((start, end))
            pos = folded.find(word, end)
    return sorted(spans)


def _scan_assignments(text: str, counts: Counter) -> str:
    edits: list[tuple[int, int, str]] = []
    for start, end in _key_spans(text):
        if edits and start < edits[-1][1]:
            continue  # a key-like word inside a value already replaced (``password=token=…``)
        key = text[start:end]
        if not _SECRET_NAME.search(key) or _names_no_secret(key):
            continue
        kind = assignment_kind(key)
        m = _SEPARATOR_VALUE.match(text, end)
        if m is None:
            legacy = dockerfile_env_value(text, start, end)  # `ENV NAME value`
            if legacy is not None and not keep_value(text[legacy[0] : legacy[1]], legacy[2], kind, "", ENVIRONMENT):
                edits.append((legacy[0], legacy[1], kind))
            continue
        if not _kept_assignment(m, start, end, kind):
            edits.append((*m.span("qv" if m.group("qv") is not None else "uv"), kind))
    for vs, ve, kind in reversed(edits):
        text = text[:vs] + PLACEHOLDER.format(kind) + text[ve:]
        counts[kind] += 1
    return text


_WRAPPED = re.compile(
    r"(?<![A-Za-z0-9_-])(?P<head>" + _WRAP_HEAD + r"[A-Za-z0-9_.\-]{0,512})(?P<brk>\r?\n)(?P<tail>[A-Za-z0-9_.\-]{1,512})"
)


_WRAP_MIN_WIDTH = 40  # narrower lines are not a terminal's width: a token ending one is whole


def _scan_wrapped(text: str, counts: Counter) -> str:
    """A provider token broken over two lines (a terminal wraps at its width) is redacted as one token, the line
    break moved after the placeholder: when the first part alone is no token, or when it is one (a variable-length
    token cut short) that runs to the end of a line at least `_WRAP_MIN_WIDTH` wide and the next line starts with
    a generated-looking run (digits and capitals, or case switching all the time: ``x9Qz…``, not a word like
    ``commit`` or ``AKIAshort``) that ends as a token does (not in ``sha256:`` or ``key=``)."""

    def sub(m: re.Match) -> str:
        head, tail = m.group("head"), m.group("tail")
        head_out, head_found = redact_text(head)
        if head_found:
            width = m.end("head") - (text.rfind("\n", 0, m.start("head")) + 1)
            ends_as_token = text[m.end() : m.end() + 1] not in tuple(":=/(@[{<")
            switching = len(tail) >= 8 and _case_switches(tail) * 3 >= len(tail)
            generated = ends_as_token and len(tail) >= 4 and (_random_like(tail) or switching)
            if width < _WRAP_MIN_WIDTH or not head_out.endswith(">") or not generated:
                return m.group(0)  # whole on its line: the token rules take it
        joined, found = redact_text(head + tail)
        if not found or joined == head_out + tail:
            return m.group(0)
        counts.update(found)
        return joined + m.group("brk")

    return _WRAPPED.sub(sub, text)


_USER_PASSWORD = re.compile(rb"[\x21-\x7e]{1,256}:[\x20-\x7e]{1,512}")


def _docker_auth(value: str) -> bool:
    """A Docker ``config.json`` ``auth`` value is base64 of printable ``user:password``."""
    try:
        return _USER_PASSWORD.fullmatch(base64.b64decode(value, validate=True)) is not None
    except (binascii.Error, ValueError):
        return False


def _flag_kind(m: re.Match) -> str:
    return assignment_kind(m.group("flag"))


def _keep_flag(m: re.Match) -> bool:
    kind = _flag_kind(m)
    return (_names_no_secret(m.group("flag")) or keep_value(m.group("v"), bool(m.group("q")), kind)
            or _reference_covers(m, "v", kind))


def _keep_plain(group: str) -> Callable[[re.Match], bool]:
    return lambda m: keep_value(m.group(group), True, "password") or _reference_covers(m, group)


_LOGIN_TOOL_BEFORE = re.compile(
    r"(?<![\w-])(?:docker|podman|nerdctl|buildah|skopeo|crane|finch|az|oc|cf|(?:helm|oras)(?:[ \t]+registry)?)[ \t]+\Z"
)


def _keep_login(m: re.Match) -> bool:
    """A `login … -p VALUE` stays unless a registry or cloud login tool names it (``docker login``) or VALUE is none."""
    start = m.start()
    return _LOGIN_TOOL_BEFORE.search(m.string, max(0, start - 64), start) is None or _keep_plain("v")(m)


def _keep_auth(m: re.Match) -> bool:
    v = m.group("v")
    return len(v) < 4 or _is_reference_or_masked(v, "token") or _reference_covers(m, "v", "token")


def _aws_access_key(m: re.Match) -> tuple[str, str] | None:
    """An access key glued to a lowercase letter or a digit (``xAKIA…``) is one, unless base64 goes on after it: the
    rule's lookbehinds already refuse a key inside a longer run of capitals and digits."""
    glued = m.string[m.start() - 1 : m.start()].isalnum()
    if glued and m.string[m.end() : m.end() + 1] in ("+", "/", "="):
        return None
    return PLACEHOLDER.format("aws_access_key"), "aws_access_key"


# An AWS secret access key is 40 characters of base64: only its context tells it from other base64.
_AWS_SECRET = r"(?<![A-Za-z0-9/+=])(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
_AWS_SECRET_RUN = re.compile(_AWS_SECRET)
_AWS_KEY_ID_HOLDER = re.compile(re.escape(PLACEHOLDER.format("aws_access_key")))
_AWS_PAIR_REACH = 200  # characters between a key id and its secret: a prompt line, a CSV row, a sentence


def _aws_secret_like(run: str) -> bool:
    """Mixed case with a digit, ``/`` or ``+``: a generated key, unlike a hex digest or a word run."""
    return _mixed_case(run) and any(c.isdigit() or c in "/+" for c in run)


def _scan_aws_secret_near_key_id(text: str, counts: Counter) -> str:
    """A secret access key printed near its key id (``aws configure`` prompts, a credentials CSV, ``key AKIA… /
    wJalr…`` in prose): a generated-looking 40-character run at most `_AWS_PAIR_REACH` characters before or after a
    redacted key id, in the same field (never across a NUL: fields and decoded runs are joined with one)."""
    ids = [m.span() for m in _AWS_KEY_ID_HOLDER.finditer(text)]
    if not ids:
        return text
    starts = [start for start, _ in ids]
    edits = []
    for m in _AWS_SECRET_RUN.finditer(text):
        if not _aws_secret_like(m.group("v")):
            continue
        # the nearest key id before the run and the nearest after it: a farther one is farther on the same side
        after = bisect.bisect_left(starts, m.end())
        for id_start, id_end in ids[max(0, after - 1) : after + 1]:
            between = text[min(id_end, m.end()) : max(id_start, m.start())]
            if len(between) <= _AWS_PAIR_REACH and "\x00" not in between:
                edits.append(m.span())
                break
    for start, end in reversed(edits):
        text = text[:start] + PLACEHOLDER.format("aws_secret_key") + text[end:]
        counts["aws_secret_key"] += 1
    return text


def _openai_key(m: re.Match) -> tuple[str, str] | None:
    """An OpenAI key's body looks generated. One glued to an id by ``-`` or ``_`` (``task-7-sk-proj-…``) needs more,
    as words end in ``sk`` there too (``task-list``, ``disk_…``): a project or account scope, or ``T3BlbkFJ``, the
    base64 of "OpenAI" that legacy keys carry in their middle."""
    body = m.group("body")
    if not _random_like(body):
        return None
    if m.string[m.start() - 1 : m.start()] in ("-", "_") and not (m.group("scope") or "T3BlbkFJ" in body):
        return None
    return PLACEHOLDER.format("openai_key"), "openai_key"


def _github_token(m: re.Match) -> tuple[str, str] | None:
    """A GitHub token; one glued to the word before it (``weighs_`` + a git SHA holds ``ghs_``) only where its body
    mixes cases, as generated tokens do."""
    glued = m.string[m.start() - 1 : m.start()]
    if (glued.isalnum() or glued == "_") and not _mixed_case(m.group(0)[4:]):
        return None
    return PLACEHOLDER.format("github_token"), "github_token"


def _auth_kind(m: re.Match) -> str:
    scheme = (m.group("scheme") or "").lower()
    return "basic_auth" if scheme == "basic" else "bearer_token"


# --- passwords that command lines take without a `--password` flag ----------------------------------------------

# `echo PW |` or `printf '%s\n' PW |` before a command that reads its password from standard input
_ECHOED = (r"(?<![\w-])(?:echo|printf)[ \t]+(?:-[neE]+[ \t]+)?(?:(?P<fq>['\"])%s(?:\\n)?(?P=fq)[ \t]+)?"
           r"(?P<q>['\"]?)(?P<v>[^\s'\"|;&<>\\]+)(?:\\n)?(?P=q)[ \t]*\|[ \t]*")
# sudo reading its password from stdin (`-S`, after options that may take a value)
_SUDO_STDIN = r"sudo(?:[ \t]+(?:-[A-Za-z]*[ugpCh][ \t]+\S+|-[A-Za-z]+))*?[ \t]+(?:-S|--stdin)(?![\w-])"
_FLAG_VALUE = r"(?P<q>['\"]?)(?P<v>[^\s'\"-][^\s'\"]*)(?P=q)"


def _assigned(kind: str) -> Replacer:
    """Replace the value of a `_SEPARATOR_VALUE` match, unless `keep_value` keeps it."""

    def repl(m: re.Match) -> tuple[str, str] | None:
        if _kept_assignment(m, *m.span("key"), kind):
            return None
        return _value("qv" if m.group("qv") is not None else "uv", kind)(m)

    return repl


_HTPASSWD_ARG = re.compile(r"[ \t]+(?P<q>['\"]?)(?P<v>[^\s'\"]+)(?P=q)")


def _htpasswd(m: re.Match) -> tuple[str, str] | None:
    """``htpasswd -b [-c…] FILE USER PASS``, or ``htpasswd -nb USER PASS`` (no file: the entry is printed)."""
    flags = re.sub(r"-C[ \t]*\d+", "", m.group("opts"))
    if "b" not in flags:
        return None
    args = list(_HTPASSWD_ARG.finditer(m.group("args")))
    index = 1 if "n" in flags else 2
    if len(args) <= index or keep_value(args[index].group("v"), True, "password"):
        return None
    offset = m.start("args") - m.start()
    start, end = (offset + i for i in args[index].span("v"))
    text = m.group(0)
    return text[:start] + PLACEHOLDER.format("password") + text[end:], "password"


# --- percent-encoded runs: the rules read them decoded, a placeholder takes the encoded span of its secret ----------

_ESCAPE_RE = re.compile(_ESCAPE)
_ESCAPE_SPLIT = re.compile(f"({_ESCAPE})")
_DECODE = {f"%{i:02{case}}": chr(i) for i in range(128) for case in "xX"}
_RUN_END = re.compile(r"[ \t\n\r\f\v]")
# Decoded runs are redacted as one text, each after this separator: no pattern crosses its newline and NUL, a run after
# it starts no line (the `.pgpass` rule reads whole lines) and follows whitespace, as in the text. No decoded run holds
# the separator: a form feed ends a run, and its escape is not decoded.
_RUN_SEPARATOR = "\n\x00\f"


def _encoded_runs(text: str) -> list[tuple[int, int]]:
    """Spans of the runs of `text` between ASCII whitespace that hold an escape."""
    runs = []
    end = 0
    while (m := _ESCAPE_RE.search(text, end)) is not None:
        start = max(end, *(text.rfind(c, end, m.start()) + 1 for c in " \t\n\r\f\v"))
        space = _RUN_END.search(text, m.end())
        end = space.start() if space else len(text)
        runs.append((start, end))
    return runs


def _decoded(run: str) -> str:
    parts = _ESCAPE_SPLIT.split(run)  # text, escape, text, …, text
    parts[1::2] = [_DECODE[escape] for escape in parts[1::2]]
    return "".join(parts)


def _placeholder_spans(before: str, after: str) -> list[tuple[int, int, str]] | None:
    """The (start, end, placeholder) spans of `before` that its redaction `after` replaced, or None where more than one
    split of `before` fits (the text between two placeholders occurs inside a secret too, or there is none)."""
    head, *between, tail = _PLACEHOLDER_RE.split(after)
    low, high = len(head), len(before) - len(tail)
    if not (before.startswith(head) and before.endswith(tail)) or high <= low:
        return None
    # Each text between two placeholders at its earliest and at its latest place (a secret is never empty): the split
    # is certain where the two agree.
    earliest, pos = [], low
    for text in between:
        pos = before.find(text, pos + 1, high - 1)
        if pos < 0:
            return None
        earliest.append(pos)
        pos += len(text)
    latest, pos = [], high
    for text in reversed(between):
        pos = before.rfind(text, low + 1, pos - 1)
        if pos < 0:
            return None
        latest.append(pos)
    if earliest != latest[::-1]:
        return None
    starts = [low, *(at + len(text) for at, text in zip(earliest, between, strict=True))]
    ends = [*earliest, high]
    return list(zip(starts, ends, _PLACEHOLDER_RE.findall(after), strict=True))


def _reencoded(run: str, view: str, redacted: str) -> str:
    """`run` with each placeholder of `redacted` (its decoded `view`, redacted) over the encoded span of its secret;
    the whole run decoded and redacted where the spans are not certain."""
    spans = _placeholder_spans(view, redacted)
    if spans is None:
        return redacted
    # where each escape sits in `view`: one character there for three in `run`
    at = [m.start() - 2 * k for k, m in enumerate(_ESCAPE_RE.finditer(run))]
    out, pos = [], 0
    for start, end, holder in spans:
        out += [run[pos : start + 2 * bisect.bisect_left(at, start)], holder]
        pos = end + 2 * bisect.bisect_left(at, end)
    return "".join(out) + run[pos:]


def _scan_percent_encoded(text: str, counts: Counter) -> str:
    """Secrets that only a decoded view shows; the runs are decoded and redacted together, as one text."""
    runs = _encoded_runs(text)
    if not runs:
        return text
    views = [_decoded(text[start:end]) for start, end in runs]
    joined, found = redact_text("".join(_RUN_SEPARATOR + view for view in views))
    if not found:
        return text
    counts.update(found)
    out, pos = [], 0
    for (start, end), view, part in zip(runs, views, joined.split(_RUN_SEPARATOR)[1:], strict=True):
        if part != view:
            out += [text[pos:start], _reencoded(text[start:end], view, part)]
            pos = end
    return "".join(out) + text[pos:]


# A variable given as a name and a value (Kubernetes and Compose `env:` lists, ECS task definitions, GitHub's API):
# ``- name: DB_PASSWORD`` then ``value: hunter2`` on the next line, or ``{"name": "DB_PASSWORD", "value": "hunter2"}``.
_ENV_PAIR = re.compile(
    r"name(?<![\w-]name)\\*[\"']?[ \t]*:[ \t]*\\*(?P<nq>[\"']?)(?P<key>[A-Za-z_][A-Za-z0-9_.\-]{0,127})\\*(?P=nq)"
    r"(?:[ \t]*,[ \t]*|[ \t]*\r?\n[ \t]*)\\*[\"']?value\\*[\"']?[ \t]*:[ \t]*"
    r"(?:(?P<q>\\*[\"'])(?P<qv>(?:(?!(?P=q))[^\n]){1,512}?)(?P=q)|(?P<uv>" + BRACKETED_START + _UNQUOTED + r"{0,512}|" + _UNQUOTED + r"{1,512}))"
)


def _env_pair(m: re.Match) -> tuple[str, str] | None:
    key = m.group("key")
    if not _SECRET_NAME.search(key) or _names_no_secret(key):
        return None
    kind = assignment_kind(key)
    group = "qv" if m.group("qv") is not None else "uv"
    if keep_value(m.group(group), True, kind):  # a value, never a name in code, even unquoted
        return None
    return _value(group, kind)(m)


# HTTP basic auth given in code as a (user, password) pair of literals: requests' ``auth=('admin', 'pw')``,
# ``HTTPBasicAuth('admin', 'pw')``, aiohttp's ``BasicAuth('admin', 'pw')``. A pair of names is code and stays.
_AUTH_PAIR = re.compile(
    r"(?:(?<![\w-])auth[ \t]*=[ \t]*[(\[]|(?:Basic|Digest|Proxy)Auth\()[ \t]*(?P<uq>['\"])[^'\"\n]{0,256}(?P=uq)"
    r"[ \t]*,[ \t]*(?P<q>['\"])(?P<v>[^'\"\n]{1,512})(?P=q)"
)


_SSH_KEYGEN_FLAG = re.compile(r"-[NP](?<=[ \t]-[NP])[ \t]*" + _FLAG_VALUE)  # found from the flag, judged by the line
_SSH_KEYGEN_BEFORE = re.compile(r"(?<![\w-])ssh-keygen\b[^\n|;&]*\Z")


def _keep_ssh_keygen(m: re.Match) -> bool:
    """A ``-N``/``-P`` value stays unless ``ssh-keygen`` starts its command (at most 1,024 characters before it)."""
    start = m.start()
    return _SSH_KEYGEN_BEFORE.search(m.string, max(0, start - 1024), start) is None or _keep_plain("v")(m)


def _both_copies(m: re.Match) -> tuple[str, str] | None:
    """The password and its repetition (``'PW\\nPW'``) both replaced; counted once."""
    if _keep_plain("v")(m):
        return None
    placeholder = PLACEHOLDER.format("password")
    start, end = m.start("v") - m.start(), m.end("v") - m.start() + 2 + len(m.group("v"))  # `PW\nPW`
    text = m.group(0)
    return text[:start] + placeholder + "\\n" + placeholder + text[end:], "password"


# Tools that take a password on their command line, each only after its tool's name.
_KEYTOOL_FLAGS = [f"{side}{store}pass" for side in ("", "src", "dest", "new") for store in ("store", "key")]
_PASSWORD_TOOL_RULES = [
    SecretRule("password_tool", re.compile(head + r"\b[^\n|;&]{0,1024}?[ \t]" + flag + _FLAG_VALUE),
               _value("v", "password", _keep_plain("v")))
    for head, flag in (
        (r"mongo(?<![\w-]mongo)(?:sh|dump|restore|import|export|stat|top|files)?", r"-p[ \t]+"),  # MongoDB's tools
        (r"sqlcmd(?<![\w-]sqlcmd)", r"-P[ \t]*"),  # SQL Server's shell
        (r"mssql-cli(?<![\w-]mssql-cli)", r"-P[ \t]*"),
    )
] + [
    SecretRule("archive_tool", re.compile(head + r"\b[^\n|;&]{0,1024}?[ \t]" + flag + _FLAG_VALUE),
               _value("v", "password", _keep_plain("v")))
    for head, flag in (
        (r"zip(?<![\w-]zip)", r"-P[ \t]+"),  # zip's and unzip's password
        (r"unzip(?<![\w-]unzip)", r"-P[ \t]+"),
        (r"7za?(?<![\w-]7z)(?<![\w-]7za)", r"-p"),  # 7-Zip: the password glued to its flag
    )
] + [
    SecretRule("net_user",  # Windows: `net user NAME PW [/add]`; `*` asks for it
               re.compile(r"(?<![\w-])[Nn][Ee][Tt][ \t]+[Uu][Ss][Ee][Rr][ \t]+(?:\"[^\"\n]+\"|[^\s/\"]+)[ \t]+"
                          r"(?P<q>['\"]?)(?P<v>[^\s/*'\"&|;<>][^\s'\"&|;<>]*)(?P=q)"),
               _value("v", "password", _keep_plain("v"))),
    SecretRule("password_tool",  # ssh-keygen's new and old passphrase (`-N PW`, `-P PW`), each flag of the command
               _SSH_KEYGEN_FLAG, _value("v", "password", _keep_ssh_keygen)),
    SecretRule("password_tool",  # `rabbitmqctl add_user NAME PW`
               re.compile(r"rabbitmqctl(?<![\w-]rabbitmqctl)[ \t]+add_user[ \t]+\S+[ \t]+" + _FLAG_VALUE),
               _value("v", "password", _keep_plain("v"))),
] + [
    SecretRule("user_password",  # `rabbitmqctl change_password NAME PW`
               re.compile(r"rabbitmqctl(?<![\w-]rabbitmqctl)[ \t]+change_password[ \t]+\S+[ \t]+" + _FLAG_VALUE),
               _value("v", "password", _keep_plain("v"))),
    SecretRule("user_password",  # `echo 'user:PW' | chpasswd`
               re.compile(r"(?<![\w-])(?:echo|printf)[ \t]+(?P<q>['\"]?)[^\s:'\"|;&]+:(?P<v>[^\s'\"|;&]+)(?P=q)[ \t]*\|"
                          r"[ \t]*(?:sudo[ \t]+)?chpasswd\b"),
               _value("v", "password", _keep_plain("v"))),
    SecretRule("passwd",  # `echo -e 'PW\nPW' | passwd user`: both copies
               re.compile(r"(?<![\w-])(?:echo|printf)[ \t]+(?:-[neE]+[ \t]+)?(?P<q>['\"])(?P<v>[^\s'\"\\]+)\\n(?P=v)(?:\\n)?(?P=q)"
                          r"[ \t]*\|[ \t]*(?:sudo[ \t]+)?passwd\b"),
               _both_copies),
    SecretRule("passwd",  # `openssl passwd -6 -salt S PW`: the hash of a password given on the command line
               re.compile(r"openssl(?<![\w-]openssl)[ \t]+passwd(?:[ \t]+-(?:salt[ \t]+\S+|[A-Za-z0-9]+))*[ \t]+"
                          r"(?P<q>['\"]?)(?P<v>[^\s'\"<>|;&()-][^\s'\"<>|;&()]*)(?P=q)"),
               _value("v", "password", _keep_plain("v"))),
    SecretRule("flag",  # Java's keytool and jarsigner: `-storepass PW`, `-keypass PW` (`-storepass:env VAR` names where)
               re.compile(r"pass(?:" + "|".join(rf"(?<=[ \t]-{flag})" for flag in _KEYTOOL_FLAGS) + r")[ \t]+" + _FLAG_VALUE),
               _value("v", "password", _keep_plain("v"))),
]
# SQL that sets a password: MySQL `IDENTIFIED [WITH plugin] BY 'PW'`, PostgreSQL `ALTER USER … [WITH] [ENCRYPTED]
# PASSWORD 'PW'`, SQL Server `CREATE LOGIN … WITH PASSWORD = 'PW'`, MySQL `SET PASSWORD … = [PASSWORD(]'PW'`.
_SQL_VALUE = r"(?P<q>['\"])(?P<v>(?:(?!(?P=q))[^\n]){1,512})(?P=q)"
_SQL_PASSWORD_RULES = [
    SecretRule("sql_identified", re.compile(r"\bIDENTIFIED[ \t]+(?:WITH[ \t]+\w+[ \t]+)?(?:BY|AS)[ \t]+(?:PASSWORD[ \t]+)?" + _SQL_VALUE,
                                 re.IGNORECASE | re.ASCII), _value("v", "password", _keep_plain("v"))),
    SecretRule("sql", re.compile(r"\b(?:USER|ROLE|LOGIN)\b[^\n;]{0,200}?\bPASSWORD(?:[ \t]+|[ \t]*=[ \t]*)" + _SQL_VALUE, re.IGNORECASE | re.ASCII),
               _value("v", "password", _keep_plain("v"))),
    SecretRule("sql", re.compile(r"\bSET[ \t]+PASSWORD\b[^\n;=]{0,256}=[ \t]*(?:PASSWORD[ \t]*\([ \t]*)?" + _SQL_VALUE,
                                 re.IGNORECASE | re.ASCII), _value("v", "password", _keep_plain("v"))),
]


# --- the rules, in order: specific formats first, so generic rules see their placeholders -----------------------

_B64 = r"[A-Za-z0-9+/]"
_RULES: list[SecretRule] = [
    SecretRule("wrapped", None, scan=_scan_wrapped),
    SecretRule(
        "private_key",
        re.compile(
            r"-----BEGIN[ A-Z0-9]{0,20}PRIVATE KEY(?: BLOCK)?-----"
            r"(?:[^\x00]{0,65536}?-----END[ A-Z0-9]{0,20}PRIVATE KEY(?: BLOCK)?-----"
            r"|(?:(?:\s|\\[nr])+(?:" + _B64 + r"{16,}={0,2}|Proc-Type:[^\n\\]*|DEK-Info:[^\n\\]*|Comment:[^\n\\]*))*)"
        ),
        _whole("private_key"),
    ),
    SecretRule(
        "private_key_id",
        re.compile(r"\"private_key_id\\*\"[ \t]*:[ \t]*\\*\"(?P<v>[0-9a-fA-F]{16,64})"),
        _value("v", "gcp_private_key_id"),
    ),
    SecretRule("capital_a", re.compile(r"A(?<![A-Z]A)(?<![A-Z0-9][0-9]A)(?:KIA|SIA|BIA|CCA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
               _aws_access_key),
    SecretRule("capital_a", None, scan=_scan_aws_secret_near_key_id),
    SecretRule(
        "aws_secret",  # `aws configure` asks for it: `AWS Secret Access Key [None]: …` or `[****************EKEY]: …`
        re.compile(r"Secret Access Key(?:[ \t]*\[[^\]\n]{0,64}\])?[ \t]*:[ \t]*" + _AWS_SECRET),
        _value("v", "aws_secret_key"),
    ),
    SecretRule(
        "aws_secret",
        re.compile(r"configure(?<![\w-]configure)[ \t]+set[ \t]+(?:[\w-]+\.)*aws_secret_access_key[ \t]+(?P<q>['\"]?)(?P<v>[^\s'\"]+)(?P=q)"),
        _value("v", "aws_secret_key", _keep_plain("v")),
    ),
    SecretRule("capital_a", re.compile(r"AIza(?<![A-Za-z0-9_-]AIza)[0-9A-Za-z_\-]{35}(?![A-Za-z0-9_-])"), _whole("gcp_api_key")),
    SecretRule(
        # a bot id, then 35 characters starting with AA (34 in Telegram's own example); in the API's URLs after `/bot`
        "capital_a",
        re.compile(r"(?:(?<=/bot)|(?<![A-Za-z0-9_]))(?P<v>[0-9]{8,10}:AA(?P<body>[A-Za-z0-9_\-]{32,33}))(?![A-Za-z0-9_\-])"),
        _value("v", "telegram_bot_token", lambda m: not _mixed_case(m.group("body"))),
    ),
    SecretRule("azure", re.compile(r"(?P<k>AccountKey|SharedAccessKey)=(?P<v>" + _B64 + r"{20,}={0,2})", re.IGNORECASE),
               _value("v", "azure_storage_key")),
    SecretRule(
        "sas",  # the signature of an Azure shared access signature (`?sv=…&sig=…`): whoever holds the URL has the access
        re.compile(r"(?<![A-Za-z0-9_])sig=(?P<v>(?:[A-Za-z0-9+/_\-]|%[0-9A-Fa-f]{2}){20,}={0,2})(?![A-Za-z0-9+/_\-=%])"),
        _value("v", "azure_sas_signature", lambda m: not _random_like(unquote(m.group("v")))),
    ),
    SecretRule("underscore_token", re.compile(r"gh[pousr]_[A-Za-z0-9]{36,251}(?![A-Za-z0-9_])"), _github_token),
    SecretRule("underscore_token", re.compile(r"github_pat_(?<![A-Za-z0-9_]github_pat_)[A-Za-z0-9_]{22,244}"),
               _whole("github_token")),
    SecretRule("dash_token", re.compile(r"gl(?:pat|dt|rt|ptt)-[A-Za-z0-9_\-]{20,}"),
               _whole("gitlab_token")),
    SecretRule(
        "slack_webhook",
        re.compile(r"(?P<pre>https://hooks\.slack\.com/(?:services|workflows|triggers)/)(?P<v>[A-Za-z0-9/_\-]{8,})"),
        _value("v", "slack_webhook"),
    ),
    SecretRule("dash_token", re.compile(r"x(?<![A-Za-z0-9_-]x)(?:ox[abposer]-|app-\d-)[A-Za-z0-9\-]{20,}"),
               _whole("slack_token")),
    SecretRule("dash_token", re.compile(r"sk-ant-(?<![A-Za-z0-9]sk-ant-)[A-Za-z0-9_\-]{20,}"), _whole("anthropic_key")),
    SecretRule(
        "dash_token",
        re.compile(r"sk-(?<![A-Za-z0-9]sk-)(?P<scope>(?:proj|svcacct|admin|None)-)?(?P<body>[A-Za-z0-9_\-]{20,})(?![A-Za-z0-9_-])"),
        _openai_key,
    ),
    SecretRule("underscore_token", re.compile(r"hf_(?<!_hf_)[A-Za-z0-9]{30,}(?![A-Za-z0-9_])"),  # `from_hf_…`: a name
               _whole("huggingface_token", lambda s: _mixed_case(s[3:]))),
    *(
        SecretRule("underscore_token", re.compile(prefix + r"(?<![A-Za-z0-9_]" + prefix + r")(?:live|test)_[A-Za-z0-9]{16,}"),
                   _whole("stripe_key"))
        for prefix in ("sk_", "rk_")
    ),
    SecretRule("underscore_token", re.compile(r"whsec_(?<![A-Za-z0-9_]whsec_)[A-Za-z0-9]{24,}"), _whole("stripe_key")),
    SecretRule("underscore_token", re.compile(r"npm_(?<![A-Za-z0-9_]npm_)[A-Za-z0-9]{36}(?![A-Za-z0-9_])"),
               _whole("npm_token", lambda s: _has_digit(s[4:]))),
    SecretRule("dash_token", re.compile(r"pypi-Ag[A-Za-z0-9_\-]{50,}"), _whole("pypi_token")),
    SecretRule("underscore_token", re.compile(r"do[por]_v1_(?<![A-Za-z0-9_]do[por]_v1_)[a-f0-9]{64,}(?![A-Za-z0-9_])"),
               _whole("digitalocean_token")),
    SecretRule("dot_token", re.compile(r"SG\.(?<![A-Za-z0-9_.\-]SG\.)[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}(?![A-Za-z0-9_\-])"),
               _whole("sendgrid_key")),
    SecretRule("dot_token", re.compile(r"ya29\.(?<![A-Za-z0-9_.\-]ya29\.)[A-Za-z0-9_\-]{20,}"),  # an OAuth access token
               _whole("google_oauth_token", lambda s: _random_like(s[5:]))),
    # more services' keys, each a prefix and a body of a fixed kind with a digit in it
    SecretRule("underscore_token", re.compile(r"gsk_(?<![A-Za-z0-9_]gsk_)[A-Za-z0-9]{52}(?![A-Za-z0-9_])"),
               _whole("groq_key", lambda s: _has_digit(s[4:]))),
    SecretRule("underscore_token", re.compile(r"r8_(?<![A-Za-z0-9_]r8_)[A-Za-z0-9]{37}(?![A-Za-z0-9_])"),
               _whole("replicate_token", lambda s: _has_digit(s[3:]))),
    SecretRule("dash_token", re.compile(r"xai-(?<![A-Za-z0-9_-]xai-)[A-Za-z0-9]{60,100}(?![A-Za-z0-9_-])"),
               _whole("xai_key", lambda s: _has_digit(s[4:]))),
    SecretRule("dash_token", re.compile(r"pplx-(?<![A-Za-z0-9_-]pplx-)[A-Za-z0-9]{40,64}(?![A-Za-z0-9_-])"),
               _whole("perplexity_key", lambda s: _has_digit(s[5:]))),
    SecretRule("dot_token", re.compile(r"hv[sbr]\.(?<![A-Za-z0-9_.\-]hv[sbr]\.)[A-Za-z0-9_\-]{90,}"),  # HashiCorp Vault
               _whole("vault_token", lambda s: _has_digit(s[4:]))),
    SecretRule("dash_token", re.compile(r"AGE-SECRET-KEY-1[02-9AC-HJ-NP-Z]{58}(?![A-Za-z0-9])"),  # as age prints it
               _whole("age_secret_key")),
    SecretRule("jwt", re.compile(r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"),
               _whole("jwt")),
    SecretRule(
        "url",
        # any scheme (`postgresql+psycopg2`, `s3`); the password runs to the authority's last `@`, which may follow a raw `@`
        re.compile(r"://(?<=[A-Za-z0-9+.-]://)(?P<user>[^\s:/@'\"<>]{0,256}):(?P<v>[^\s/'\"<>]{1,256})@"),
        _value("v", "url_password", lambda m: _is_reference_or_masked(m.group("v"))),
    ),
    SecretRule(
        "authorization",
        re.compile(
            r"(?P<pre>authorization\\*[\"']?[ \t]*[:=][ \t]*\\*[\"']?[ \t]*"
            # a `{…}` in the value is taken whole (``${TOKEN}``, ``{Xy9z}Abc1``); short values stay (`_keep_auth`)
            r"(?:(?P<scheme>bearer|basic|token|digest|apikey)[ \t]+)?)"
            r"(?P<v>(?:[^\s\"'\\,;{}`]|\$?\{\{[^{}\n]{0,256}\}\}|\{[^\s\"'\\,;{}`]{0,256}\}){1,1024})",
            re.IGNORECASE,
        ),
        _value("v", _auth_kind, _keep_auth),
    ),
    SecretRule(
        "bearer",
        re.compile(r"(?P<pre>\bbearer[ \t]+)(?P<v>[A-Za-z0-9._~+/\-]{20,}=*)", re.IGNORECASE),
        _value("v", "bearer_token", lambda m: not _has_digit(m.group("v"))),
    ),
    SecretRule(
        "flag",
        re.compile(
            r"-(?<![\w-]-)(?P<flag>-?(?:[A-Za-z0-9]+[-_])*(?:password|passwd|passphrase|pass|token|secret|api-?key|apikey"
            r"|access-?key|secret-?key|client-?secret|credentials?))(?:=|[ \t]+)(?!-)(?P<q>[\"']?)(?P<v>[^\s\"']+)(?P=q)"
        ),
        _value("v", _flag_kind, _keep_flag),
    ),
    SecretRule(
        "cli_tool",
        re.compile(
            r"(?<![\w-])(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlsh|mariadb|mariadb-dump)\b[^\n|;&]{0,1024}?[ \t]-p"
            r"(?P<q>['\"]?)(?P<v>[^\s'\"-][^\s'\"]*)(?P=q)"
        ),
        _value("v", "password", _keep_plain("v")),
    ),
    SecretRule(
        "cli_tool",
        re.compile(r"(?<![\w-])(?:sshpass\b[^\n|;&]{0,1024}?[ \t]-p[ \t]*|redis-cli\b[^\n|;&]{0,1024}?[ \t]-a[ \t]+)"
                   r"(?P<q>['\"]?)(?P<v>[^\s'\"-][^\s'\"]*)(?P=q)"),
        _value("v", "password", _keep_plain("v")),
    ),
    SecretRule("cli_tool", re.compile(r"(?<![A-Za-z0-9_])(?P<key>MYSQL_PWD)" + _SEPARATOR_VALUE.pattern), _assigned("password")),
    SecretRule(
        "cli_tool",
        re.compile(r"(?<![\w-])htpasswd(?P<opts>(?:[ \t]+-(?:C[ \t]*\d+|[A-Za-z]+))+)(?P<args>(?:[ \t]+['\"]?[^\s'\"|;&<>]+['\"]?){2,3})"),
        _htpasswd,
    ),
    SecretRule(
        "cli_tool",  # `echo PW | docker login -u me --password-stdin` (podman, helm registry, …), `… | passwd --stdin`
        re.compile(_ECHOED + r"(?:sudo[ \t]+)?(?:[\w.-]+(?:[ \t]+registry)?[ \t]+login\b[^\n|;&]{0,1024}?[ \t]--password-stdin"
                   r"|passwd[ \t]+--stdin)(?![\w-])"),
        _value("v", "password", _keep_plain("v")),
    ),
    SecretRule(
        "login_flag",  # `docker login -u me -p PW registry` (podman, nerdctl, buildah, skopeo, helm registry, oras, az, oc, cf …)
        # found from `login` (a literal first: one fast scan), the tool before it checked by `_keep_login`; the options
        # never run over another `login`, so one that follows no tool cannot hide the next
        re.compile(r"login\b(?:(?!login)[^\n|;&]){0,1024}?[ \t]-p(?:[ \t]+|=)?" + _FLAG_VALUE),
        _value("v", "password", _keep_login),
    ),
    SecretRule("cli_tool",  # openssl's pass phrase arguments; `env:VAR` and `file:PATH` name where it is
               re.compile(r"(?<![\w-])-pass(?:in|out)[ \t]+(?P<q>['\"]?)pass:(?P<r>['\"]?)(?P<v>[^\s'\"]+)(?P=r)(?P=q)"),
               _value("v", "password", _keep_plain("v"))),
    SecretRule("short_flag", re.compile(_ECHOED + _SUDO_STDIN), _value("v", "password", _keep_plain("v"))),
    SecretRule("short_flag", re.compile(r"(?<![\w-])" + _SUDO_STDIN + r"[^\n|;&<]*<<<[ \t]*(?P<q>['\"]?)(?P<v>[^\s'\"]+)(?P=q)"),
               _value("v", "password", _keep_plain("v"))),
    SecretRule(
        "short_flag",
        re.compile(r"ldap(?<![\w-]ldap)(?:search|add|modify|delete|whoami|passwd|compare|modrdn|exop)\b[^\n|;&]{0,1024}?[ \t]-w[ \t]+"
                   + _FLAG_VALUE),
        _value("v", "password", _keep_plain("v")),
    ),
    SecretRule(
        "short_flag",
        re.compile(r"(?<![\w-])(?:smb|rpc)client\b[^\n|;&]{0,1024}?[ \t](?:-U(?=[ \t'\"])[ \t]*|--user=)(?P<q>['\"]?)[^\s%'\"]+%(?P<v>[^\s'\"]+)(?P=q)"),
        _value("v", "password", _keep_plain("v")),
    ),
    SecretRule("short_flag", re.compile(r"openssl(?<![\w-]openssl)\b[^\n|;&]{0,1024}?[ \t]-k[ \t]+" + _FLAG_VALUE),
               _value("v", "password", _keep_plain("v"))),
    SecretRule(
        "curl",  # `-u user:PW`, `-u 'user:PW'`, or only the password quoted: `-u admin:'pa$$ word'`
        re.compile(r"\bcurl\b[^\n|;&]{0,1024}?[ \t](?:-u|--user)[ \t]*(?P<q>[\"']?)[^\s:'\"]+:(?P<r>[\"']?)"
                   r"(?P<v>[^\s'\"]+|(?<=['\"])[^'\"\n]+)(?P=r)(?P=q)"),
        _value("v", "password", _keep_plain("v")),
    ),
    SecretRule(
        "netrc",
        re.compile(r"\bmachine[ \t]+\S+\s+login[ \t]+\S+(?:\s+(?:account|port)[ \t]+\S+)*\s+password[ \t]+(?P<v>\S+)"),
        _value("v", "password", _keep_plain("v")),
    ),
    SecretRule(
        "docker_auth",
        re.compile(r"\\*\"auth\\*\"[ \t]*:[ \t]*\\*\"(?P<v>" + _B64 + r"{8,}={0,2})\\*\""),
        _value("v", "docker_auth", lambda m: not _docker_auth(m.group("v"))),
    ),
    SecretRule(
        "pgpass",
        re.compile(r"^(?P<pre>[A-Za-z0-9._*\-]+:(?:\d{1,5}|\*):[^:\s]+:[^:\s]+:)(?P<v>\S+)[ \t]*\r?$", re.MULTILINE),
        _value("v", "password", _keep_plain("v")),
    ),
    *_PASSWORD_TOOL_RULES,
    *_SQL_PASSWORD_RULES,
    SecretRule("keyword", _ENV_PAIR, _env_pair),
    SecretRule("auth_pair", _AUTH_PAIR, _value("v", "password", _keep_plain("v"))),
    SecretRule("keyword", None, scan=_scan_assignments),
    SecretRule("percent", None, scan=_scan_percent_encoded),  # last: what the plain text shows is already taken
]
_EMAIL_RULE = SecretRule(
    "email",
    re.compile(r"(?<![A-Za-z0-9._%+\-])[A-Za-z0-9._%+\-]{1,64}@[A-Za-z0-9\-]{1,63}(?:\.[A-Za-z0-9\-]{1,63})*"
               r"\.[A-Za-z]{2,24}(?![A-Za-z0-9\-])"),
    _whole("email"),
)


def redact_text(text: str, emails: bool = False) -> tuple[str, Counter]:
    """`text` with every secret replaced by ``<SECRET:kind>``, and the count of replacements per kind."""
    counts: Counter = Counter()
    if not text:
        return text, counts
    # Gates are decided on the original text: a replacement only removes secrets, it never creates one.
    gates = open_gates(text)
    if not gates:
        return text, counts
    for rule in _RULES:
        if rule.gate in gates:
            text = rule.apply(text, counts)
    if emails and "email" in gates:
        text = _EMAIL_RULE.apply(text, counts)
    return text, counts


# Fields are redacted as one text joined by this separator: no pattern can match across it (every class that
# could reach it stops at a newline or NUL), so one gate scan serves the whole trajectory.
_FIELD_SEPARATOR = "\n\x00\n"


def _text_fields(traj: Trajectory) -> list[str | None]:
    s, src = traj.system, traj.source
    out = [traj.traj_id, traj.split_key, src.uri, src.locator]
    out += [s.task_description, s.action_space, s.initial_state, s.simulation_instruction, traj.meta]
    for d in s.demonstrations:
        out += [d.action, d.observation]
    for t in traj.turns:
        out += [t.action, t.observation, t.reasoning, t.meta]
    return out


def _with_text_fields(traj: Trajectory, values: list[str | None]) -> Trajectory:
    it = iter(values)
    traj_id, split_key, uri, locator = (next(it) for _ in range(4))
    task, space, state, instruction, meta = (next(it) for _ in range(5))
    demos = [Demonstration(next(it), next(it)) for _ in traj.system.demonstrations]
    turns = [replace(t, action=next(it), observation=next(it), reasoning=next(it), meta=next(it)) for t in traj.turns]
    system = replace(traj.system, task_description=task, action_space=space, initial_state=state,
                     demonstrations=demos, simulation_instruction=instruction)
    source = replace(traj.source, uri=uri, locator=locator)
    return replace(traj, traj_id=traj_id, split_key=split_key, source=source, system=system, turns=turns, meta=meta)


def redact_trajectory(traj: Trajectory, emails: bool = False) -> tuple[Trajectory, Counter]:
    """`traj` with every text field redacted (ids, source URI and locator, system, demonstrations, turns, meta)
    and the counts per kind.

    Returns the same object when nothing was found.
    """
    fields = _text_fields(traj)
    present = [f for f in fields if f]
    out, counts = redact_text(_FIELD_SEPARATOR.join(present), emails)
    if not counts:
        return traj, counts
    parts = out.split(_FIELD_SEPARATOR)
    if len(parts) != len(present):  # a field holds the separator itself: redact field by field
        parts, counts = [], Counter()
        for f in present:
            text, c = redact_text(f, emails)
            parts.append(text)
            counts.update(c)
    redacted = iter(parts)
    return _with_text_fields(traj, [next(redacted) if f else f for f in fields]), counts


@trajectory_step("redact", section="redact", order=20)
def build_redactor(cfg: dict[str, Any]) -> list[Callable[[Trajectory, Stats], Trajectory]]:
    """The redaction step for the ingest transforms (``[]`` when ``redact.enabled`` is false)."""
    section = cfg.get("redact", {})
    if not section.get("enabled", True):
        return []
    emails = bool(section.get("emails", False))

    def redact_step(traj: Trajectory, stats: Stats) -> Trajectory:
        out, counts = redact_trajectory(traj, emails)
        for kind, n in sorted(counts.items()):
            stats.add(f"redacted.{kind}", n)
        if counts:
            stats.add("trajectories.redacted")
        return out

    return [redact_step]
