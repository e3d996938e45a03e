"""The README's model-in-the-loop example runs as written, against a loopback server standing in for
the model server (its `vllm serve` line is the only one skipped)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from tests.helpers import LWM, ROOT, JudgeServer, Script, clean_env


def _example() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Model-in-the-loop stages", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL).group(1)
    return [ln for ln in block.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_the_readme_example_runs_against_an_openai_compatible_server(tmp_path: Path):
    lines = _example()
    assert lines[0].startswith("vllm serve ")
    with JudgeServer(Script()) as server:
        outputs = []
        for line in lines[1:]:
            argv = shlex.split(line.replace("http://localhost:8000/v1", server.url))
            assert argv[0] == "lwm"
            argv[0] = LWM
            if argv[1] == "run":
                argv += ["--executor", "local", "--progress", "off"]
            if argv[1] == "demo":
                argv += ["-n", "40"]
            done = subprocess.run(argv, cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr[-2000:]
            outputs.append((len(server.requests), done.stderr))
    (after_dry, dry_err), (after_run, run_err) = outputs[1], outputs[2]
    assert after_dry == 0 and "projected" in dry_err and "nothing was sent" in dry_err
    assert 0 < after_run <= 500 and "llm sft_reasoning: " in run_err
    assert (tmp_path / "out" / "terminal" / "_SUCCESS").exists()
