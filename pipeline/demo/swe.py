"""Demo corpus for the ``swe`` domain: an issue-fixing agent with editor and shell tools.

Format: lwm-jsonl, the sandbox's native format. Two-line example of a native turn::

    {"action": "{\\"name\\": \\"str_replace_editor\\", \\"arguments\\": {\\"command\\": \\"view\\", \\"path\\": \\"/app/src/x/orders.py\\"}}",
     "observation": "Here's the result of running `cat -n` on /app/src/x/orders.py:\\n     1\\t\\"\\"\\"Orders helpers.\\"\\"\\"..."}

Mapping: each turn is one tool call as canonical JSON ``{"name", "arguments"}`` (bash,
str_replace_editor view/create/str_replace, search_code, think, submit) over a fake repository
with one planted bug; observations are numbered code listings, edit confirmations with the
edited snippet, pytest output, search hits and the final diff. The action space is per
trajectory: the tool schemas the harness declares (search_code and think only in some runs).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.demo import fakerepo, vocab
from pipeline.demo.common import DomainSpec, Episode, action_json, build_corpus, make_turn, outcome_of, turn_budget

_TOOL_SCHEMAS = {
    "bash": {"description": "Run a bash command in the repository (no interactive programs).",
             "parameters": {"command": {"type": "string"}}},
    "str_replace_editor": {"description": "View, create and edit files. Commands: view, create, str_replace.",
                           "parameters": {"command": {"type": "string", "enum": ["view", "create", "str_replace"]},
                                          "path": {"type": "string"}, "file_text": {"type": "string"},
                                          "old_str": {"type": "string"}, "new_str": {"type": "string"},
                                          "view_range": {"type": "array", "items": {"type": "integer"}}}},
    "search_code": {"description": "Search for a term in the repository; prints matching lines.",
                    "parameters": {"term": {"type": "string"}, "path": {"type": "string"}}},
    "think": {"description": "Log a thought. The environment returns it unchanged.", "parameters": {"thought": {"type": "string"}}},
    "submit": {"description": "Submit the current changes as the final patch.", "parameters": {}},
}  # fmt: skip
DEMONSTRATIONS = (('{"name": "bash", "arguments": {"command": "git rev-parse --short HEAD"}}', "4e1c2ab"),)
SIMULATION_INSTRUCTIONS = (
    "Act as the repository sandbox: print tool results exactly as the harness formats them.",
    "You are the execution environment of a coding agent. Keep file contents consistent across turns.",
    "Return only the tool output. Test runs must reflect the edits made so far.",
)

Call = tuple[dict, str]


@dataclass(frozen=True)
class Task:
    repo_seed: int
    issue: str


@dataclass
class Session:
    repo: fakerepo.FakeRepo
    tools: list[str]
    reproduced: bool = False


def _path(s: Session, rel: str) -> str:
    return f"{s.repo.root}/{rel}"


def _call(name: str, **arguments: object) -> dict:
    return {"name": name, "arguments": arguments}


def _view_tree(rng: random.Random, s: Session) -> Call:
    dirs = sorted({p.rsplit("/", 1)[0] for p in s.repo.files if "/" in p})
    listing = [s.repo.root] + [f"{s.repo.root}/{p}" for p in sorted(set(dirs) | set(s.repo.files))]
    head = f"Here's the files and directories up to 2 levels deep in {s.repo.root}, excluding hidden items:\n"
    return _call("str_replace_editor", command="view", path=s.repo.root), head + "\n".join(listing)


def _view_file(rng: random.Random, s: Session, rel: str | None = None) -> Call:
    rel = rel or rng.choice(sorted(s.repo.files))
    text = s.repo.files[rel]
    total = text.count("\n") + 1
    if total > 8 and rng.random() < 0.4:
        start = rng.randint(1, total - 4)
        end = min(total, start + rng.randint(4, 20))
        out = f"Here's the result of running `cat -n` on {_path(s, rel)}:\n{fakerepo.numbered(text, start, end)}"
        return _call("str_replace_editor", command="view", path=_path(s, rel), view_range=[start, end]), out
    out = f"Here's the result of running `cat -n` on {_path(s, rel)}:\n{fakerepo.numbered(text)}"
    return _call("str_replace_editor", command="view", path=_path(s, rel)), out


def _run_tests(rng: random.Random, s: Session) -> Call:
    target = rng.choice((s.repo.test_path, "tests", ""))
    cmd = f"cd {s.repo.root} && python -m pytest -q {target}".rstrip()
    return _call("bash", command=cmd), fakerepo.pytest_output(s.repo, rng, quiet=True)


def _create_repro(rng: random.Random, s: Session) -> Call:
    module = s.repo.bug_module.removeprefix("src/").removesuffix(".py").replace("/", ".")
    test_body = s.repo.bug.test_source.split("\n", 1)[1]
    body = f"from {module} import {s.repo.bug.name}\n\n\ndef main():\n{test_body}    print('ok')\n\n\nmain()\n"
    s.repo.files["reproduce_issue.py"] = body
    return _call("str_replace_editor", command="create", path=_path(s, "reproduce_issue.py"), file_text=body), (
        f"File created successfully at: {_path(s, 'reproduce_issue.py')}"
    )


def _run_repro(rng: random.Random, s: Session) -> Call:
    if "reproduce_issue.py" not in s.repo.files:
        return _create_repro(rng, s)
    cmd = f"cd {s.repo.root} && python reproduce_issue.py"
    if s.repo.fixed:
        return _call("bash", command=cmd), "ok"
    error = s.repo.bug.failure.split("\n")[0]
    kind = "ValueError" if error.startswith("ValueError") else "AssertionError"
    trace = (f'Traceback (most recent call last):\n  File "{_path(s, "reproduce_issue.py")}", line 9, in <module>\n    main()\n'
             f'  File "{_path(s, "reproduce_issue.py")}", line 6, in main\n{s.repo.bug.test_source.rstrip().split(chr(10))[-1]}\n'
             f"{kind}{': ' + error.removeprefix('ValueError: ') if kind == 'ValueError' else ''}")  # fmt: skip
    s.reproduced = True
    return _call("bash", command=cmd), trace


def _fix(rng: random.Random, s: Session) -> Call:
    repo = s.repo
    old, new = repo.bug.buggy_line, repo.bug.fixed_line
    repo.fix()
    line = repo.bug_line_no()
    lines = repo.files[repo.bug_module].split("\n")
    start, end = max(1, line - 3), min(len(lines), line + 3)
    snippet = "\n".join(f"{i:>6}\t{lines[i - 1]}" for i in range(start, end + 1))
    out = (f"The file {_path(s, repo.bug_module)} has been edited. Here's the result of running `cat -n` on a snippet of "
           f"{_path(s, repo.bug_module)}:\n{snippet}\nReview the changes and make sure they are as expected. Edit the file again if necessary.")  # fmt: skip
    return _call(
        "str_replace_editor", command="str_replace", path=_path(s, repo.bug_module), old_str=old, new_str=new
    ), out


def _search(rng: random.Random, s: Session) -> Call:
    term = rng.choice((s.repo.bug.name, "def ", "return", s.repo.package))
    hits = [
        f"{rel}:{i}:{ln}"
        for rel, text in sorted(s.repo.files.items())
        for i, ln in enumerate(text.split("\n"), 1)
        if term in ln
    ]
    if not hits:
        return _call("search_code", term=term, path=s.repo.root), f'No matches found for "{term}" in {s.repo.root}'
    return _call(
        "search_code", term=term, path=s.repo.root
    ), f'Found {len(hits)} matches for "{term}" in {s.repo.root}:\n' + "\n".join(hits)


def _think(rng: random.Random, s: Session) -> Call:
    thought = (f"The failing test is {s.repo.bug.test_name}. {s.repo.bug.name} in {s.repo.bug_module} probably mishandles "
               f"the {rng.choice(('boundary', 'empty input', 'default', 'sign'))} case; I should {rng.choice(vocab.VERBS)} a minimal example first.")  # fmt: skip
    return _call(
        "think", thought=thought
    ), thought if rng.random() < 0.6 else f"Your thought has been logged: {thought}"


def _bash_probe(rng: random.Random, s: Session) -> Call:
    dirty = sorted(s.repo.dirty) + (["reproduce_issue.py"] if "reproduce_issue.py" in s.repo.files else [])
    return rng.choice(
        (
            (
                _call("bash", command=f"cd {s.repo.root} && git status --short"),
                "\n".join(f"{'??' if p.startswith('rep') else ' M'} {p}" for p in dirty),
            ),
            (
                _call("bash", command=f"cd {s.repo.root} && ls"),
                "  ".join(sorted({p.split("/")[0] for p in s.repo.files})),
            ),
            (_call("bash", command="python --version"), f"Python {s.repo.python}"),
        )
    )


def _submit(rng: random.Random, s: Session) -> Call:
    diff = fakerepo.fix_diff(s.repo) if s.repo.fixed else ""
    return _call("submit"), diff or "No changes to submit."


_FILLERS: dict[str, tuple[Callable[[random.Random, Session], Call], ...]] = {
    "bash": (_bash_probe, _run_tests),
    "str_replace_editor": (_view_file, _view_file, _view_tree),
    "search_code": (_search,),
    "think": (_think,),
}


def _view_bug_module(rng: random.Random, s: Session) -> Call:
    return _view_file(rng, s, s.repo.bug_module)


def _plan(rng: random.Random) -> list[Callable[[random.Random, Session], Call]]:
    # Agents differ: some look around first, some write a reproduction script, some go straight to the fix.
    plan = [_view_tree] if rng.random() < 0.6 else []
    plan.append(_view_bug_module)
    repro = rng.random() < 0.6
    plan += [_create_repro, _run_repro] if repro else [_run_tests]
    plan.append(_fix)
    plan += [_run_repro, _run_tests] if repro else [_run_tests]
    return [*plan, _submit]


def new_task(rng: random.Random) -> Task:
    """An issue report written against a fake repository's planted bug."""
    seed = rng.getrandbits(32)
    repo = fakerepo.make_repo(random.Random(seed))
    who = vocab.person(rng)
    issue = (f"{repo.name}: `{repo.bug.name}` gives a wrong result\n\nReported by {who}. "
             f"`{repo.bug.test_name}` fails on main:\n\n```\n{repo.bug.failure}\n```\n\n"
             f"{vocab.sentence(rng)} Please fix `{repo.bug.name}` in `{repo.bug_module}` without changing the tests.")  # fmt: skip
    return Task(seed, issue)


