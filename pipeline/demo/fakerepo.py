"""A small fake Python repository with one planted bug, shared by the terminal and swe demos.

It knows its files, the failing test, the one-line fix, and how pytest, git and ``cat -n`` would
print them, so that a simulated session can show consistent listings, diffs and test output.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from pipeline.demo import vocab

# Each template: (function source, buggy line, fixed line, test source, failure text).
# Placeholders: {noun} {verb} {adj} {a} {b}; the fixed line appears verbatim in the function.
_TEMPLATES = (
    (
        'def paginate_{noun}s(items, page, size={a}):\n    """Return page `page` (1-based) of `items`, `size` per page."""\n'
        "    start = (page - 1) * size\n    return items[start:start + size]\n",
        "    return items[start:start + size - 1]",
        "    return items[start:start + size]",
        "def test_paginate_{noun}s_full_page():\n    items = list(range({b}))\n"
        "    assert len(paginate_{noun}s(items, 1, {a})) == {a}\n",
        "assert {a_minus} == {a}\n +  where {a_minus} = len([0, 1, 2, 3, ...])",
    ),
    (
        'def is_{adj}_{noun}(age_days, limit={a}):\n    """A {noun} at least `limit` days old counts as {adj}."""\n'
        "    return age_days >= limit\n",
        "    return age_days > limit",
        "    return age_days >= limit",
        "def test_is_{adj}_{noun}_at_limit():\n    assert is_{adj}_{noun}({a})\n",
        "assert False\n +  where False = is_{adj}_{noun}({a})",
    ),
    (
        'def normalize_{noun}_code(code):\n    """Canonical {noun} code: trimmed, upper case, dashes removed."""\n'
        '    return code.strip().upper().replace("-", "")\n',
        '    return code.upper().replace("-", "")',
        '    return code.strip().upper().replace("-", "")',
        'def test_normalize_{noun}_code_trims():\n    assert normalize_{noun}_code("  ab-{b} ") == "AB{b}"\n',
        "AssertionError: assert '  AB{b} ' == 'AB{b}'\n  - AB{b}\n  + \u0020 AB{b}\u0020",
    ),
    (
        'def total_{noun}_amount(rows):\n    """Sum of `amount` over rows, ignoring refunded ones."""\n'
        '    return round(sum(r["amount"] for r in rows if not r.get("refunded")), 2)\n',
        '    return round(sum(r["amount"] for r in rows if r.get("refunded")), 2)',
        '    return round(sum(r["amount"] for r in rows if not r.get("refunded")), 2)',
        "def test_total_{noun}_amount_skips_refunds():\n"
        '    rows = [{{"amount": {a}.5}}, {{"amount": {b}.0, "refunded": True}}]\n'
        "    assert total_{noun}_amount(rows) == {a}.5\n",
        "assert {b}.0 == {a}.5\n +  where {b}.0 = total_{noun}_amount([...])",
    ),
    (
        'def {verb}_backoff(attempt, base={a}, cap={b}):\n    """Delay in seconds before retry `attempt` (0-based), capped."""\n'
        "    return min(cap, base * 2 ** attempt)\n",
        "    return min(cap, base * 2 * attempt)",
        "    return min(cap, base * 2 ** attempt)",
        "def test_{verb}_backoff_first_retry():\n    assert {verb}_backoff(0) == {a}\n",
        "assert 0 == {a}\n +  where 0 = {verb}_backoff(0)",
    ),
    (
        'def parse_{noun}_tags(text):\n    """Parse "k=v;k2=v2" into a dict; empty parts are skipped."""\n'
        '    pairs = (part.split("=", 1) for part in text.split(";") if part)\n'
        "    return {{k.strip(): v.strip() for k, v in pairs}}\n",
        '    pairs = (part.split("=", 1) for part in text.split(";"))',
        '    pairs = (part.split("=", 1) for part in text.split(";") if part)',
        'def test_parse_{noun}_tags_trailing_separator():\n    assert parse_{noun}_tags("env=prod;") == {{"env": "prod"}}\n',
        "ValueError: not enough values to unpack (expected 2, got 1)",
    ),
)


@dataclass
class Function:
    name: str
    source: str
    test_name: str
    test_source: str
    buggy_line: str
    fixed_line: str
    failure: str


@dataclass
class FakeRepo:
    """The repository: `files` maps path → text (the buggy version until `fix` is applied)."""

    name: str
    package: str
    root: str
    files: dict[str, str]
    functions: dict[str, list[Function]]  # module path → its functions
    bug_module: str
    bug: Function
    test_path: str
    python: str = "3.11.9"  # the interpreter of the session (pytest's header, python --version)
    fixed: bool = False
    dirty: set[str] = field(default_factory=set)

    def fix(self) -> None:
        """Apply the one-line fix to the buggy module."""
        self.files[self.bug_module] = self.files[self.bug_module].replace(self.bug.buggy_line, self.bug.fixed_line, 1)
        self.fixed = True
        self.dirty.add(self.bug_module)

    def rename(self, old: str, new: str) -> list[tuple[str, int]]:
        """Rename an identifier everywhere (files and the known functions); (path, occurrences) per changed file."""
        changed = []
        for path in sorted(self.files):
            count = self.files[path].count(old)
            if count:
                self.files[path] = self.files[path].replace(old, new)
                changed.append((path, count))
                self.dirty.add(path)
        for functions in self.functions.values():
            for f in functions:
                for name in ("name", "source", "test_name", "test_source", "buggy_line", "fixed_line", "failure"):
                    setattr(f, name, getattr(f, name).replace(old, new))
        return changed

    def bug_line_no(self) -> int:
        lines = self.files[self.bug_module].split("\n")
        wanted = self.bug.fixed_line if self.fixed else self.bug.buggy_line
        return lines.index(wanted) + 1

    def all_tests(self) -> list[tuple[str, str]]:
        """(test file, test name) of every test, in file order."""
        return [(_test_path_of(m), f.test_name) for m, fs in self.functions.items() for f in fs]


def _test_path_of(module_path: str) -> str:
    return f"tests/test_{module_path.rsplit('/', 1)[-1]}"


def _function(rng: random.Random, template: tuple[str, ...]) -> Function:
    a = rng.randint(3, 40)
    values = {
        "noun": rng.choice(vocab.NOUNS),
        "verb": rng.choice(vocab.VERBS),
        "adj": rng.choice(vocab.ADJECTIVES),
        "a": a,
        "a_minus": a - 1,
        "b": rng.randint(41, 99),
    }
    src, buggy, fixed, test, failure = (part.format(**values) for part in template)
    name = src.split("(", 1)[0].removeprefix("def ")
    test_name = test.split("(", 1)[0].removeprefix("def ")
    return Function(name, src, test_name, test, buggy, fixed, failure)


def make_repo(rng: random.Random) -> FakeRepo:
    """A repository with 2-3 modules of 1-3 functions each; one function carries the bug."""
    company = rng.choice(vocab.COMPANIES).split()[0].lower()
    name = f"{company}-{rng.choice(vocab.NOUNS)}-{rng.choice(('service', 'tools', 'core', 'api', 'sync'))}"
    package = name.replace("-", "_")
    root = rng.choice(("/app", f"/workspace/{name}", f"/srv/{name}", f"/repo/{name}"))
    functions: dict[str, list[Function]] = {}
    for stem in rng.sample(
        ("billing", "orders", "utils", "retry", "codes", "reports", "ingest", "tags"), rng.randint(2, 3)
    ):
        path = f"src/{package}/{stem}.py"
        functions[path] = [_function(rng, t) for t in rng.sample(_TEMPLATES, rng.randint(1, 3))]
    bug_module = rng.choice(sorted(functions))
    bug = rng.choice(functions[bug_module])
    files = {
        "README.md": f"# {name}\n\n{vocab.sentence(rng)}\n\nRun the tests with `pytest -q`.\n",
        "pyproject.toml": f'[project]\nname = "{name}"\nversion = "0.{rng.randint(1, 9)}.{rng.randint(0, 20)}"\n'
        f'requires-python = ">=3.10"\ndependencies = ["{rng.choice(vocab.PACKAGES)[0]}"]\n',
        f"src/{package}/__init__.py": f'"""{name}: {rng.choice(vocab.VERBS)} {rng.choice(vocab.NOUNS)} records."""\n',
    }
    for path, fs in functions.items():
        module = path.rsplit("/", 1)[-1].removesuffix(".py")
        body = "\n\n".join(f.source for f in fs)
        if path == bug_module:
            body = body.replace(bug.fixed_line, bug.buggy_line, 1)
        files[path] = f'"""{module.capitalize()} helpers."""\n\n\n{body}'
        imports = ", ".join(f.name for f in fs)
        tests = "\n\n".join(f.test_source for f in fs)
        files[_test_path_of(path)] = f"from {package}.{module} import {imports}\n\n\n{tests}"
    return FakeRepo(name, package, root, files, functions, bug_module, bug, _test_path_of(bug_module))


def pytest_output(repo: FakeRepo, rng: random.Random, quiet: bool) -> str:
    """What ``pytest`` (or ``pytest -q``) prints for the current state of the repository."""
    tests = repo.all_tests()
    failed = [] if repo.fixed else [(p, n) for p, n in tests if n == repo.bug.test_name]
    seconds = f"{rng.uniform(0.03, 1.9):.2f}s"
    by_file: dict[str, str] = {}
    for path, name in tests:
        by_file[path] = by_file.get(path, "") + ("F" if (path, name) in failed else ".")
    lines = []
    if not quiet:
        lines += [
            "=" * 29 + " test session starts " + "=" * 30,
            f"platform linux -- Python {repo.python}, pytest-8.{rng.randint(0, 3)}.{rng.randint(0, 2)}, pluggy-1.5.0",
            f"rootdir: {repo.root}",
            "configfile: pyproject.toml",
            f"collected {len(tests)} items",
            "",
        ]
        done = 0
        for path, marks in by_file.items():
            done += len(marks)
            lines.append(f"{path} {marks}".ljust(73) + f"[{100 * done // len(tests):>3}%]")
    else:
        lines.append("".join(by_file.values()).ljust(73) + "[100%]")
    summary = f"{len(tests) - len(failed)} passed"
    if failed:
        lines += ["", "=" * 35 + " FAILURES " + "=" * 35, f"{'_' * 20} {repo.bug.test_name} {'_' * 20}", ""]
        lines += ["    " + ln for ln in repo.bug.test_source.rstrip().split("\n")[1:]]
        lines += ["E   " + ln for ln in repo.bug.failure.split("\n")]
        error = "ValueError" if repo.bug.failure.startswith("ValueError") else "AssertionError"
        lines += ["", f"{repo.test_path}:{rng.randint(4, 30)}: {error}"]
        lines += ["=" * 27 + " short test summary info " + "=" * 28]
        lines.append(f"FAILED {repo.test_path}::{repo.bug.test_name} - {repo.bug.failure.splitlines()[0]}")
        summary = f"1 failed, {summary}"
    lines.append(f"{summary} in {seconds}" if quiet else f"{'=' * 25} {summary} in {seconds} {'=' * 25}")
    return "\n".join(lines)


def fix_diff(repo: FakeRepo) -> str:
    """The unified diff of the fix, as ``git diff`` prints it."""
    path = repo.bug_module
    lines = repo.files[path].split("\n")
    at = repo.bug_line_no() - 1
    before = lines[max(0, at - 3) : at]
    after = lines[at + 1 : at + 3]
    head = [
        f"diff --git a/{path} b/{path}",
        f"index {abs(hash_text(repo.name)) % 0xFFFFFFF:07x}..{abs(hash_text(path)) % 0xFFFFFFF:07x} 100644",
        f"--- a/{path}",
        f"+++ b/{path}",
        f"@@ -{at - len(before) + 1},{len(before) + len(after) + 1} +{at - len(before) + 1},{len(before) + len(after) + 1} @@",
    ]
    body = (
        [f" {ln}" for ln in before]
        + [f"-{repo.bug.buggy_line}", f"+{repo.bug.fixed_line}"]
        + [f" {ln}" for ln in after]
    )
    return "\n".join(head + body)


def hash_text(text: str) -> int:
    """A stable small integer from text (for fake commit and blob ids)."""
    value = 0
    for ch in text:
        value = (value * 131 + ord(ch)) % 0xFFFFFFFFFFFF
    return value


def numbered(text: str, start: int = 1, end: int | None = None) -> str:
    """Lines `start`..`end` of `text`, prefixed by their numbers like ``cat -n``."""
    lines = text.rstrip("\n").split("\n")
    end = len(lines) if end is None else min(end, len(lines))
    return "\n".join(f"{i:>6}\t{lines[i - 1]}" for i in range(start, end + 1))
