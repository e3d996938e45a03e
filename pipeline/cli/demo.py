"""``lwm demo``: a deterministic demo corpus of simulated sandbox logs."""

from __future__ import annotations

import click

from pipeline.errors import handle_errors


@click.command("demo")
@click.option("--domain", "-d", required=True, help="One of mcp, search, terminal, swe, android, web, os.")
@click.option("--out", "-o", required=True, help="Directory to write the demo corpus to.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("-n", "--n", "n", type=int, default=None, help="Trajectories (default 240).")
@click.option("--native", is_flag=True, help="Write the domain's native log format (android: uiautomator XML).")
@handle_errors
def demo_cmd(domain: str, out: str, seed: int, n: int | None, native: bool) -> None:
    """Write a deterministic demo corpus of simulated sandbox logs."""
    import os

    from pipeline.demo import write_demo

    def files() -> int:
        return sum(len(names) for _, _, names in os.walk(out))

    before = files()
    write_demo(domain, out, seed=seed, n=n, native=native)
    written = files() - before  # a native log names screen files of its own beside it
    click.echo(f"wrote demo corpus for {domain}: {written} new file(s) under {out}", err=True)
