"""Checkpoints and the JSON step log on a disk that fills up partway through a run: one line naming the file, exit
2, and the last whole checkpoint still the newest one.

The disk is really full, not a patched write. Where this machine lets an unprivileged process make a user and mount
namespace (``unshare --user --map-root-user --mount``), a 32 MiB tmpfs is mounted in it, filled with a file up to
the last byte and then given back a little room: every write fails as on a full disk, with ENOSPC, and the mount
vanishes with the namespace. Elsewhere the log test is skipped, and the checkpoint test limits the file size of the
trainer's process instead (RLIMIT_FSIZE, with SIGXFSZ ignored so that the write fails with EFBIG instead of killing
it): a real failed write too, from inside torch's own writer.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.helpers import write_synthetic_shards
from training.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--tiny-vocab", "64", "--tiny-dim", "32", "--micro-batch-tokens", "64", "--shuffle-buffer", "8",
        "--log-every", "1"]
# A checkpoint of this tiny model takes about 350 kB (model.pt alone 110 kB), a logged step under 400 bytes.
CHECKPOINT_ROOM = 64 * 1024
TRAIN = [sys.executable, "-m", "training"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_synthetic_shards(str(tmp_path_factory.mktemp("run")), rows_per_file=(24, 24), row_group_rows=8)


def _can_mount_a_tmpfs(folder: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    folder.mkdir(exist_ok=True)
    probe = ["unshare", "--user", "--map-root-user", "--mount", "mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs",
             str(folder)]
    return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0


def _on_a_full_tmpfs(tmp_path: Path, first: list[str], second: list[str], room: int) -> subprocess.CompletedProcess:
    """`first` on an empty tmpfs at ``tmp_path/disk``, then the tmpfs filled but for `room` bytes, then `second`;
    what the tmpfs holds afterwards is copied to ``tmp_path/after``."""
    disk = tmp_path / "disk"
    if not _can_mount_a_tmpfs(disk):
        pytest.skip("no user and mount namespace here to mount a tmpfs in (unshare --user --mount)")
    script = """set -u
disk=$1 after=$2 room=$3 first=$4 second=$5
mount -t tmpfs -o size=32m tmpfs "$disk" || exit 90
sh -c "$first" > "$after.first.log" 2>&1 || exit 91
dd if=/dev/zero of="$disk/filler" bs=1M 2> /dev/null  # until the disk is full
truncate -s "-$room" "$disk/filler"
sh -c "$second"
status=$?
rm "$disk/filler"
cp -r "$disk" "$after"
exit $status
"""
    quoted = [shlex.join(command) for command in (first, second)]
    command = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", str(disk),
               str(tmp_path / "after"), str(room), *quoted]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode not in (90, 91), (result, (tmp_path / "after.first.log").read_text())
    return result


def _with_a_file_size_limit(first: list[str], second: list[str], limit: int) -> subprocess.CompletedProcess:
    """`first` as it is, then `second` with every file it writes limited to `limit` bytes."""

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    done = subprocess.run(first, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return subprocess.run(second, cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=limited)


def _checkpoints(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


def test_a_checkpoint_that_does_not_fit_is_one_line_and_the_last_whole_one_stays(shards, tmp_path):
    """On a full tmpfs where one can be mounted, else under a file-size limit (one of them: each run costs seconds)."""
    run = [*TRAIN, "--shards", shards, *TINY, "--save-every", "2"]
    if _can_mount_a_tmpfs(tmp_path / "probe"):
        out, after = tmp_path / "disk" / "ck", tmp_path / "after" / "ck"
        first, second = [*run, "--out", str(out), "--max-steps", "4"], [*run, "--out", str(out), "--max-steps", "8"]
        result, said = _on_a_full_tmpfs(tmp_path, first, second, CHECKPOINT_ROOM), "No space left on device"
    else:
        out = after = tmp_path / "ck"
        first, second = [*run, "--out", str(out), "--max-steps", "4"], [*run, "--out", str(out), "--max-steps", "8"]
        result, said = _with_a_file_size_limit(first, second, CHECKPOINT_ROOM), "File too large"
    assert result.returncode == 2, result
    assert f"resumed from {out} at step 4" in result.stdout and "step 6/8" in result.stdout, result.stdout
    assert result.stderr.strip().splitlines() == [f"lwm: error: {said}: {out}/step-00000006.tmp/model.pt"]
    # nothing half-written left behind, and the pointer still names the last whole checkpoint, which loads
    assert _checkpoints(after) == ["latest", "step-00000002", "step-00000004"]
    assert (after / "latest").read_text() == "step-00000004"
    assert load_checkpoint(str(after)).step == 4
    again = subprocess.run([*run, "--out", str(after), "--max-steps", "5"], cwd=ROOT, capture_output=True, text=True,
                           timeout=300)  # once there is room
    assert again.returncode == 0 and f"resumed from {after} at step 4" in again.stdout, again


def test_a_log_line_that_does_not_fit_is_one_line_and_the_log_holds_whole_lines(shards, tmp_path):
    out, after = tmp_path / "disk" / "ck", tmp_path / "after"
    log = tmp_path / "disk" / "steps.jsonl"
    run = [*TRAIN, "--shards", shards, *TINY, "--out", str(out), "--log-json", str(log)]
    # a page of the tmpfs left: about ten more steps' lines, and no checkpoint but the first run's
    result = _on_a_full_tmpfs(tmp_path, [*run, "--max-steps", "4", "--save-every", "2"],
                              [*run, "--max-steps", "60", "--save-every", "0"], 4096)
    assert result.returncode == 2, result
    assert result.stderr.strip().splitlines() == [f"lwm: error: No space left on device: {log}"]
    steps = [json.loads(line)["step"] for line in (after / "steps.jsonl").read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1)) and 6 <= len(steps) < 60, steps
    # the step whose line did not fit was trained and shown, and the run ended there
    assert f"step {len(steps) + 1}/60" in result.stdout and f"step {len(steps) + 2}/60" not in result.stdout
    assert (after / "ck" / "latest").read_text() == "step-00000004"
    assert load_checkpoint(str(after / "ck")).step == 4
