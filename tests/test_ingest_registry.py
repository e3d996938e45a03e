"""The run's settings of the common adapter options: ``--domain`` / ``--opt domain=`` and ``--source-kind`` /
``--opt source_kind=`` name one thing each; two different values are one error line (exit 2), before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import lwm_in_process

CONFLICTS = [
    (["--opt", "domain=web", "-d", "search"], "run.domain (--domain) is 'search' but ingest.options.domain"),
    (["--opt", "source_kind=public", "--source-kind", "internal"],
     "run.source_kind (--source-kind) is 'internal' but ingest.options.source_kind"),
]


def _error_line(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("lwm: error: ")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    return errors[0].removeprefix("lwm: error: ")


@pytest.fixture()
def logs(tmp_path: Path) -> Path:
    src = tmp_path / "in"
    assert lwm_in_process("demo", "--domain", "web", "--out", str(src), "-n", "4").returncode == 0
    return src


@pytest.mark.parametrize("dry_run", [True, False], ids=["--dry-run", "run"])
@pytest.mark.parametrize(("flags", "start"), CONFLICTS, ids=["domain", "source_kind"])
def test_one_setting_given_two_values_is_one_line_and_no_work(flags, start, dry_run, logs, tmp_path):
    out = tmp_path / "out"
    proc = lwm_in_process("run", "-i", str(logs), "-o", str(out), *flags, *(["--dry-run"] if dry_run else []))
    assert proc.returncode == 2 and _error_line(proc.stderr).startswith(start), proc.stderr
    assert "give one of them" in proc.stderr and not out.exists()


def test_a_config_file_option_and_a_flag_that_disagree_are_refused(logs, tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('[ingest.options]\ndomain = "web"\n')
    proc = lwm_in_process("run", "-i", str(logs), "-o", str(tmp_path / "out"), "--config", str(config), "-d", "search",
                          "--dry-run")
    assert proc.returncode == 2 and _error_line(proc.stderr).startswith(CONFLICTS[0][1])


def test_validate_refuses_a_domain_given_twice_differently(logs):
    proc = lwm_in_process("validate", str(logs), "--opt", "domain=web", "-d", "search")
    assert proc.returncode == 2 and _error_line(proc.stderr).startswith(CONFLICTS[0][1]) and not proc.stdout


def test_the_same_value_twice_is_one_setting(logs, tmp_path):
    proc = lwm_in_process("run", "-i", str(logs), "-o", str(tmp_path / "out"), "--opt", "domain=web", "-d", "web",
                          "--opt", "source_kind=internal", "--source-kind", "internal", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert lwm_in_process("validate", str(logs), "--opt", "domain=web", "-d", "web").returncode == 0
