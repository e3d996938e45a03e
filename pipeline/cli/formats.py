"""``lwm formats``: the supported input formats with their domains and options."""

from __future__ import annotations

import json

import click

from pipeline.errors import handle_errors

COMMON_OPTION_HELP = {  # `stages.ingest.registry.COMMON_OPTIONS`
    "domain": "the domain of its trajectories, where the format allows several (-d/--domain does the same)",
    "source_kind": "sandbox, public or internal: recorded in each trajectory's source, over a kind the records carry "
                   "(--source-kind does the same; default: the records' own, else public)",
    "max_record_bytes": "the largest record (line, document, cell) read, in bytes (default 64 MiB); a larger one is "
                        "a quarantine row",
}


@click.command("formats")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable listing.")
@handle_errors
def formats_cmd(as_json: bool) -> None:
    """List the supported input formats with their domains and options."""
    from stages.ingest.registry import adapters

    rows = [
        {
            "name": a.name,
            "description": a.description,
            "domains": list(a.domains),
            "default_domain": a.default_domain,
            "options": dict(a.options),
        }
        for a in adapters().values()
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        doms = "all" if len(r["domains"]) == 7 else ", ".join(r["domains"])
        click.echo(f"{r['name']:<18} {r['description']}")
        click.echo(f"{'':<18} domains: {doms} (default {r['default_domain']})")
        for key, help_text in r["options"].items():
            click.echo(f"{'':<18} --opt {key}=…  {help_text}")
    click.echo("every format also takes:")
    for key, help_text in COMMON_OPTION_HELP.items():
        click.echo(f"{'':<18} --opt {key}=…  {help_text}")
