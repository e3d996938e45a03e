"""``python -m bench.scaling [--mb 41 82 164 328] [--runs 1]``: Ray's speed-up as the input grows, and this machine's ceiling.

Figures 2a and 2b of bench/RESULTS.md are measured on 41 MB, where Ray's fixed cost (its own processes
starting, the workers' imports and tokenizer) is a large share of the run. This command measures both
ratios at growing sizes of the same real-trajectory corpus (all-turn SFT, dedup off, as 2a/2b), up to 328 MB,
the first size at which the default executor is Ray:
``lwm run --executor local``, then Ray with 1 CPU and with 2 CPUs, then two forked worker processes
(``--executor processes``, what the default runs below its Ray threshold), back to back, `--runs` times per
size (medians of the per-run ratios). It also measures what a second process is worth on this machine
at all: the tokenizer floor of figure 3a (one-thread tiktoken encode of the corpus's ChatML text) in one
process, then in two processes at once, each encoding all of it; no executor can make two workers worth
more than that. It replaces its section of bench/RESULTS.md; corpora are cached (`bench.corpus`). It is
not part of ``make bench-quick``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench import corpus
from bench.cli_runs import DEDUP_OFF, SFT_ALL, cli_env, compile_checkout, lwm_run, write_config
from bench.common import span
from bench.results import SCALING_HEADING, replace_section

RESULTS = os.path.join(os.path.dirname(__file__), "RESULTS.md")
MB = 1_000_000
RAY_OVER_ONE, RAY_OVER_LOCAL = 1.7, 1.6  # targets 2a and 2b


def _say(msg: str) -> None:
    print(f"[scaling] {msg}", file=sys.stderr, flush=True)


# --- the ceiling: one process encoding, then two at once ---------------------------------------------------


def encode_child(texts_path: str) -> None:
    """In a child process: load the tokenizer and the texts, say ``ready``, wait for a line, encode every text
    once (one thread) and print the seconds it took."""
    from stages.tokenizer import load_tokenizer

    with open(texts_path, encoding="utf-8") as f:
        texts = json.load(f)
    tok = load_tokenizer()
    tok.encode("warm up")
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.perf_counter()
    for text in texts:
        tok.encode(text)
    print(f"{time.perf_counter() - start:.6f}", flush=True)


def encode_seconds(texts_path: str, processes: int) -> list[float]:
    """Seconds each of `processes` child processes took to encode the texts, all started at the same moment."""
    cmd = [sys.executable, "-m", "bench.scaling", "--encode-child", texts_path]
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=cli_env())
             for _ in range(processes)]
    try:
        for p in procs:  # everything loaded in every child before any starts encoding
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("an encoding child process failed to start")
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        seconds = [float(p.stdout.readline()) for p in procs]
    finally:
        for p in procs:
            p.wait()
    return seconds


def ceiling(texts_path: str, runs: int) -> dict:
    """Throughput of two processes at once over one: ``2 × one / slowest of two``, per run."""
    ratios, ones, twos = [], [], []
    for i in range(runs):
        _say(f"ceiling: run {i + 1}/{runs}")
        one = encode_seconds(texts_path, 1)[0]
        two = max(encode_seconds(texts_path, 2))
        ones.append(one)
        twos.append(two)
        ratios.append(2 * one / two)
    return {"ratios": ratios, "one": ones, "two": twos}


# --- the runs ------------------------------------------------------------------------------------------------


def measure_size(work: str, path: str, runs: int) -> dict:
    """The three runs of one size, `runs` times; its last in-process run's output stays in ``work/local``."""
    config = write_config(os.path.join(work, "sft_all_nodedup.toml"), SFT_ALL, DEDUP_OFF)
    t: dict[str, list[float]] = {"local": [], "ray1": [], "ray2": [], "processes": []}
    samples = 0
    label = f"{os.path.getsize(path) / MB:.0f} MB"
    for i in range(runs):
        _say(f"{label}: run {i + 1}/{runs}: local, Ray 1 CPU, Ray 2 CPUs, 2 worker processes")
        local = lwm_run([path], os.path.join(work, "local"), config, "--executor", "local")
        samples = local.samples
        t["local"].append(local.seconds)
        t["ray1"].append(lwm_run([path], os.path.join(work, "ray"), config, "--executor", "ray",
                                 "--num-cpus", "1").seconds)
        t["ray2"].append(lwm_run([path], os.path.join(work, "ray"), config, "--executor", "ray",
                                 "--num-cpus", "2").seconds)
        t["processes"].append(lwm_run([path], os.path.join(work, "processes"), config, "--executor", "processes",
                                      "--num-cpus", "2").seconds)
    return {"bytes": os.path.getsize(path), "samples": samples, **t,
            "2a": [a / b for a, b in zip(t["ray1"], t["ray2"], strict=True)],
            "2b": [a / b for a, b in zip(t["local"], t["ray2"], strict=True)],
            "pl": [a / b for a, b in zip(t["local"], t["processes"], strict=True)],
            "pr": [a / b for a, b in zip(t["ray2"], t["processes"], strict=True)]}


