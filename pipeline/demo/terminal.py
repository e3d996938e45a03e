"""Demo corpus for the ``terminal`` domain: simulated shell sessions in a container.

Format: lwm-jsonl, the sandbox's native format. Two-line example of a native turn::

    {"action": "[{\\"keystrokes\\": \\"ls\\\\n\\", \\"duration\\": 0.1}]",
     "observation": "README.md  pyproject.toml  src  tests\\nroot@box:/app# "}

Mapping: one keystroke-JSON action per turn (SPEC §8); the observation is what the screen shows
after it: the program's output followed by the next prompt (``cd`` and ``mkdir`` print only the
prompt; heredocs echo their ``> `` continuation lines). A task is a goal in a fake repository
(fix a failing test, rename a symbol, write a config, install and test, compress logs); its
attempts differ in exploration steps and length.
"""

from __future__ import annotations

import posixpath
import random
from dataclasses import dataclass
from functools import partial

from pipeline.demo import fakerepo, shell_outputs, vocab
from pipeline.demo.common import DomainSpec, Episode, action_json, build_corpus, make_turn, outcome_of, turn_budget
from pipeline.demo.terminal_commands import (
    FILLERS,
    Command,
    Shell,
    Step,
    cat_file,
    fix_with_sed,
    git_commit,
    git_diff,
    pip_install_project,
    run_pytest,
)

ACTION_SPACE = (
    "Send keystrokes to an interactive bash shell. An action is a JSON list of "
    '{"keystrokes": str, "duration": float} objects: the keys are typed verbatim (end a command with \\n), '
    "then the harness waits `duration` seconds and returns the new screen content. Use C-c to interrupt."
)
DEMONSTRATIONS = (
    ('[{"keystrokes": "pwd\\n", "duration": 0.1}]', "/app\nroot@box:/app# "),
    ('[{"keystrokes": "echo $SHELL\\n", "duration": 0.1}]', "/bin/bash\nroot@box:/app# "),
)
SIMULATION_INSTRUCTIONS = (
    "Print exactly what a bash shell in a Debian container would show, ending with the next prompt.",
    "Act as the terminal: show program output verbatim, including warnings, then the prompt. Never explain.",
    "You are a Linux container. Reply with the screen content produced by the keystrokes, nothing else.",
)


@dataclass(frozen=True)
class Task:
    kind: str
    repo_seed: int
    description: str
    params: dict


def _write_config(task: Task) -> list[Step]:
    path, body, keys = task.params["path"], task.params["body"], task.params["keys"]
    typed = "\n".join(f"> {line}" for line in body.rstrip("\n").split("\n")) + "\n> EOF"

    def write(shell: Shell, rng: random.Random) -> Command:
        shell.created[path] = body
        if rng.random() < 0.5:
            return Command(
                f"tee {path} <<'EOF'\n{body}EOF\n", f"{typed}\n{body.rstrip()}", 0.2, "Write the file and show it."
            )
        return Command(f"cat > {path} <<'EOF'\n{body}EOF\n", typed, 0.2, "Write the file.")

    def check(shell: Shell, rng: random.Random) -> Command:
        keys_code = f"python3 -c \"import yaml; d=yaml.safe_load(open('{path}')); print(sorted(d))\"\n"
        return Command(keys_code, str(sorted(keys)), 0.3, "Check it parses.")

    def mkdir(shell: Shell, rng: random.Random) -> Command:
        shell.dirs.add(posixpath.dirname(path))
        return Command(f"mkdir -p {posixpath.dirname(path)}\n", "")

    return [mkdir, write, check]


def _rename(task: Task) -> list[Step]:
    old, new = task.params["old"], task.params["new"]

    def sed(shell: Shell, rng: random.Random) -> Command:
        hits = shell.repo.rename(old, new)
        listing = " ".join(shell.rel(p) for p, _ in hits)
        return Command(
            f"sed -i 's/{old}/{new}/g' {listing} && grep -c '{new}' {listing}\n",
            "\n".join(f"{shell.rel(p)}:{c}" for p, c in hits),
            0.2,
            f"Rename {old} everywhere and count the new name per file.",
        )

    def grep_old(shell: Shell, rng: random.Random) -> Command:
        return Command(
            f"grep -rn '{old}' {shell.rel('src')} {shell.rel('tests')}\n",
            "",
            0.1,
            "Nothing should be left.",
            exit_code=1,
        )

    return [sed, grep_old, run_pytest]


def _compress_logs(task: Task) -> list[Step]:
    svc, logs = task.params["service"], task.params["logs"]
    paths = [f"/var/log/{svc}/{name}" for name in logs]

    def du(shell: Shell, rng: random.Random) -> Command:
        sizes = "\n".join(f"{rng.randint(2, 900)}M\t{p}" for p in paths)
        return Command(f"du -sh /var/log/{svc}/*\n", sizes, 0.2, "Which logs are big?")

    def tail(shell: Shell, rng: random.Random) -> Command:
        return Command(f"tail -n 5 {paths[0]}\n", shell_outputs.log_lines(rng, svc, 5), 0.1)

    def gzip(shell: Shell, rng: random.Random) -> Command:
        return Command(
            f"gzip -v {' '.join(paths)}\n", shell_outputs.gzip_verbose_output(rng, paths), 1.5, "Compress them."
        )

    def ls(shell: Shell, rng: random.Random) -> Command:
        return Command(f"ls /var/log/{svc}/\n", "  ".join(f"{n}.gz" for n in logs))

    return [du, tail, gzip, ls]


