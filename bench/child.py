"""Subprocess entry for benchmarks that need a fresh process (peak RSS, a Ray instance of N CPUs).

``python -m bench.child rss OUT INPUT...`` prints the peak RSS (KiB) of one local run;
``python -m bench.child ray CPUS RUNS OUT INPUT...`` prints JSON seconds of Ray and local runs.
"""

from __future__ import annotations

import json
import resource
import sys
import time

from bench.common import pipeline_config, quiet
from pipeline.run import run_pipeline


def rss_run(out: str, inputs: list[str]) -> int:
    """Peak RSS in KiB of this process after one local pipeline run."""
    run_pipeline(pipeline_config(inputs, out), echo=quiet)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def ray_runs(cpus: int, runs: int, out: str, inputs: list[str]) -> dict[str, list[float]]:
    """Seconds of `runs` Ray runs on `cpus` CPUs, each followed by an in-process run (after one warm-up)."""
    from pipeline.ray_executor import RayExecutor

    executor = RayExecutor(num_cpus=cpus)
    times: dict[str, list[float]] = {"ray": [], "local": []}
    try:
        warm = pipeline_config(inputs, out, "ray", cpus, one_task_per_file=True)
        run_pipeline(warm, echo=quiet, executor=executor)  # start workers
        for _ in range(runs):
            for kind in ("ray", "local"):
                cfg = pipeline_config(inputs, out, kind, cpus, one_task_per_file=True)
                start = time.perf_counter()
                run_pipeline(cfg, echo=quiet, executor=executor if kind == "ray" else None)
                times[kind].append(time.perf_counter() - start)
    finally:
        executor.close()
    return times


def main(argv: list[str]) -> None:
    if argv[0] == "rss":
        print(rss_run(argv[1], argv[2:]))
    elif argv[0] == "ray":
        print(json.dumps(ray_runs(int(argv[1]), int(argv[2]), argv[3], argv[4:])))
    else:
        raise SystemExit(f"unknown child benchmark {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
