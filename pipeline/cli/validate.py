"""``lwm validate``: check inputs against an adapter without writing anything.

Exit status 0 when ``lwm run`` would accept the input, 1 when more of it is quarantined than the bound
(``--max-quarantine-rate``, as ``lwm run``'s), 2 for an error (no input files, an unknown option)."""

from __future__ import annotations

import json

import click

from pipeline.config import DEFAULTS, parse_opt
from pipeline.errors import handle_errors


@click.command("validate")
@click.argument("paths", nargs=-1, required=True)
@click.option("--format", "-f", "format", help="Input format; sniffed per file when omitted.")
@click.option("--domain", "-d", help="Domain override.")
@click.option("--opt", "opts", multiple=True, metavar="KEY=VALUE", help="Adapter option (repeatable).")
@click.option("--max-quarantine-rate", "bound", type=click.FloatRange(0, 1), default=DEFAULTS["run"]["max_quarantine_rate"],
              show_default=True, help="Exit 1 when more than this fraction is quarantined, as `lwm run` fails.")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object.")
@handle_errors
def validate_cmd(paths: tuple[str, ...], format: str | None, domain: str | None, opts, bound: float,
                 as_json: bool) -> None:
    """Check inputs against an adapter without writing anything (exit 1 where `lwm run` would fail on
    quarantined records)."""
    from pipeline.config_schema import check_adapter_options
    from pipeline.validate import run_would_fail, validate_inputs

    adapter_opts = parse_opt(opts)
    check_adapter_options(adapter_opts, format)
    report = validate_inputs(list(paths), format, domain, adapter_opts, echo=None if as_json else click.echo)
    if as_json:
        click.echo(json.dumps(report, sort_keys=True))
    failure = run_would_fail(report, bound)
    if failure:
        click.echo(f"lwm: {failure}: lwm run would fail", err=True)
        raise SystemExit(1)
