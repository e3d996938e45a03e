"""The end-to-end figures: default executor vs in-process, Ray scaling, the tokenizer floor, naive and datatrove.

All runs use the same corpus (`bench.corpus`) and the CLI as a subprocess. Within one repetition
the runs that form a ratio follow each other directly; the ratio of each repetition is kept, and a
figure is the median over repetitions with min – max as its spread.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

from bench import peer
from bench.cli_runs import DEDUP_OFF, SFT_ALL, lwm_run, naive_run, write_config
from bench.common import Figure, not_measured, skipped_in_quick, span
from bench.tokenizer_floor import chatml_texts, floor_seconds, read_trajectories

MB = 1_000_000


def _runs(n: int) -> str:
    return f"{n} run" + ("s" if n != 1 else "")


def small_inputs(work: str, inputs: dict[int, str], runs: int, say: Callable[[str], None],
                 naive_size: int = 4 * MB) -> tuple[list[Figure], dict]:
    """Per input size: default `lwm run` / `--executor local` (and at `naive_size` the naive script / default).

    Returns the figures and, per size, the output directory of the last in-process run and the
    executor line the default run printed.
    """
    config = write_config(os.path.join(work, "sft_all_nodedup.toml"), SFT_ALL, DEDUP_OFF)
    figures, naive_figures, info = [], [], {}
    for size, path in sorted(inputs.items()):
        label = f"{size / MB:g} MB"
        default_s, local_s, naive_s = [], [], []
        choice = samples = naive_samples = 0
        for i in range(runs):
            say(f"{label}: run {i + 1}/{runs}")
            default = lwm_run([path], os.path.join(work, f"default-{size}"), config)
            local = lwm_run([path], os.path.join(work, f"local-{size}"), config, "--executor", "local")
            default_s.append(default.seconds)
            local_s.append(local.seconds)
            choice, samples = default.executor_line, local.samples
            if size == naive_size:
                seconds, naive_samples = naive_run([path], os.path.join(work, f"naive-{size}"))
                naive_s.append(seconds)
        info[size] = {"local_out": os.path.join(work, f"local-{size}"), "executor": choice}
        figures.append(Figure(
            f"1. default `lwm run` / `--executor local`, {label} (time)",
            [d / loc for d, loc in zip(default_s, local_s, strict=True)], 1.2, False,
            detail=f"{_runs(runs)}; {samples:,} samples; default {span(default_s)}, local {span(local_s)}; "
                   f"default printed: {choice}"))
        if naive_s:
            naive_figures.append(Figure(
                f"7a. naive script / default `lwm run`, {label} (time)",
                [n / d for n, d in zip(naive_s, default_s, strict=True)], 5.0, True,
                detail=f"{_runs(runs)}; samples naive {naive_samples:,}, lwm {samples:,}; naive {span(naive_s)}, "
                       f"default {span(default_s)}"))
    return figures + naive_figures, info


# the 41 MB runs a quick run makes: in-process with dedup off (the floor ratio) and on; Ray on 1 and 2 CPUs,
# the default executor, the naive script (about 7× the in-process run) and datatrove only in the full run
QUICK_LARGE = ("local", "floor", "dedup")


def large_input(work: str, path: str, size: int, runs: int, say: Callable[[str], None],
                quick: bool = False) -> list[Figure]:
    """Ray scaling, the floor with dedup off and on, naive and datatrove, on the ≥ 40 MB input.

    `quick`: only the floor figures (3a, 3b); the others are `skipped_in_quick` rows.
    """
    off = write_config(os.path.join(work, "sft_all_nodedup.toml"), SFT_ALL, DEDUP_OFF)
    on = write_config(os.path.join(work, "sft_all_dedup.toml"), SFT_ALL)
    label = f"{size / MB:g} MB"
    t: dict[str, list[float]] = {k: [] for k in ("local", "ray1", "ray2", "default", "dedup", "default_dedup",
                                                 "naive", "floor", "datatrove")}
    texts: list[str] = []
    step = None
    notes: dict[str, str] = {}
    has_datatrove = peer.available()
    for i in range(runs):
        say(f"{label}: run {i + 1}/{runs}: local")
        local = lwm_run([path], os.path.join(work, "large-local"), off, "--executor", "local")
        t["local"].append(local.seconds)
        notes["samples"] = f"{local.samples:,}"
        if not texts:
            texts = chatml_texts(read_trajectories(local.out))
            notes["text"] = f"{sum(len(x.encode()) for x in texts) / MB:.1f} MB ChatML text of {len(texts):,} trajectories"
        floor, tokens = floor_seconds(texts)
        t["floor"].append(floor)
        notes["tokens"] = f"{tokens:,} tokens"
        if not quick:
            say(f"{label}: run {i + 1}/{runs}: Ray 1 and 2 CPUs")
            t["ray1"].append(lwm_run([path], os.path.join(work, "large-ray"), off, "--executor", "ray",
                                     "--num-cpus", "1").seconds)
            t["ray2"].append(lwm_run([path], os.path.join(work, "large-ray"), off, "--executor", "ray",
                                     "--num-cpus", "2").seconds)
        say(f"{label}: run {i + 1}/{runs}: default")
        default = lwm_run([path], os.path.join(work, "large-default"), off)
        t["default"].append(default.seconds)
        notes["executor"] = default.executor_line
        say(f"{label}: run {i + 1}/{runs}: dedup on, local and default")
        t["dedup"].append(lwm_run([path], os.path.join(work, "large-dedup"), on, "--executor", "local").seconds)
        t["default_dedup"].append(lwm_run([path], os.path.join(work, "large-default-dedup"), on).seconds)
        if not quick:
            say(f"{label}: run {i + 1}/{runs}: naive script")
            seconds, naive_samples = naive_run([path], os.path.join(work, "large-naive"))
            t["naive"].append(seconds)
            notes["naive_samples"] = f"{naive_samples:,}"
            if has_datatrove:
                say(f"{label}: run {i + 1}/{runs}: datatrove")
                step = step or peer.datatrove_step(os.path.join(work, "large-datatrove"))
                t["datatrove"].append(peer.datatrove_seconds(step, texts))
    n = _runs(runs)
    base = f"{n}; {label}, {notes['samples']} all-turn SFT samples"

    def ratio(a: str, b: str) -> list[float]:
        return [x / y for x, y in zip(t[a], t[b], strict=True)]

    names = {"2a": f"2a. Ray 2 CPUs speed-up over Ray 1 CPU, {label}",
             "2b": f"2b. Ray 2 CPUs speed-up over `--executor local`, {label}",
             "7a": f"7a. naive script / default `lwm run`, {label} (time)",
             "7b": f"7b. datatrove tokenizer step / default `lwm run`, {label} (time)"}
    floor = f"floor: one-thread encode of {notes['text']} ({notes['tokens']}) {span(t['floor'])}"
    chosen = f"default printed: {notes['executor']}"
    floors = [
        Figure(f"3a. pipeline (dedup off, default `lwm run`) / bare tiktoken encode, {label} (time)",
               ratio("default", "floor"), 2.5, False,
               detail=f"{base}; {floor}; default {span(t['default'])}; {chosen}"),
        Figure(f"3a. pipeline (dedup off, `--executor local`, one process) / bare tiktoken encode, {label} (time)",
               ratio("local", "floor"), 2.5, False, detail=f"{base}; {floor}; local {span(t['local'])}"),
        Figure(f"3b. pipeline (dedup on, default `lwm run`) / bare tiktoken encode, {label} (time)",
               ratio("default_dedup", "floor"), 3.5, False,
               detail=f"{base}; exact and near dedup on; default with dedup {span(t['default_dedup'])}; {chosen}"),
        Figure(f"3b. pipeline (dedup on, `--executor local`, one process) / bare tiktoken encode, {label} (time)",
               ratio("dedup", "floor"), 3.5, False,
               detail=f"{base}; exact and near dedup on; local with dedup {span(t['dedup'])}"),
        Figure(f"default `lwm run` speed-up over `--executor local`, {label} (time)",
               ratio("local", "default"), None, True,
               detail=f"{base}, dedup off; local {span(t['local'])}, default {span(t['default'])}; {chosen}"),
    ]
    if quick:
        return [skipped_in_quick(names["2a"], 1.7, True), skipped_in_quick(names["2b"], 1.6, True), *floors,
                skipped_in_quick(names["7a"], 5.0, True), skipped_in_quick(names["7b"], 3.0, True)]
    figures = [
        Figure(names["2a"], ratio("ray1", "ray2"), 1.7, True,
               detail=f"{base}, dedup off; Ray(1) {span(t['ray1'])}, Ray(2) {span(t['ray2'])}"),
        Figure(names["2b"], ratio("local", "ray2"), 1.6, True,
               detail=f"{base}, dedup off; local {span(t['local'])}, Ray(2) {span(t['ray2'])}"),
        *floors,
        Figure(names["7a"], ratio("naive", "default"), 5.0, True,
               detail=f"{base}, dedup off; naive {span(t['naive'])} ({notes['naive_samples']} samples), "
                      f"default {span(t['default'])}; default printed: {notes['executor']}"),
    ]
    if has_datatrove:
        figures.append(Figure(
            names["7b"], ratio("datatrove", "default"), 3.0,
            True, detail=f"{n}; datatrove tokenizes the {notes['text']} (in memory, warmed up) "
                         f"{span(t['datatrove'])}; `lwm run` does the whole all-turn SFT run from the JSONL "
                         f"{span(t['default'])}"))
    else:
        figures.append(not_measured(names["7b"], 3.0, True, "datatrove is not installed (make bench installs it)"))
    return figures


_STARTED = time.perf_counter()


def say(msg: str) -> None:
    """A progress line with the seconds since the harness started (what each step costs)."""
    print(f"[bench {time.perf_counter() - _STARTED:5.0f} s] {msg}", file=sys.stderr, flush=True)