def play_attempt(rng: random.Random, task: Task) -> Episode:
    """Explore, reproduce, fix, test and submit, with detours; short budgets stop early."""
    repo = fakerepo.make_repo(random.Random(task.repo_seed))
    # Each attempt runs in a fresh container; harnesses mount the checkout in different places.
    repo.root = rng.choice(
        (
            "/testbed",
            f"/repo/{repo.name}",
            f"/workspace/{repo.name}",
            f"/tmp/{repo.package}_{rng.randint(100, 999)}",
            "/app",
        )
    )
    repo.python = f"3.{rng.randint(10, 12)}.{rng.randint(1, 9)}"
    tools = ["bash", "str_replace_editor"] + [t for t in ("search_code", "think") if rng.random() < 0.5] + ["submit"]
    s = Session(repo, tools)
    plan = _plan(rng)
    budget = max(turn_budget(rng), 3)
    turns = []
    while len(turns) < budget and plan:
        left = budget - len(turns)
        if turns and rng.random() < (left - len(plan)) / left:
            move = rng.choice(_FILLERS[rng.choice([t for t in tools if t in _FILLERS])])
        else:
            move = plan.pop(0)
        call, obs = move(rng, s)
        turns.append(make_turn(action_json(call), obs, rng.choice((None, f"Use {call['name']}."))))
    space = json.dumps([{"name": t, **_TOOL_SCHEMAS[t]} for t in tools], ensure_ascii=False, indent=1)
    return Episode(task.issue, space, turns, initial_state=f"Repository checked out at {repo.root} (branch main).",
                   outcome=outcome_of(rng, repo.fixed and not plan))  # fmt: skip


SPEC = DomainSpec("swe", new_task, play_attempt, DEMONSTRATIONS, SIMULATION_INSTRUCTIONS)


def generate_swe(seed: int, n: int) -> list[dict]:
    """`n` swe trajectory dicts in the lwm-jsonl layout."""
    return build_corpus(SPEC, seed, n)
