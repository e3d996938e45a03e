"""The shell of the terminal demo: session state, and the commands with what they print.

A command is a function of the `Shell` (and the attempt's random generator) returning the typed
keys and the output; commands that change the session (``cd``, ``sed -i``, ``git commit``)
update the shell, so later output stays consistent with earlier turns.
"""

from __future__ import annotations

import posixpath
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from pipeline.demo import fakerepo, shell_outputs, vocab


@dataclass
class Shell:
    """One shell session in a checkout of the fake repository."""

    repo: fakerepo.FakeRepo
    user: str
    host: str
    cwd: str
    created: dict[str, str] = field(default_factory=dict)  # path relative to the repo root → text
    dirs: set[str] = field(default_factory=set)  # directories made with mkdir, relative to the repo root
    disk_used_gb: int = 40

    def prompt(self) -> str:
        home = f"/home/{self.user}"
        shown = "~" + self.cwd[len(home) :] if self.cwd.startswith(home) else self.cwd
        return f"{self.user}@{self.host}:{shown}{'#' if self.user == 'root' else '$'} "

    def rel(self, repo_path: str) -> str:
        return shell_outputs.relative(posixpath.join(self.repo.root, repo_path), self.cwd)

    def files(self) -> dict[str, str]:
        return {**self.repo.files, **self.created}


@dataclass(frozen=True)
class Command:
    """What one turn typed and what the shell printed before the next prompt."""

    keys: str
    output: str
    duration: float = 0.1
    reasoning: str | None = None
    exit_code: int = 0


def list_dir(shell: Shell, rng: random.Random, long: bool) -> Command:
    """``ls`` or ``ls -la`` of the current directory."""
    here = posixpath.relpath(shell.cwd, shell.repo.root)
    prefix = "" if here == "." else here + "/"
    entries: dict[str, tuple[bool, int]] = {}
    for path, text in shell.files().items():
        if path.startswith(prefix):
            head, _, rest = path[len(prefix) :].partition("/")
            entries[head] = (bool(rest), len(text.encode()))
    for directory in shell.dirs:
        if directory.startswith(prefix):
            entries.setdefault(directory[len(prefix) :].split("/")[0], (True, 4096))
    if long and here == ".":
        entries[".git"] = (True, 4096)
    rows = [(name, d, size) for name, (d, size) in sorted(entries.items())]
    owner = "root" if shell.user == "root" else shell.user
    return Command(
        "ls -la\n" if long else "ls\n", shell_outputs.ls_output(rng, rows, long, owner), 0.1, "Let me see what is here."
    )


def cat_file(shell: Shell, rng: random.Random, path: str | None = None, bug_module: bool = False) -> Command:
    """``cat`` of a file (a random one, or the buggy module)."""
    files = shell.files()
    path = shell.repo.bug_module if bug_module else path or rng.choice(sorted(files))
    return Command(f"cat {shell.rel(path)}\n", files[path].rstrip("\n"), 0.1, f"Read {path}.")


def run_pytest(shell: Shell, rng: random.Random) -> Command:
    """``python -m pytest`` (quiet or not) on the repository as it is now."""
    quiet = rng.random() < 0.5
    out = fakerepo.pytest_output(shell.repo, rng, quiet)
    keys = "python -m pytest -q\n" if quiet else "python -m pytest\n"
    return Command(keys, out, round(rng.uniform(1, 8), 1), "Run the tests.", 0 if shell.repo.fixed else 1)


def fix_with_sed(shell: Shell, rng: random.Random) -> Command:
    """Apply the one-line fix with ``sed -i``."""
    repo = shell.repo
    line = repo.bug_line_no()
    fixed = repo.bug.fixed_line.strip().replace("/", "\\/").replace("'", "'\\''")
    repo.fix()
    keys = f"sed -i '{line}s/.*/    {fixed}/' {shell.rel(repo.bug_module)}\n"
    return Command(keys, "", 0.1, f"Line {line} of {repo.bug_module} is wrong; replace it.")


