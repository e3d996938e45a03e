"""``lwm demo``: a deterministic demo corpus of simulated sandbox logs."""

from __future__ import annotations

import click

from pipeline.errors import handle_errors
from schemas.errors import ConfigError


@click.command("demo")
@click.option("--domain", "-d", required=True, help="One of mcp, search, terminal, swe, android, web, os.")
@click.option("--out", "-o", required=True, help="Directory to write the demo corpus to.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("-n", "--n", "n", type=int, default=None, help="Trajectories (default 240).")
@click.option("--native", is_flag=True, help="Write the domain's native log format (android only: uiautomator XML).")
@handle_errors
def demo_cmd(domain: str, out: str, seed: int, n: int | None, native: bool) -> None:
    """Write a deterministic demo corpus of simulated sandbox logs."""
    from pipeline.demo import NATIVE_DOMAINS, write_demo
    from schemas.trajectory import DOMAINS

    if native and domain in DOMAINS and domain not in NATIVE_DOMAINS:  # an unknown domain: write_demo names them
        raise ConfigError(f"--native: the {domain} demo has no native log format but lwm-jsonl (write it without "
                          f"--native); domains with one: {', '.join(NATIVE_DOMAINS)}")
    paths = write_demo(domain, out, seed=seed, n=n, native=native)
    names = ", ".join(paths)
    also = " and the screen files it names" if native and domain == "android" else ""
    click.echo(f"wrote demo corpus for {domain}: {names}{also}", err=True)
