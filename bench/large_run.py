"""``python -m bench.large_run [--gb 2] [--small-gb 0.2]``: the whole pipeline on a large input, on Ray.

Runs ``lwm run --executor ray --num-cpus 2`` with default settings otherwise (all pools, dedup on)
on the benchmark corpus (`bench.corpus`: generated trajectories of all seven demo domains) at
`--gb` and at `--small-gb` (a prefix of the same file), sampling the resident memory of the driver
and of every process below it every 0.5 s. It reports wall time, per-stage seconds (the run's
``_timings.json``), the share of the dedup stages in the wall time, the driver's peak RSS and the
peak RSS of the two largest Ray worker processes at both sizes (their ratio is the flatness
figure), and replaces its section of bench/RESULTS.md. The large file is cached (see
`bench.corpus`; generating 2 GB takes longer than the run); outputs are deleted afterwards.
It is not part of ``make bench-quick``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from bench import corpus
from bench.cli_runs import cli_env, compile_checkout
from bench.results import LARGE_HEADING, replace_section

RESULTS = os.path.join(os.path.dirname(__file__), "RESULTS.md")
GB = 1_000_000_000
# Targets: dedup share of wall, driver peak RSS (MiB), worker RSS growth for 10× input, wall at 2 GB (s)
DEDUP_SHARE, DRIVER_MIB, FLAT, WALL_S = 0.25, 600, 1.2, 300


def run_sampled(cmd: list[str]) -> tuple[int, int, float, dict[int, float], dict[int, set[str]], str]:
    """Run `cmd`, sampling RSS of it and its descendants.

    Returns (its pid, exit code, wall s, peak MiB per pid, process names per pid, stderr).
    """
    start = time.time()
    proc = subprocess.Popen(cmd, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak: dict[int, float] = {}
    names: dict[int, set[str]] = {}
    done = threading.Event()

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for p in procs:
                try:
                    rss, name = p.memory_info().rss, p.name()
                except psutil.Error:
                    continue
                peak[p.pid] = max(peak.get(p.pid, 0.0), rss / 2**20)
                names.setdefault(p.pid, set()).add(name)
            time.sleep(0.5)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    _, err = proc.communicate()
    done.set()
    thread.join()
    return proc.pid, proc.returncode, time.time() - start, peak, names, err


# Ray's own processes that also take a ``ray::`` name: idle workers, agents and internal actors
NOT_WORKERS = ("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent", "ray::_")


def is_worker(names: set[str]) -> bool:
    """A Ray worker that ran a pipeline task: named ``ray::<task or actor>`` at some sample, not Ray's own."""
    return any(n.startswith("ray::") and not n.startswith(NOT_WORKERS) for n in names)


def summarize(rc: int, wall: float, peak: dict[int, float], names: dict[int, set[str]], driver_pid: int,
              timings: dict) -> dict:
    """The figures of one run: wall, stage seconds, dedup share, driver and the two largest workers' peak RSS."""
    top = sorted(((mib, pid) for pid, mib in peak.items() if is_worker(names.get(pid, set()))), reverse=True)[:2]
    workers = [mib for mib, _ in top]
    worker_names = [", ".join(sorted(names[pid] - {"ray::IDLE"})) for _, pid in top]
    stages = {k: float(v["seconds"]) for k, v in timings.items()}
    dedup = sum(s for k, s in stages.items() if k.startswith("dedup"))
    return {"rc": rc, "wall": wall, "stages": stages, "dedup_share": dedup / wall if wall else 0.0,
            "driver": peak.get(driver_pid, 0.0), "workers": workers, "worker_names": worker_names}


def measure(work: str, path: str, label: str) -> dict:
    out = os.path.join(work, f"out-{label}")
    cmd = [sys.executable, "-m", "pipeline.cli", "run", "-i", path, "-o", out, "--executor", "ray",
           "--num-cpus", "2", "--progress", "off"]
    driver, rc, wall, peak, names, err = run_sampled(cmd)
    timings = {}
    if rc == 0:
        with open(os.path.join(out, "_timings.json")) as f:
            timings = json.load(f)
    else:
        print(err[-3000:], file=sys.stderr)
    shutil.rmtree(out, ignore_errors=True)
    result = summarize(rc, wall, peak, names, driver, timings)
    result.update(bytes=os.path.getsize(path), trajectories=corpus.count_lines(path))
    return result