def git_diff(shell: Shell, rng: random.Random) -> Command:
    """``git diff`` of the fix, or ``git diff --stat`` of other changes."""
    if shell.repo.fixed and shell.repo.dirty == {shell.repo.bug_module}:
        return Command("git diff\n", fakerepo.fix_diff(shell.repo), 0.1, "Check the change.")
    stats = [(p, rng.randint(1, 6)) for p in sorted(shell.repo.dirty)]
    lines = [f" {p} | {n} {'+' * (n // 2 + 1)}{'-' * (n // 2 + 1)}" for p, n in stats]
    if stats:
        total = sum(n for _, n in stats)
        lines.append(
            f" {len(stats)} file{'s' if len(stats) > 1 else ''} changed, {total} insertions(+), {total} deletions(-)"
        )
    return Command("git diff --stat\n", "\n".join(lines), 0.1, "What changed so far?")


def git_status(shell: Shell, rng: random.Random) -> Command:
    """``git status`` of the session's changes."""
    out = shell_outputs.git_status_output("main", sorted(shell.repo.dirty), sorted(shell.created))
    return Command("git status\n", out, 0.1)


def git_commit(shell: Shell, rng: random.Random) -> Command:
    """``git add -A && git commit``; clears the session's changes."""
    if not shell.repo.dirty and not shell.created:
        out = "On branch main\nYour branch is up to date with 'origin/main'.\n\nnothing to commit, working tree clean"
        return Command('git add -A && git commit -m "wip"\n', out, 0.3, exit_code=1)
    message = (
        shell_outputs.commit_message(rng)
        if not shell.repo.fixed
        else f"Fix {shell.repo.bug.name} ({shell.repo.bug.test_name} failed)"
    )
    changed = max(1, len(shell.repo.dirty) + len(shell.created))
    ins, dels = (1, 1) if shell.repo.dirty == {shell.repo.bug_module} else (rng.randint(1, 40), rng.randint(0, 9))
    out = f"[main {shell_outputs.commit_id(rng)}] {message}\n {changed} file{'s' if changed > 1 else ''} changed, {ins} insertions(+), {dels} deletions(-)"
    shell.repo.dirty.clear()
    shell.created.clear()
    return Command(f'git add -A && git commit -m "{message}"\n', out, 0.3, "Commit the work.")


def git_log(shell: Shell, rng: random.Random) -> Command:
    """``git log --oneline -n N``."""
    count = rng.randint(3, 8)
    return Command(f"git log --oneline -n {count}\n", shell_outputs.git_log_output(rng, count), 0.1)


def cd_subdir(shell: Shell, rng: random.Random) -> Command:
    """``cd`` into the package or the tests folder (prints nothing)."""
    target = (
        posixpath.join(shell.repo.root, "src", shell.repo.package)
        if rng.random() < 0.6
        else posixpath.join(shell.repo.root, "tests")
    )
    keys = f"cd {shell_outputs.relative(target, shell.cwd)}\n"
    shell.cwd = target
    return Command(keys, "", 0.1)


def cd_root(shell: Shell, rng: random.Random) -> Command:
    """``cd`` back to the repository root."""
    keys = f"cd {shell.repo.root}\n"
    shell.cwd = shell.repo.root
    return Command(keys, "", 0.1)


def make_dir(shell: Shell, rng: random.Random) -> Command:
    """``mkdir -p`` of a scratch directory (prints nothing)."""
    name = rng.choice(("scripts", "tmp/cache", "docs/notes", "config", "build/out"))
    shell.dirs.add(posixpath.normpath(posixpath.join(posixpath.relpath(shell.cwd, shell.repo.root), name)))
    return Command(f"mkdir -p {name}\n", "", 0.1)


def mistyped_command(shell: Shell, rng: random.Random) -> Command:
    """A typo: ``bash: …: command not found``."""
    wrong = rng.choice(("pyhton", "gti", "sl", "claer", "pytets", "grpe"))
    return Command(f"{wrong} --version\n", f"bash: {wrong}: command not found", 0.1, exit_code=127)


