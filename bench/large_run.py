"""``python -m bench.large_run [--gb 2] [--small-gb 0.2]``: peak RSS per Ray worker on a large input.

Generates one JSONL file of the demo corpus at scale (all seven domains, many seeds) in a temporary
directory, runs ``lwm run --executor ray --num-cpus 2`` on it while sampling the resident memory of
the driver and every process below it every 0.5 s, does the same for a file of `--small-gb`, and
writes ``bench/LARGE_RUN.md`` (which ``python -m bench`` copies into RESULTS.md). Inputs and outputs
are deleted afterwards. It takes about 30 minutes for 2 GB on two cores, so it is not part of
``make bench-quick``.
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

from pipeline.demo import generate

HERE = os.path.dirname(__file__)
OUT_FILE = os.path.join(HERE, "LARGE_RUN.md")
DOMAINS = ("mcp", "search", "terminal", "swe", "android", "web", "os")


def write_corpus(path: str, target_bytes: int) -> tuple[int, int]:
    """Demo trajectories of every domain, seed after seed, until `target_bytes`; ids made unique."""
    written = count = seed = 0
    with open(path, "w") as f:
        while written < target_bytes:
            for domain in DOMAINS:
                for traj in generate(domain, seed=seed, n=240):
                    traj["traj_id"] = f"{traj['traj_id']}-s{seed}"
                    line = json.dumps(traj, ensure_ascii=False, sort_keys=True) + "\n"
                    f.write(line)
                    written += len(line.encode())
                    count += 1
            seed += 1
    return count, written


def run_sampled(cmd: list[str]) -> tuple[int, float, list[tuple[float, str]]]:
    """Run `cmd`, sampling RSS of it and its descendants; (exit code, wall s, [(peak MiB, name)])."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    start = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak: dict[int, int] = {}
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
                peak[p.pid] = max(peak.get(p.pid, 0), rss)
                names.setdefault(p.pid, set()).add(name)
            time.sleep(0.5)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    _, err = proc.communicate()
    done.set()
    thread.join()
    if proc.returncode:
        print(err[-3000:], file=sys.stderr)
    rows = sorted(((peak[p] / 2**20, ", ".join(sorted(names[p]))) for p in peak), reverse=True)
    return proc.returncode, time.time() - start, rows


def measure(work: str, gb: float) -> dict:
    inp, out = os.path.join(work, f"in-{gb}"), os.path.join(work, f"out-{gb}")
    os.makedirs(inp)
    count, size = write_corpus(os.path.join(inp, "corpus.jsonl"), int(gb * 1e9))
    config = os.path.join(work, "recycle.toml")
    with open(config, "w") as f:  # what "auto" picks for inputs ≥ 256 MiB, forced so both sizes compare alike
        f.write("[executor]\nmax_tasks_per_worker = 1\n")
    cmd = [os.path.join(os.path.dirname(sys.executable), "lwm"), "run", "-i", inp, "-o", out,
           "--executor", "ray", "--num-cpus", "2", "--progress", "off", "--config", config]
    rc, wall, rows = run_sampled(cmd)
    timings = {}
    if rc == 0:
        with open(os.path.join(out, "_timings.json")) as f:
            timings = json.load(f)
    workers = [mib for mib, name in rows if "run_row" in name][:2]
    driver = next((mib for mib, name in rows if name == "lwm"), 0.0)
    shutil.rmtree(inp, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    return {"gb": gb, "trajectories": count, "bytes": size, "rc": rc, "wall": wall, "workers": workers,
            "driver": driver, "timings": timings}


def render(small: dict, large: dict) -> str:
    lines = [
        "## Large input on Ray (`python -m bench.large_run`)",
        "",
        "One generated JSONL file (demo corpus of all seven domains at scale), `lwm run --executor ray "
        "--num-cpus 2` with `executor.max_tasks_per_worker = 1` (what the default `auto` chooses from "
        "256 MiB of input), resident memory of every process sampled every 0.5 s. Each row lists the "
        "two largest worker processes.",
        "",
        "| input | trajectories | exit | wall | peak RSS per worker | driver |",
        "|---|---|---|---|---|---|",
    ]
    for m in (small, large):
        workers = ", ".join(f"{w:,.0f} MiB" for w in m["workers"]) or "—"
        lines.append(f"| {m['bytes'] / 1e9:.2f} GB | {m['trajectories']:,} | {m['rc']} | {m['wall']:,.0f} s "
                     f"| {workers} | {m['driver']:,.0f} MiB |")
    ratio = max(large["workers"] or [0]) / max(max(small["workers"] or [1]), 1)
    verdict = "met" if max(large["workers"] or [0]) < 2048 else "not met"
    flat = "met" if ratio <= 1.2 else "not met"
    lines += [
        "",
        f"- Issue target, peak worker RSS under 2 GiB on {large['bytes'] / 1e9:.1f} GB: **{verdict}**.",
        f"- SPEC §11 flatness, {large['bytes'] / small['bytes']:.0f}× more input → ≤ 1.2× peak worker RSS: "
        f"{ratio:.2f}× — **{flat}**.",
        "",
        "Stage seconds of the large run: "
        + ", ".join(f"{k} {v['seconds']:,.0f}" for k, v in large["timings"].items()),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.large_run", description=__doc__)
    parser.add_argument("--gb", type=float, default=2.0)
    parser.add_argument("--small-gb", type=float, default=0.2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lwm-large-") as work:
        small = measure(work, args.small_gb)
        large = measure(work, args.gb)
    text = render(small, large)
    with open(OUT_FILE, "w") as f:
        f.write(text)
    print(text)
    return 0 if small["rc"] == 0 and large["rc"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