def _gb(size: float) -> str:
    """A size in GB with two significant digits at least (0.005 GB, 0.2 GB, 2.0 GB)."""
    return f"{size / GB:.2g} GB" if size < GB else f"{size / GB:.1f} GB"


def _met(ok: bool) -> str:
    return "met" if ok else "not met"


def render(small: dict, large: dict, description: str = corpus.DESCRIPTION) -> str:
    stage_names = sorted({*small["stages"], *large["stages"]})
    lines = [
        LARGE_HEADING,
        "",
        "`lwm run --executor ray --num-cpus 2`, default settings otherwise (all pools, dedup on), on "
        f"{description}; the small input is a prefix of the large one. Resident memory of the driver "
        "and of every process below it sampled every 0.5 s; workers are the two largest Ray worker processes.",
        "",
        "| input | trajectories | exit | wall | " + " | ".join(stage_names) + " | dedup share | driver peak RSS "
        "| peak RSS per worker |",
        "|---|---|---|---|" + "---|" * len(stage_names) + "---|---|---|",
    ]
    for m in (small, large):
        stages = " | ".join(f"{m['stages'][s]:,.1f} s" if s in m["stages"] else "—" for s in stage_names)
        workers = ", ".join(f"{w:,.0f} MiB" for w in m["workers"]) or "—"
        lines.append(f"| {_gb(m['bytes'])} | {m['trajectories']:,} | {m['rc']} | {m['wall']:,.1f} s | {stages} "
                     f"| {m['dedup_share']:.0%} | {m['driver']:,.0f} MiB | {workers} |")
    lines += ["", "Worker processes measured (names they took): "
              + "; ".join(f"{_gb(m['bytes'])}: " + " / ".join(m.get("worker_names") or ["none"])
                          for m in (small, large))]
    flat = max(large["workers"] or [0]) / max(max(small["workers"] or [0]), 1e-9)
    scale = large["bytes"] / small["bytes"]
    lines += [
        "",
        "| target | measured | target | result |",
        "|---|---|---|---|",
        f"| 4. dedup stages' share of wall, {_gb(large['bytes'])} | {large['dedup_share']:.0%} | "
        f"≤ {DEDUP_SHARE:.0%} | {_met(large['dedup_share'] <= DEDUP_SHARE)} |",
        f"| 4. driver peak RSS, {_gb(large['bytes'])} | {large['driver']:,.0f} MiB | ≤ {DRIVER_MIB} MiB | "
        f"{_met(large['driver'] <= DRIVER_MIB)} |",
        f"| 5. peak RSS per worker, {scale:.0f}× input | {flat:.2f}× | ≤ {FLAT:.1f}× | {_met(flat <= FLAT)} |",
        f"| 6. wall, {_gb(large['bytes'])} on {os.cpu_count()} cores | {large['wall']:,.0f} s | "
        f"≤ {WALL_S} s | {_met(large['wall'] <= WALL_S and large['rc'] == 0)} |",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.large_run", description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.0)
    parser.add_argument("--small-gb", type=float, default=0.2)
    parser.add_argument("--results", default=RESULTS, help="the results file whose section to replace")
    parser.add_argument("--corpus", choices=("demo", "real"), default="demo",
                        help="generated demo trajectories (default) or the sample data replicated")
    args = parser.parse_args(argv)
    print(f"{args.corpus} corpus of {args.gb:g} GB (cached in {corpus.cache_dir()})", file=sys.stderr)
    size = int(args.gb * GB)
    big = corpus.cached_corpus(size) if args.corpus == "demo" else corpus.cached_real_corpus(size)
    compile_checkout()
    with tempfile.TemporaryDirectory(prefix="lwm-large-") as work:
        small_path = os.path.join(work, "small.jsonl")
        corpus.prefix(big, small_path, int(args.small_gb * GB))
        small = measure(work, small_path, "small")
        os.remove(small_path)
        large = measure(work, big, "large")
    text = render(small, large, corpus.DESCRIPTION if args.corpus == "demo" else corpus.REAL_DESCRIPTION)
    replace_section(args.results, text)
    print(text)
    return 0 if small["rc"] == 0 and large["rc"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
