"""``python -m bench [--quick]``: run the benchmarks and rewrite bench/RESULTS.md.

End-to-end figures run the CLI on inputs of 1, 4 and 10 MB (default executor against
``--executor local``, the naive script on 4 MB) and on 41 MB (in-process with dedup off and on against
the bare tiktoken floor; in the full run also Ray on 1 and 2 CPUs, the default executor, the naive
script and datatrove's tokenizer step); then the in-process figures (expansion, loader, signatures).

The full run (``make bench``) repeats the small inputs 5 times and the 41 MB input 3 times. The quick
run (``make bench-quick``, under 5 minutes on a quiet 2-core machine plus building the cached corpus on
first use) runs each small input once and at 41 MB only the two floor figures; every row says which
run measured it, and the rows a quick run skips are carried over from the results file it rewrites
(with their run and date) or say "not measured in quick mode". The sections other commands write
into RESULTS.md (``python -m bench.large_run``, ``python -m bench.loss_memory --write``) are kept.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from bench import cli_runs, corpus, dedup, expansion, loader, targets
from bench.common import not_measured
from bench.profile import profile_pipeline, run_config
from bench.results import carry_over, render_results
from bench.targets import MB, say

RESULTS = os.path.join(os.path.dirname(__file__), "RESULTS.md")

# repetitions on the 1/4/10 MB inputs, on the large input, and of the in-process figures
RUNS = {"quick": (1, 1, 3), "full": (5, 3, 5)}
SMALL_SIZES = (1 * MB, 4 * MB, 10 * MB)  # the naive script runs on the middle one
LARGE_SIZE = 41 * MB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="1 run of each small input, only the floor figures at 41 MB (under 5 minutes on 2 cores)")
    parser.add_argument("--large-mb", type=float, default=LARGE_SIZE / MB, help="size of the large input (≥ 40)")
    parser.add_argument("--small-mb", type=float, nargs=3, default=[s / MB for s in SMALL_SIZES],
                        help="the three small input sizes (the naive script runs on the middle one)")
    parser.add_argument("--results", default=RESULTS, help="the results file to rewrite")
    parser.add_argument("--corpus", choices=("real", "demo"), default=None,
                        help="real trajectories of ../shared/data replicated (default when present), or the demo")
    parser.add_argument("--runs", type=int, nargs=3, metavar=("SMALL", "LARGE", "IN_PROCESS"),
                        help="repetitions instead of the mode's (a smoke test of the harness: 1 1 1)")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    started = time.perf_counter()
    small_runs, large_runs, runs = args.runs or RUNS[mode]
    large_size = int(args.large_mb * MB)
    kind = args.corpus or ("real" if os.path.isdir(corpus.shared_data_dir()) else "demo")
    say(f"{kind} corpus of {large_size / MB:g} MB (cached in {corpus.cache_dir()})")
    big = corpus.cached_real_corpus(large_size) if kind == "real" else corpus.cached_corpus(large_size)
    description = corpus.REAL_DESCRIPTION if kind == "real" else corpus.DESCRIPTION
    profiles: dict[str, str] = {}
    cli_runs.compile_checkout()
    with tempfile.TemporaryDirectory(prefix="lwm-bench-") as work:
        inputs = {}
        sizes = [int(mb * MB) for mb in args.small_mb]
        for size in sizes:
            inputs[size] = os.path.join(work, f"corpus-{size}.jsonl")
            corpus.prefix(big, inputs[size], size)
        say(f"default executor vs in-process, naive on {sizes[1] / MB:g} MB")
        figures, info = _guarded(lambda: targets.small_inputs(work, inputs, small_runs, say, naive_size=sizes[1]),
                                 "1–7a. small inputs", ([], {}))
        say(f"{large_size / MB:g} MB: " + ("floor, dedup on" if args.quick else "Ray scaling, floor, naive, datatrove"))
        figures += _guarded(lambda: targets.large_input(work, big, large_size, large_runs, say, quick=args.quick),
                            f"2–7b. {large_size / MB:g} MB input", [])
        say("expansion, loader, signatures")
        others = expansion.run((5, 10, 20, 40), 8, runs)
        if sizes[1] in info:
            others.append(loader.run(info[sizes[1]]["local_out"], runs, pool="sft"))
        others.extend(dedup.run(500 if args.quick else 2000, runs))
        missed = [f for f in figures if f.name.startswith("3") and f.met is False]
        if missed:
            say(f"profile of an in-process run on {sizes[1] / MB:g} MB (floor target missed)")
            for fig in missed:
                dedup_on = fig.name.startswith("3b")
                cfg = run_config([inputs[sizes[1]]], os.path.join(work, "profile"), dedup=dedup_on)
                name = f"{fig.name.split('/')[0].strip()}: in-process run on {sizes[1] / MB:g} MB"
                profiles[name] = profile_pipeline(cfg)
    command = "python -m bench" + (" --quick" if args.quick else "")
    previous = Path(args.results).read_text(encoding="utf-8") if os.path.exists(args.results) else ""
    date = time.strftime("%Y-%m-%d", time.gmtime())
    for fig in [*figures, *others]:
        if fig.ratios:
            fig.measured = f"{mode} {date}"
    figures = carry_over(figures, previous)
    wall = time.perf_counter() - started
    reps = (f"{small_runs} on {sizes[0] / MB:g}–{sizes[2] / MB:g} MB, {large_runs} on {large_size / MB:g} MB, "
            f"{runs} for the in-process figures")
    text = render_results(figures, command, reps, profiles, corpus=f"{description}; the "
                          f"{', '.join(f'{s / MB:g}' for s in sizes)} MB "
                          f"inputs are prefixes of the {large_size / MB:g} MB file", previous=previous,
                          other_figures=others, date=date, wall=f"{wall:,.0f} s ({mode})")
    Path(args.results).write_text(text, encoding="utf-8")
    say(f"wrote {args.results} ({mode} run, {wall:,.0f} s)")
    return 0


def _guarded(fn, name: str, empty):
    """`fn()`, or `empty` plus a "not measured" row naming the error when a run of the group failed."""
    try:
        return fn()
    except Exception as exc:  # one failed group must not lose the other groups' figures
        say(f"{name} failed: {exc}")
        row = not_measured(name, None, True, f"a run failed: {str(exc).splitlines()[0][:200]}")
        if isinstance(empty, tuple):
            return [row, *empty[0]], empty[1]
        return [row, *empty]


if __name__ == "__main__":
    raise SystemExit(main())
