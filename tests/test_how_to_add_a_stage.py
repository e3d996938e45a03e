"""The README's "How to add a stage" examples, run as written: a trajectory step and a distributed stage.

Each code block is saved as a module of a package in a temporary folder (as a user would save it under
`stages/` or `pipeline/`); the step is found by reading that package, the stage is put into the plan
after ingest as the README says, and a small run shows both doing what the README promises.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from pipeline import run as run_module
from pipeline.config import resolve
from pipeline.ingest_stage import INGEST
from stages import steps

ROOT = Path(__file__).resolve().parent.parent


def _blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## How to add a stage", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


def _record(task: str, turns: int, i: int) -> str:
    return json.dumps({
        "traj_id": f"t{i}", "domain": "terminal", "split_key": f"k{i}",
        "system": {"task_description": task, "action_space": "shell"},
        "turns": [{"action": f"echo {i} {t}", "observation": f"{i} {t}"} for t in range(turns)],
    })


@pytest.fixture
def readme_modules(tmp_path, monkeypatch):
    step_code, stage_code = _blocks()
    for package, module, code in (("readme_steps", "no_task", step_code), ("readme_stages", "turn_counts", stage_code)):
        (tmp_path / "pkgs" / package).mkdir(parents=True)
        (tmp_path / "pkgs" / package / "__init__.py").write_text("")
        (tmp_path / "pkgs" / package / f"{module}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    monkeypatch.setattr(steps, "STEP_PACKAGES", (*steps.STEP_PACKAGES, "readme_steps"))
    try:
        yield
    finally:
        steps.unregister_step("no_task")
        for name in [m for m in sys.modules if m.split(".")[0] in ("readme_steps", "readme_stages")]:
            del sys.modules[name]


def test_the_readme_step_is_found_without_a_list_and_runs_in_order(readme_modules):
    assert steps.step_modules("readme_steps") == ("readme_steps.no_task",)
    assert [s.name for s in steps.registered_steps()] == ["filter", "no_task", "redact"]


def test_the_readme_stage_and_step_run_in_a_pipeline_and_resume(readme_modules, tmp_path, monkeypatch):
    from readme_stages.turn_counts import TURN_COUNTS

    assert "PLAN = [SCAN, INGEST, TURN_COUNTS, DEDUP_MAP, …]" in (ROOT / "README.md").read_text()
    plan = list(run_module.PLAN)
    monkeypatch.setattr(run_module, "PLAN", [*plan[: plan.index(INGEST) + 1], TURN_COUNTS,
                                             *plan[plan.index(INGEST) + 1:]])
    inputs = tmp_path / "in"
    inputs.mkdir()
    # t1 (blank task) is dropped by the step; t0 and t2 reach the trajectories layer with 2 + 3 turns
    (inputs / "a.jsonl").write_text(_record("list files", 2, 0) + "\n" + _record("   ", 4, 1) + "\n")
    (inputs / "b.jsonl").write_text(_record("show the date", 3, 2) + "\n")
    out = tmp_path / "out"
    cfg = resolve({"run": {"input": [str(inputs)], "out": str(out)}, "executor": {"kind": "local", "progress": "off"},
                   "ingest": {"group_files": 1}})
    manifest = run_module.run_pipeline(cfg, echo=lambda _m: None)
    assert manifest["counts"]["filtered"]["no_task"] == 1
    assert manifest["turns_total"] == 5
    parts = sorted((out / "turn_counts").glob("*.json"))
    assert len(parts) == 2 and sorted(json.loads(p.read_text())["turns"] for p in parts) == [2, 3]
    assert len(list((out / "_tasks" / "turn_counts").glob("*.json"))) == 2
    timings = json.loads((out / "_timings.json").read_text())
    assert timings["turn_counts"] == {**timings["turn_counts"], "tasks": 2, "ran": 2, "skipped": 0}
    # the same command again: every task, the new stage's included, is skipped
    run_module.run_pipeline(cfg, echo=lambda _m: None)
    timings = json.loads((out / "_timings.json").read_text())
    assert timings["turn_counts"]["skipped"] == 2 and timings["ingest"]["skipped"] == 2
