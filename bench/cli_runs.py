"""End-to-end wall times: ``lwm run`` and the naive script as subprocesses, as a user runs them.

Every run writes into a fresh output directory; its wall time includes interpreter start-up,
imports and (for Ray) starting the Ray instance, which is what a user waits for.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

# all-turn SFT only, dedup off: the run the executor and naive comparisons use
SFT_ALL = {"pools": {"sft_turns": "all"}, "pools.ratios": {"cpt": 0.0, "sft": 1.0, "rl": 0.0, "eval": 0.0}}
DEDUP_OFF = {"dedup": {"exact": False, "near": False}}


@dataclass
class CliRun:
    seconds: float
    stderr: str
    out: str

    @property
    def executor_line(self) -> str:
        return executor_choice(self.stderr)

    @property
    def samples(self) -> int:
        return samples_written(self.stderr)


def write_config(path: str, *sections: dict[str, dict]) -> str:
    """A TOML config of the given ``{section: {key: value}}`` maps (strings, numbers, booleans)."""
    merged: dict[str, dict] = {}
    for part in sections:
        for name, values in part.items():
            merged.setdefault(name, {}).update(values)
    lines = []
    for name, values in merged.items():
        lines.append(f"[{name}]")
        for key, value in values.items():
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, str):
                text = f'"{value}"'
            else:
                text = repr(value)
            lines.append(f"{key} = {text}")
        lines.append("")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return path


def cli_env() -> dict[str, str]:
    """This environment without RAY_ADDRESS (a fresh local Ray), with this checkout first on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    return env


PACKAGES = ("schemas", "masking", "stages", "pipeline", "training", "bench")


def compile_checkout() -> None:
    """Byte-compile this checkout's packages, as installing a wheel does.

    The checkout is installed in editable mode; where ``PYTHONDONTWRITEBYTECODE`` is set (as on the
    benchmark machines) every CLI run would otherwise compile the project's modules again (about
    0.3 s of each run's start-up), which no installed copy pays.
    """
    import compileall

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for package in PACKAGES:
        compileall.compile_dir(os.path.join(root, package), quiet=1)


def lwm_run(inputs: list[str], out: str, config: str, *flags: str, attempts: int = 2) -> CliRun:
    """Wall seconds of one ``lwm run`` (``python -m pipeline.cli run``) into a fresh `out`.

    A failed run is tried again (up to `attempts` in all; on a loaded machine a local Ray can time
    out while starting); only a successful run's time is returned.
    """
    cmd = [sys.executable, "-m", "pipeline.cli", "run", "-o", out, "--config", config, "--progress", "off", *flags]
    for path in inputs:
        cmd += ["-i", path]
    for attempt in range(attempts):
        if os.path.exists(out):
            shutil.rmtree(out)
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=cli_env(), check=False)
        seconds = time.perf_counter() - start
        if proc.returncode == 0:
            return CliRun(seconds, proc.stderr, out)
        print(f"[bench] lwm run {' '.join(flags) or '(defaults)'} failed (attempt {attempt + 1}): {proc.stderr.strip()[-300:]}",
              file=sys.stderr, flush=True)
    raise RuntimeError(f"lwm run {' '.join(flags)} failed ({proc.returncode}): {proc.stderr[-2000:]}")


def naive_run(inputs: list[str], out: str) -> tuple[float, int]:
    """Wall seconds and sample count of the naive script (``python -m bench.naive``) into a fresh `out`."""
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    cmd = [sys.executable, "-m", "bench.naive", os.path.join(out, "samples.parquet"), *inputs]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=cli_env(), check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"naive script failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds, int(proc.stdout.split()[-1])


def executor_choice(stderr: str) -> str:
    """The first line a run printed about its executor, or a note that it printed none."""
    for line in stderr.splitlines():
        if re.search(r"\bexecutor\b", line, re.IGNORECASE):
            return line.strip()
    return "(no executor line printed)"


def samples_written(stderr: str) -> int:
    """Samples of every pool from the run summary line ``samples: cpt N, sft N, ...`` (0 when absent)."""
    for line in stderr.splitlines():
        if line.startswith("samples:"):
            return sum(int(n.replace(",", "")) for n in re.findall(r"\b\w+ ([\d,]+)", line))
    return 0