def find_python_files(shell: Shell, rng: random.Random) -> Command:
    """``find . -name '*.py'``."""
    paths = sorted(p for p in shell.files() if p.endswith(".py"))
    return Command('find . -name "*.py" -not -path "./.git/*"\n', "\n".join(f"./{p}" for p in paths), 0.2)


def grep_definitions(shell: Shell, rng: random.Random) -> Command:
    """``grep -rn '^def '`` over src and tests."""
    hits = []
    for path, text in sorted(shell.files().items()):
        for i, line in enumerate(text.split("\n"), 1):
            if line.startswith("def "):
                hits.append(f"{path}:{i}:{line}")
    return Command("grep -rn '^def ' src tests\n", "\n".join(hits), 0.1, "Find the functions.")


def count_lines(shell: Shell, rng: random.Random) -> Command:
    """``wc -l`` of the source modules."""
    files = shell.files()
    paths = sorted(p for p in files if p.startswith("src/") and p.endswith(".py"))
    counts = [(files[p].count("\n"), p) for p in paths]
    out = "\n".join(f"{c:>4} {p}" for c, p in counts) + f"\n{sum(c for c, _ in counts):>4} total"
    return Command(f"wc -l {' '.join(paths)}\n", out, 0.1)


def pip_install(shell: Shell, rng: random.Random) -> Command:
    """``pip install`` of a few pinned packages."""
    packages = rng.sample(vocab.PACKAGES, rng.randint(1, 3))
    spec = " ".join(f"{n}=={v}" for n, v in packages)
    out = shell_outputs.pip_install_output(rng, packages, shell.user == "root")
    return Command(f"pip install {spec}\n", out, round(rng.uniform(3, 25), 1), "Install what the project needs.")


def pip_install_project(shell: Shell, rng: random.Random) -> Command:
    """``pip install -e .`` of the repository and its dependency."""
    dependency = shell.repo.files["pyproject.toml"].split('dependencies = ["', 1)[1].split('"', 1)[0]
    version = dict(vocab.PACKAGES)[dependency]
    own = shell.repo.files["pyproject.toml"].split('version = "', 1)[1].split('"', 1)[0]
    pip = shell_outputs.pip_install_output(rng, [(dependency, version)], shell.user == "root")
    build = (
        f"Obtaining file://{shell.repo.root}\n  Installing build dependencies ... done\n"
        "  Checking if build backend supports build_editable ... done\n  Getting requirements to build editable ... done\n"
        "  Preparing editable metadata (pyproject.toml) ... done\n"
    )
    out = build + pip.replace("Successfully installed ", f"Successfully installed {shell.repo.name}-{own} ")
    return Command("pip install -e .\n", out, round(rng.uniform(4, 30), 1), "Install the project and its dependencies.")


def disk_usage(shell: Shell, rng: random.Random) -> Command:
    """``df -h`` of the container."""
    return Command("df -h\n", shell_outputs.df_output(rng, shell.disk_used_gb), 0.1)


def environment_probe(shell: Shell, rng: random.Random) -> Command:
    """A quick look at the environment: python version, which, pwd, whoami."""
    return rng.choice(
        (
            Command("python3 --version\n", f"Python {shell.repo.python}"),
            Command("which python3 pip\n", "/usr/local/bin/python3\n/usr/local/bin/pip"),
            Command("pwd\n", shell.cwd),
            Command("whoami\n", shell.user),
        )
    )


Step = Callable[[Shell, random.Random], Command]

# Exploration moves; a tuple is a sequence played in order (cd somewhere, look, come back).
FILLERS: tuple[tuple[Step, ...], ...] = (
    (partial(list_dir, long=True),), (partial(list_dir, long=False),), (cat_file,), (cat_file,),
    (git_status,), (git_log,), (find_python_files,), (grep_definitions,), (count_lines,),
    (mistyped_command,), (make_dir,), (disk_usage,), (environment_probe,), (pip_install,),
    (cd_subdir, partial(list_dir, long=False), cd_root),
)  # fmt: skip
