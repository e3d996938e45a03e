"""``python -m bench [--quick]``: run every benchmark and rewrite bench/RESULTS.md."""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile

from bench import dedup, expansion, loader, naive, peer, processes, tokenizer_floor
from bench.profile import profile_pipeline
from bench.results import render_results
from pipeline.config import resolve

RESULTS = os.path.join(os.path.dirname(__file__), "RESULTS.md")

# (trajectories for figures 1/2, expansion count, memory 1× size, Ray trajectories and files, runs)
SIZES = {"quick": (120, 8, 40, 320, 4, 3), "full": (480, 20, 100, 1200, 8, 5)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small inputs, 3 runs (under 5 minutes on 2 cores)")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    n_floor, n_exp, n_mem, n_ray, ray_files, runs = SIZES[mode]
    figures, profiles = [], {}
    with tempfile.TemporaryDirectory(prefix="lwm-bench-") as work:
        _say("1. tokenizer floor")
        floor, out = tokenizer_floor.run(work, n_floor, runs)
        figures.append(floor)
        _say("2. naive baseline")
        trajs = tokenizer_floor.read_trajectories(out)
        figures += naive.run(trajs[: n_floor // 2], os.path.join(work, "naive"), runs)
        _say("3. expansion")
        figures += expansion.run((5, 10, 20, 40), n_exp, runs)
        _say("4. memory")
        figures.append(processes.memory(work, n_mem, runs))
        _say("5. ray")
        figures += processes.ray_scaling(work, n_ray, ray_files, runs)
        _say("6. loader")
        figures.append(loader.run(out, runs))
        _say("7. dedup signatures")
        figures.append(dedup.run(500 if args.quick else 2000, runs))
        _say("8. peer (datatrove)")
        figures.append(peer.run(out, resolve(overrides={"executor": {"kind": "local", "progress": "off"}}), work,
                                runs))
        if floor.met is False:
            _say("profile of a local run (figure 1 missed)")
            inputs = sorted(glob.glob(os.path.join(work, "floor_in", "*", "*.jsonl")))
            profiles["1. pipeline / bare tokenizer"] = profile_pipeline(inputs, os.path.join(work, "profile_out"))
    command = "python -m bench" + (" --quick" if args.quick else "")
    with open(RESULTS, "w") as f:
        f.write(render_results(figures, command, runs, profiles))
    _say(f"wrote {RESULTS}")
    return 0


def _say(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
