"""How common shell programs print: ls, pip, git log/status, ps, df, gzip, curl. Used by the terminal demo."""

from __future__ import annotations

import posixpath
import random

from pipeline.demo import vocab

_TRANSITIVE = (
    ("certifi", "2024.2.2"), ("idna", "3.6"), ("urllib3", "2.2.1"), ("charset-normalizer", "3.3.2"),
    ("typing-extensions", "4.10.0"), ("six", "1.16.0"), ("packaging", "24.0"), ("markupsafe", "2.1.5"),
    ("annotated-types", "0.6.0"), ("anyio", "4.3.0"), ("sniffio", "1.3.1"), ("h11", "0.14.0"),
    ("python-dateutil", "2.9.0"), ("pytz", "2024.1"), ("tzdata", "2024.1"), ("greenlet", "3.0.3"),
)  # fmt: skip


def _stamp(rng: random.Random) -> str:
    return f"{rng.choice(vocab.MONTHS)} {rng.randint(1, 28):>2} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"


def ls_output(rng: random.Random, entries: list[tuple[str, bool, int]], long: bool, owner: str) -> str:
    """``ls`` or ``ls -la`` of (name, is_dir, size) entries."""
    if not long:
        return "  ".join(name for name, _, _ in entries)
    stamp = _stamp(rng)
    rows = [("drwxr-xr-x", 4096, "."), ("drwxr-xr-x", 4096, "..")]
    rows += [("drwxr-xr-x" if d else "-rw-r--r--", 4096 if d else size, name) for name, d, size in entries]
    width = max(len(str(size)) for _, size, _ in rows)
    total = sum((size + 4095) // 4096 * 4 for _, size, _ in rows)
    lines = [f"total {total}"]
    lines += [
        f"{mode} {2 if mode[0] == 'd' else 1} {owner} {owner} {size:>{width}} {stamp} {name}"
        for mode, size, name in rows
    ]
    return "\n".join(lines)


def pip_install_output(rng: random.Random, packages: list[tuple[str, str]], as_root: bool) -> str:
    """``pip install`` progress and summary for the given (name, version) packages."""
    deps = rng.sample(_TRANSITIVE, rng.randint(0, 4))
    lines = []
    for name, version in packages + deps:
        size = rng.randint(12, 900)
        lines.append(
            f"Collecting {name}=={version}" if (name, version) in packages else f"Collecting {name}>={version}"
        )
        lines.append(f"  Downloading {name.replace('-', '_')}-{version}-py3-none-any.whl ({size} kB)")
        lines.append(f"     {'━' * 40} {size}.0/{size}.0 kB {rng.uniform(0.8, 30):.1f} MB/s eta 0:00:00")
    installed = sorted(f"{n}-{v}" for n, v in packages + deps)
    lines.append(f"Installing collected packages: {', '.join(n for n, _ in reversed(packages + deps))}")
    lines.append(f"Successfully installed {' '.join(installed)}")
    if as_root:
        lines.append(
            "WARNING: Running pip as the 'root' user can result in broken permissions and conflicting behaviour "
            "with the system package manager. It is recommended to use a virtual environment instead: "
            "https://pip.pypa.io/warnings/venv"
        )
    return "\n".join(lines)


def commit_id(rng: random.Random) -> str:
    """A fake abbreviated commit id."""
    return f"{rng.getrandbits(28):07x}"


def commit_message(rng: random.Random) -> str:
    """A plausible one-line commit message."""
    noun, verb, adj = rng.choice(vocab.NOUNS), rng.choice(vocab.VERBS), rng.choice(vocab.ADJECTIVES)
    pkg, ver = rng.choice(vocab.PACKAGES)
    return rng.choice(
        (
            f"Add {verb} helper for {noun}s",
            f"Fix {adj} {noun} handling in {verb} step",
            f"Bump {pkg} to {ver}",
            f"Refactor {noun} {verb} into its own module",
            f"Document how {noun}s are {verb}d",
            f"Skip {adj} {noun}s during nightly {verb}",
            f"Merge pull request #{rng.randint(12, 480)} from {vocab.slug(rng.choice(vocab.FIRST_NAMES))}/{verb}-{noun}",
        )
    )


def git_log_output(rng: random.Random, count: int) -> str:
    """``git log --oneline`` with `count` commits, the newest on top."""
    lines = [f"{commit_id(rng)} (HEAD -> main, origin/main) {commit_message(rng)}"]
    lines += [f"{commit_id(rng)} {commit_message(rng)}" for _ in range(count - 1)]
    return "\n".join(lines)


def git_status_output(branch: str, modified: list[str], untracked: list[str]) -> str:
    """``git status`` for a branch with modified and untracked paths."""
    lines = [f"On branch {branch}", f"Your branch is up to date with 'origin/{branch}'.", ""]
    if modified:
        lines += ["Changes not staged for commit:", '  (use "git add <file>..." to update what will be committed)',
                  '  (use "git restore <file>..." to discard changes in working directory)']  # fmt: skip
        lines += [f"\tmodified:   {p}" for p in modified] + [""]
    if untracked:
        lines += ["Untracked files:", '  (use "git add <file>..." to include in what will be committed)']
        lines += [f"\t{p}" for p in untracked] + [""]
    if not modified and not untracked:
        lines.append("nothing to commit, working tree clean")
    else:
        lines.append('no changes added to commit (use "git add" and/or "git commit -a")')
    return "\n".join(lines)


def ps_output(rng: random.Random, services: list[str]) -> str:
    """``ps aux`` filtered to a few processes."""
    lines = ["USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND"]
    lines.append(
        f"root           1  0.0  0.0   4364  3312 pts/0    Ss   {rng.randint(8, 11):02d}:0{rng.randint(0, 9)}   0:00 /bin/bash"
    )
    for svc in services:
        pid = rng.randint(20, 4000)
        lines.append(
            f"root        {pid:>4}  {rng.uniform(0, 9):.1f}  {rng.uniform(0.1, 4):.1f} {rng.randint(90000, 900000):>6} "
            f"{rng.randint(20000, 200000):>5} ?        Sl   {rng.randint(8, 11):02d}:{rng.randint(10, 59)}   0:0{rng.randint(0, 9)} {svc}"
        )
    return "\n".join(lines)


def df_output(rng: random.Random, used: int) -> str:
    """``df -h`` of a container whose overlay has `used` of 100 GB in use."""
    return "\n".join(
        [
            "Filesystem      Size  Used Avail Use% Mounted on",
            f"overlay         100G  {used}G  {100 - used}G  {used}% /",
            "tmpfs            64M     0   64M   0% /dev",
            f"shm              64M  {rng.randint(0, 9)}.0K   64M   1% /dev/shm",
            f"/dev/nvme0n1p1  100G  {used}G  {100 - used}G  {used}% /etc/hosts",
        ]
    )


def gzip_verbose_output(rng: random.Random, paths: list[str]) -> str:
    """``gzip -v`` lines for each compressed path."""
    return "\n".join(f"{p}:\t {rng.uniform(70, 96):.1f}% -- replaced with {p}.gz" for p in paths)


def log_lines(rng: random.Random, service: str, count: int) -> str:
    """Application log lines with levels, timestamps and request ids."""
    levels = ("INFO", "INFO", "INFO", "WARNING", "ERROR", "DEBUG")
    out = []
    for _ in range(count):
        level = rng.choice(levels)
        noun, verb = rng.choice(vocab.NOUNS), rng.choice(vocab.VERBS)
        msg = {
            "INFO": f"{verb}d {noun} id={rng.randint(1000, 99999)} in {rng.randint(2, 900)}ms",
            "WARNING": f"{noun} queue depth {rng.randint(100, 5000)} above soft limit",
            "ERROR": f"failed to {verb} {noun}: timeout after {rng.randint(5, 60)}s (attempt {rng.randint(1, 5)}/5)",
            "DEBUG": f"cache miss for {noun}:{rng.randint(1, 999)}",
        }[level]
        stamp = f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
        out.append(f"{stamp} {level:<7} [{service}] {msg}")
    return "\n".join(out)


def relative(path: str, cwd: str) -> str:
    """`path` as seen from `cwd` (both absolute)."""
    return posixpath.relpath(path, cwd)
