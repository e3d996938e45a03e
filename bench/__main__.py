"""``python -m bench [--quick]``: run every benchmark and rewrite bench/RESULTS.md.

The sections other commands write into RESULTS.md (``python -m bench.large_run``,
``python -m bench.loss_memory --write``) are kept as they are.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from bench import corpus, dedup, expansion, loader, targets
from bench.profile import profile_pipeline, run_config
from bench.results import render_results
from bench.targets import MB, say

RESULTS = os.path.join(os.path.dirname(__file__), "RESULTS.md")

# repetitions on the 1/4/10 MB inputs, on the large input, and of the in-process figures
RUNS = {"quick": (3, 1, 3), "full": (5, 3, 5)}
SMALL_SIZES = (1 * MB, 4 * MB, 10 * MB)
LARGE_SIZE = 41 * MB


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="3 runs of the small inputs, 1 of the 41 MB input (under 5 minutes on 2 cores)")
    parser.add_argument("--large-mb", type=float, default=LARGE_SIZE / MB, help="size of the large input (≥ 40)")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    small_runs, large_runs, runs = RUNS[mode]
    large_size = int(args.large_mb * MB)
    say(f"corpus of {large_size / MB:g} MB (cached in {corpus.cache_dir()})")
    big = corpus.cached_corpus(large_size)
    profiles: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="lwm-bench-") as work:
        inputs = {}
        for size in SMALL_SIZES:
            inputs[size] = os.path.join(work, f"corpus-{size}.jsonl")
            corpus.prefix(big, inputs[size], size)
        say("default executor vs in-process, naive on 4 MB")
        figures, info = targets.small_inputs(work, inputs, small_runs, say)
        say(f"{large_size / MB:g} MB: Ray scaling, floor, naive, datatrove")
        figures += targets.large_input(work, big, large_size, large_runs, say)
        say("expansion, loader, signatures")
        others = expansion.run((5, 10, 20, 40), 8, runs)
        others.append(loader.run(info[4 * MB]["local_out"], runs, pool="sft"))
        others.append(dedup.run(500 if args.quick else 2000, runs))
        missed = [f for f in figures if f.name.startswith("3") and f.met is False]
        if missed:
            say("profile of an in-process run on 4 MB (floor target missed)")
            for fig in missed:
                dedup_on = fig.name.startswith("3b")
                cfg = run_config([inputs[4 * MB]], os.path.join(work, "profile"), dedup=dedup_on)
                profiles[f"{fig.name.split('/')[0].strip()}: in-process run on 4 MB"] = profile_pipeline(cfg)
    command = "python -m bench" + (" --quick" if args.quick else "")
    previous = Path(RESULTS).read_text(encoding="utf-8") if os.path.exists(RESULTS) else ""
    reps = f"{small_runs} on 1–10 MB, {large_runs} on {large_size / MB:g} MB, {runs} for the in-process figures"
    text = render_results(figures, command, reps, profiles, corpus=f"{corpus.DESCRIPTION}; the 1, 4 and 10 MB "
                          f"inputs are prefixes of the {large_size / MB:g} MB file", previous=previous,
                          other_figures=others)
    Path(RESULTS).write_text(text, encoding="utf-8")
    say(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
