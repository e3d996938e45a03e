"""``lwm check-format FILE``: format adherence of model outputs to the WMAT output format.

FILE is JSONL (local path or fsspec URL): one JSON object per line with the output text under
``--key`` (default: the first of ``output``, ``completion``, ``prediction``, ``response``,
``gen``, ``text``), or a bare JSON string. Every line is checked with
`stages.reward.wmat_format.check_output` (``--part block`` checks world-model blocks alone).
The command prints the adherence (share of outputs in the format) and the count per failure
reason (``missing_tag:confidence``, ``confidence_unparseable``, …); ``--json`` prints the same as one object;
``--min-adherence`` makes it exit with status 1 below a bound.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any

import click

from pipeline.cli.common import json_option, jsonl_values
from pipeline.errors import handle_errors
from schemas.errors import ConfigError
from stages.reward.wmat_format import check_block, check_output

TEXT_KEYS = ("output", "completion", "prediction", "response", "gen", "text")


def _text_of(obj: Any, key: str | None) -> str | None:
    if isinstance(obj, str):
        return obj
    if not isinstance(obj, dict):
        return None
    if key:
        return obj.get(key) if isinstance(obj.get(key), str) else None
    return next((obj[k] for k in TEXT_KEYS if isinstance(obj.get(k), str)), None)


def adherence_report(path: str, key: str | None = None, part: str = "output") -> dict[str, Any]:
    """Counts of a file of outputs: total, in format, per failure reason, confidence parsed."""
    check = check_block if part == "block" else check_output
    reasons: Counter[str] = Counter()
    total = ok = 0
    for lineno, obj in jsonl_values(path):
        text = _text_of(obj, key)
        if text is None:
            wanted = key or "/".join(TEXT_KEYS)
            raise ConfigError(f"{path}:{lineno}: expected a JSON string or an object with a text under {wanted}")
        total += 1
        result = check(text)
        if result.ok:
            ok += 1
        else:
            reasons[result.reason] += 1
    return {
        "file": path,
        "part": part,
        "outputs": total,
        "in_format": ok,
        "adherence": ok / total if total else 0.0,
        "reasons": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


@click.command("check-format")
@click.argument("path")
@click.option("--key", help="JSON key holding the output text (default: output, completion, prediction, …).")
@click.option("--part", type=click.Choice(["output", "block"]), default="output", show_default=True,
              help="output: world-model span + policy span; block: the world-model span alone.")
@json_option
@click.option("--min-adherence", type=click.FloatRange(0, 1), help="Exit with status 1 when adherence is below this share.")
@handle_errors
def check_format_cmd(path: str, key: str | None, part: str, as_json: bool, min_adherence: float | None) -> None:
    """Report how many model outputs in PATH (JSONL) follow the WMAT output format, and why not."""
    report = adherence_report(path, key, part)
    if not report["outputs"]:  # 0 of 0 is no adherence figure: an empty file is most likely the wrong one
        raise ConfigError(f"{path}: holds no outputs (one JSON object per line)")
    if as_json:
        click.echo(json.dumps(report, sort_keys=True))
    else:
        click.echo(f"{report['in_format']}/{report['outputs']} outputs in format "
                   f"(adherence {100 * report['adherence']:.2f}%)")
        for reason, count in report["reasons"].items():
            click.echo(f"  {reason:<32} {count}")
    if min_adherence is not None and report["adherence"] < min_adherence:
        sys.exit(1)