def chatml_text_file(work: str) -> tuple[str, float]:
    """The ChatML text of the trajectories the last in-process run (``work/local``) kept (figure 3a's floor
    text), as a JSON list in a file; and its size in MB."""
    from bench.tokenizer_floor import chatml_texts, read_trajectories

    texts = chatml_texts(read_trajectories(os.path.join(work, "local")))
    out = os.path.join(work, "texts.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False)
    return out, sum(len(x.encode()) for x in texts) / MB


# --- the section ---------------------------------------------------------------------------------------------


def _ratio(xs: list[float], target: float) -> str:
    median = statistics.median(xs)
    spread = f" ({min(xs):.2f}–{max(xs):.2f})" if len(xs) > 1 else ""
    return f"{median:.2f}×{spread} {'met' if median >= target else 'not met'}"


def _plain(xs: list[float]) -> str:
    spread = f" ({min(xs):.2f}–{max(xs):.2f})" if len(xs) > 1 else ""
    return f"{statistics.median(xs):.2f}×{spread}"


def render(sizes: list[dict], top: dict, text_mb: float, runs: int) -> str:
    lines = [
        SCALING_HEADING,
        "",
        f"All-turn SFT, dedup off (as figures 2a/2b), on {corpus.REAL_DESCRIPTION}; each larger input "
        f"replicates the same trajectories further. Per size, {runs} run(s) of `lwm run --executor local`, "
        "`--executor ray --num-cpus 1` and `--num-cpus 2`, and `--executor processes --num-cpus 2`, back to back; "
        "ratios are medians of per-run ratios (spread in brackets). The last two columns have no target: they "
        "say what two forked workers give over one process, and over Ray's two workers.",
        "",
        f"| input | samples | local | Ray 1 CPU | Ray 2 CPUs | 2 worker processes | 2a. Ray 2 / Ray 1 "
        f"(≥ {RAY_OVER_ONE:.2f}×) | 2b. Ray 2 / local (≥ {RAY_OVER_LOCAL:.2f}×) | processes / local "
        "| processes / Ray 2 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in sizes:
        lines.append(f"| {m['bytes'] / MB:.0f} MB | {m['samples']:,} | {span(m['local'], 1)} | {span(m['ray1'], 1)} "
                     f"| {span(m['ray2'], 1)} | {span(m['processes'], 1)} | {_ratio(m['2a'], RAY_OVER_ONE)} "
                     f"| {_ratio(m['2b'], RAY_OVER_LOCAL)} | {_plain(m['pl'])} | {_plain(m['pr'])} |")
    ratio = statistics.median(top["ratios"])
    lines += [
        "",
        f"**This machine's ceiling: {ratio:.2f}×** ({min(top['ratios']):.2f}–{max(top['ratios']):.2f}, "
        f"{len(top['ratios'])} runs). Two processes at once each encoded the {text_mb:.1f} MB ChatML text of the "
        f"smallest input (one-thread tiktoken, figure 3a's floor) in {span(top['two'], 1)}, against "
        f"{span(top['one'], 1)} for one process alone: a second process adds that much throughput to pure "
        "tokenizer work here, the upper bound of what a second Ray worker can give.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[41, 82, 164, 328], help="input sizes in MB")
    parser.add_argument("--runs", type=int, default=1, help="runs per size")
    parser.add_argument("--ceiling-runs", type=int, default=3)
    parser.add_argument("--results", default=RESULTS, help="the results file whose section to replace")
    parser.add_argument("--encode-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.encode_child:
        encode_child(args.encode_child)
        return 0
    compile_checkout()
    paths = [corpus.cached_real_corpus(int(mb * MB)) for mb in sorted(args.mb)]
    with tempfile.TemporaryDirectory(prefix="lwm-scaling-") as work:
        sizes = [measure_size(work, paths[0], args.runs)]
        texts, text_mb = chatml_text_file(work)  # the smallest input's, from its in-process run
        sizes += [measure_size(work, p, args.runs) for p in paths[1:]]
        top = ceiling(texts, args.ceiling_runs)
    text = render(sizes, top, text_mb, args.runs)
    replace_section(args.results, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