def _goal_steps(task: Task) -> list[Step]:
    if task.kind == "fix":
        return [
            run_pytest,
            partial(cat_file, path=None, bug_module=True),
            fix_with_sed,
            run_pytest,
            git_diff,
            git_commit,
        ]
    if task.kind == "config":
        return _write_config(task)
    if task.kind == "rename":
        return _rename(task)
    if task.kind == "logs":
        return _compress_logs(task)
    return [pip_install_project, run_pytest]


def new_task(rng: random.Random) -> Task:
    """Draw a task: its kind, its repository seed and its parameters."""
    repo_seed = rng.getrandbits(32)
    kind = rng.choice(("fix", "fix", "config", "rename", "logs", "install"))
    svc = f"{rng.choice(vocab.NOUNS)}-{rng.choice(('worker', 'api', 'sync', 'gateway'))}"
    if kind == "config":
        keys = rng.sample(("host", "port", "replicas", "timeout_s", "log_level", "queue", "region", "retries"), 4)
        values = {"host": f"{svc}.internal", "port": rng.randint(1024, 9999), "replicas": rng.randint(1, 6),
                  "timeout_s": rng.randint(5, 120), "log_level": rng.choice(("info", "debug", "warning")),
                  "queue": f"{rng.choice(vocab.NOUNS)}_events", "region": rng.choice(vocab.CITIES).lower(),
                  "retries": rng.randint(0, 5)}  # fmt: skip
        body = "".join(f"{k}: {values[k]}\n" for k in keys)
        path = f"config/{svc}.yaml"
        return Task(
            kind,
            repo_seed,
            f"Create {path} with {', '.join(keys)} and check that it is valid YAML.",
            {"path": path, "body": body, "keys": keys},
        )
    if kind == "rename":
        repo = fakerepo.make_repo(random.Random(repo_seed))
        old = rng.choice(sorted(f.name for fs in repo.functions.values() for f in fs))
        new = f"{rng.choice([v for v in vocab.VERBS if not old.startswith(v + '_')])}_{old.split('_', 1)[-1]}"
        return Task(
            kind,
            repo_seed,
            f"Rename `{old}` to `{new}` everywhere in the code base and keep the tests green.",
            {"old": old, "new": new},
        )
    if kind == "logs":
        logs = [
            f"{n}.log" for n in rng.sample(("access", "error", "worker", "audit", "debug", "gc"), rng.randint(2, 4))
        ]
        return Task(
            kind,
            repo_seed,
            f"The disk is filling up. Compress the large logs of {svc} under /var/log/{svc}.",
            {"service": svc, "logs": logs},
        )
    if kind == "install":
        return Task(kind, repo_seed, "Install the project's dependencies and report how many tests pass.", {})
    return Task(
        kind, repo_seed, "The test suite fails. Find the bug and fix it without changing the tests, then commit.", {}
    )


def play_attempt(rng: random.Random, task: Task) -> Episode:
    """One shell session at `task`: exploration, the goal commands, and maybe a little wandering."""
    repo = fakerepo.make_repo(random.Random(task.repo_seed))
    user = "root" if rng.random() < 0.75 else rng.choice(("dev", "ubuntu", "runner"))
    root = repo.root if user == "root" else f"/home/{user}/{repo.name}"
    repo.root = root
    repo.python = f"3.{rng.randint(10, 12)}.{rng.randint(1, 9)}"
    shell = Shell(
        repo,
        user,
        rng.choice(("box", "box", "sandbox", "devbox", "ci-runner-7")),
        root,
        disk_used_gb=rng.randint(8, 90),
    )
    initial = shell.prompt()
    budget = turn_budget(rng)
    goal = _goal_steps(task)
    goal_len = len(goal)
    queue: list[Step] = []
    turns = []
    while len(turns) < budget:
        if not queue and not goal and rng.random() < 0.2:
            break  # most agents stop once the job is done
        if not queue:
            wander = rng.random() < (0.45 if len(goal) == goal_len else 0.2) or not goal
            queue = list(rng.choice(FILLERS)) if wander else [goal.pop(0)]
        cmd = queue.pop(0)(shell, rng)
        output = cmd.output + ("\n" if cmd.output else "")
        action = action_json([{"keystrokes": cmd.keys, "duration": cmd.duration}])
        turns.append(make_turn(action, output + shell.prompt(), cmd.reasoning, {"exit_code": cmd.exit_code}))
    done = not goal
    return Episode(task.description, ACTION_SPACE, turns, initial_state=initial, outcome=outcome_of(rng, done))


SPEC = DomainSpec("terminal", new_task, play_attempt, DEMONSTRATIONS, SIMULATION_INSTRUCTIONS)


def generate_terminal(seed: int, n: int) -> list[dict]:
    """`n` terminal trajectory dicts in the lwm-jsonl layout."""
    return build_corpus(SPEC, seed, n)
