"""``lwm run``: the whole pipeline from inputs to shards."""

from __future__ import annotations

from typing import Any

import click

from pipeline.cli.common import done_cleanly
from pipeline.config import DEFAULTS, load_config_file, parse_opt, resolve
from pipeline.errors import handle_errors


def _default(section: str, key: str) -> str:
    """``[default: …]`` for a flag's help: the config key's built-in value. The flag itself has no click default, so
    that a config file's value holds where the flag is not given."""
    return f"[default: {DEFAULTS[section][key]}]"


def _run_overrides(**kw: Any) -> dict[str, Any]:
    run: dict[str, Any] = {}
    executor: dict[str, Any] = {}
    if kw.get("inputs"):
        run["input"] = list(kw["inputs"])
    for key in ("out", "format", "domain", "source_kind", "max_quarantine_rate", "from_layer"):
        if kw.get(key) is not None:
            run[key] = kw[key]
    for key, name in (("executor", "kind"), ("ray_address", "ray_address"), ("num_cpus", "num_cpus")):
        if kw.get(key) is not None:
            executor[name] = kw[key]
    if kw.get("progress") is not None:
        executor["progress"] = kw["progress"]
    out: dict[str, Any] = {"run": run, "executor": executor}
    if kw.get("opts"):
        out["ingest"] = {"options": parse_opt(kw["opts"])}
    if kw.get("tokenizer"):
        out["tokenizer"] = {"spec": kw["tokenizer"]}
    if kw.get("chat_format"):
        out["render"] = {"chat_format": kw["chat_format"]}
    if kw.get("keep_mode"):
        out["masking"] = {"keep_mode": kw["keep_mode"]}
    if kw.get("sft_turns") is not None:
        value = kw["sft_turns"].strip()
        # a number becomes an int; anything else stays text for the schema to name (pools.sft_turns)
        out["pools"] = {"sft_turns": int(value) if value.lstrip("-").isdigit() else value}
    if kw.get("redact_emails"):
        out["redact"] = {"emails": True}
    llm = {name: kw[key] for key, name in (("llm_endpoint", "endpoint"), ("llm_model", "model"),
                                           ("max_requests", "max_requests"), ("max_llm_tokens", "max_tokens"))
           if kw.get(key) is not None}
    if kw.get("llm_dry_run"):
        llm["dry_run"] = True
    if llm:
        out["llm"] = llm
    return out


@click.command("run")
@click.option("--input", "-i", "inputs", multiple=True, help="Input path, directory, glob or fsspec URL (repeatable).")
@click.option("--out", "-o", help="Output directory or fsspec URL.")
@click.option("--format", "-f", "format", help="Input format (see `lwm formats`); sniffed when omitted.")
@click.option("--domain", "-d", help="Domain of the trajectories (overrides the format's default).")
@click.option("--opt", "opts", multiple=True, metavar="KEY=VALUE", help="Adapter option (repeatable).")
@click.option("--source-kind", type=click.Choice(["sandbox", "public", "internal"]),
              help="Provenance kind recorded in each trajectory's source, over the kind a record names (lwm-jsonl). "
                   "[default: a record's own source.kind, else public]")
@click.option("--config", "config_path", help="TOML config file; flags override its keys.")
@click.option("--executor", type=click.Choice(["auto", "processes", "local", "ray"]),
              help="auto (default: worker processes on this machine for inputs below 256 MB, Ray from there), "
                   "processes, local (this process alone) or ray.")
@click.option("--ray-address", help="Ray cluster address (also RAY_ADDRESS); default starts a local Ray.")
@click.option("--num-cpus", type=int, help="CPUs for a local Ray instance or worker processes (default: all).")
@click.option("--tokenizer", help="tokenizer.json path or model directory; default: built-in Qwen3.6 vocabulary.")
@click.option("--chat-format", type=click.Choice(["chatml", "plain"]),
              help=f"Chat format of rendered samples. {_default('render', 'chat_format')}")
@click.option("--keep-mode", type=click.Choice(["weight", "turn", "token"]),
              help=f"How keep ratios become weights. {_default('masking', 'keep_mode')}")
@click.option("--sft-turns",
              help=f"Turn samples per trajectory in the sft pool: a number or 'all'. {_default('pools', 'sft_turns')}")
@click.option("--redact-emails", is_flag=True, default=None, help="Also replace e-mail addresses.")
@click.option("--max-quarantine-rate", type=float, help="Fail when more than this fraction is quarantined (0.05).")
@click.option("--from-layer", type=click.Choice(["trajectories"]), help="Re-run later stages from a kept layer.")
@click.option("--progress", type=click.Choice(["auto", "bar", "lines", "off"]),
              help=f"Progress display. {_default('executor', 'progress')}")
@click.option("--dry-run", is_flag=True, help="Print the resolved config and exit.")
@click.option("--llm-endpoint", help="OpenAI-compatible base URL (…/v1): turns on the model-in-the-loop stages.")
@click.option("--llm-model", help="Model name sent to the endpoint (llm.model).")
@click.option("--max-requests", type=click.IntRange(min=0), help="Requests this invocation may send to the model (0 = no limit).")
@click.option("--max-llm-tokens", type=click.IntRange(min=0), help="Prompt + completion tokens this invocation may spend (0 = no limit).")
@click.option("--llm-dry-run", is_flag=True, default=None,
              help="Print the first rendered model requests and the projected calls; send nothing.")
@handle_errors
def run_cmd(config_path: str | None, dry_run: bool, **kw: Any) -> None:
    """Run the pipeline: ingest → trajectories → samples per pool → weighted shards.

    \b
    Default (--executor auto): inputs below 256 MB run on worker processes forked from this one, larger
    ones on a Ray instance started on this machine (stopped at exit); the choice and its reason are printed.
      lwm run --input logs/ --out out/
    Cluster: point at a running Ray cluster (or set RAY_ADDRESS); use shared storage for --out.
      lwm run --input s3://bucket/logs/ --out s3://bucket/lwm-out --ray-address ray://head:10001
    Always worker processes: --executor processes; this process alone: --executor local; always Ray:
    --executor ray.
    """
    file_cfg = load_config_file(config_path) if config_path else {}
    cfg = resolve(file_cfg, _run_overrides(**kw), source=config_path)
    from pipeline.preflight import preflight_run

    preflight_run(cfg, file_cfg, config_path)  # what the run fails on before any work, named as the file's
    if dry_run:
        click.echo(dry_run_text(cfg), nl=False)
        return
    from pipeline.llm_stage import LLMDryRun
    from pipeline.report import print_run_summary
    from pipeline.run import run_pipeline

    try:
        manifest = run_pipeline(cfg, echo=lambda m: click.echo(m, err=True), checked=True)
    except LLMDryRun:
        return  # the plan was printed; nothing was sent
    print_run_summary(manifest, cfg["run"]["out"])
    done_cleanly()


def dry_run_text(cfg: dict[str, Any]) -> str:
    """The resolved config as TOML that ``--config`` reads back; without model stages, their keys as comments."""
    from pipeline.config_toml import dumps

    text = dumps(cfg)
    if "llm" not in cfg:
        from pipeline.llm_config import LLM_DEFAULTS

        off = dumps({"llm": LLM_DEFAULTS}).rstrip("\n").splitlines()
        text += "\n# model-in-the-loop stages, off until an endpoint is given (--llm-endpoint):\n"
        text += "\n".join(f"# {line}" if line else "#" for line in off) + "\n"
    return text
