"""``lwm validate``: check inputs against an adapter without writing anything."""

from __future__ import annotations

import json

import click

from pipeline.config import parse_opt
from pipeline.errors import handle_errors


@click.command("validate")
@click.argument("paths", nargs=-1, required=True)
@click.option("--format", "-f", "format", help="Input format; sniffed per file when omitted.")
@click.option("--domain", "-d", help="Domain override.")
@click.option("--opt", "opts", multiple=True, metavar="KEY=VALUE", help="Adapter option (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object.")
@handle_errors
def validate_cmd(paths: tuple[str, ...], format: str | None, domain: str | None, opts, as_json: bool) -> None:
    """Check inputs against an adapter without writing anything."""
    from pipeline.config_schema import check_adapter_options
    from pipeline.validate import validate_inputs

    adapter_opts = parse_opt(opts)
    check_adapter_options(adapter_opts)
    report = validate_inputs(list(paths), format, domain, adapter_opts, echo=None if as_json else click.echo)
    if as_json:
        click.echo(json.dumps(report, sort_keys=True))
