"""``lwm reward RUN PREDICTIONS.jsonl``: score a file of model predictions for the rl or eval pool.

PREDICTIONS.jsonl has one JSON object per line: the sample id under ``sample_id`` (or ``id``, as in
`lwm export agentworldbench` rows) and the model's whole completion under ``prediction`` (or
``completion``, or ``gen`` as the AgentWorldBench evaluator writes it). Each prediction is scored by
`stages.reward.score_batch` against its sample's reference: strict extraction, the rule verifier,
the rubric judge at ``--judge-url``. The command prints, per domain, the mean reward, the rule-pass
rate (over samples with a verifier), the judge failure rate (over samples sent to the judge) and
the format failure rate; ``--json`` prints the same as one JSON object, ``--out`` writes one line of
parts per sample.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections import Counter, defaultdict
from typing import Any

import click
import pyarrow.parquet as pq

from pipeline.cli.common import json_option, jsonl_values
from pipeline.cli.run_files import find_trajectories, finished_run, parquet_files, rl_shard_rows, trajectory_of_sample
from pipeline.errors import handle_errors
from schemas.errors import ConfigError
from stages.pools import POOLS
from stages.render import user_prompt
from stages.reward.core import RewardConfig, RewardInput, RewardResult, score_batch, split_prompt

_ID_KEYS = ("sample_id", "id")
_TEXT_KEYS = ("prediction", "completion", "gen")


def rl_inputs(run_dir: str) -> dict[str, RewardInput]:
    """sample id → reward input (completion still empty) for the rl pool."""
    out = {}
    for r in rl_shard_rows(*finished_run(run_dir), ["sample_id", "domain", "messages", "reference"]):
        history, current = split_prompt(r["messages"])
        out[r["sample_id"]] = RewardInput(r["domain"], "", r["reference"], current, history, r.get("verifier"))
    return out


def eval_inputs(run_dir: str) -> dict[str, RewardInput]:
    """sample id → reward input (completion still empty) for the eval pool; the history is rebuilt
    from the trajectories layer, as the rl pool's rendered messages hold it."""
    fs, root = finished_run(run_dir)
    samples = []
    for path in parquet_files(fs, posixpath.join(root, "shards", "eval")):
        with fs.open(path, "rb") as f:
            samples += pq.read_table(f, columns=["sample_id", "traj_id", "turn_idx", "template"]).to_pylist()
    trajs = find_trajectories(fs, root, {s["traj_id"] for s in samples})
    out = {}
    for s in samples:
        traj, t = trajectory_of_sample(trajs, s, "eval"), s["turn_idx"]
        if traj is None:
            raise ConfigError(f"eval sample {s['sample_id']}: trajectory {s['traj_id']} missing from the trajectories layer")
        history = tuple((user_prompt(traj, h), traj.turns[h - 1].observation) for h in range(1, t))
        out[s["sample_id"]] = RewardInput(traj.domain, "", traj.turns[t - 1].observation, user_prompt(traj, t), history)
    return out


def read_predictions(path: str) -> dict[str, str]:
    """sample id → completion text, from PREDICTIONS.jsonl (local path or fsspec URL); an id twice is an error."""
    preds: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for lineno, obj in jsonl_values(path, "a JSON object"):
        sid = next((obj[k] for k in _ID_KEYS if isinstance(obj, dict) and isinstance(obj.get(k), str)), None)
        text = next((obj[k] for k in _TEXT_KEYS if isinstance(obj, dict) and isinstance(obj.get(k), str)), None)
        if sid is None or text is None:
            raise ConfigError(f"{path}:{lineno}: expected a sample id ({'/'.join(_ID_KEYS)}) "
                              f"and a prediction ({'/'.join(_TEXT_KEYS)})")
        if sid in first_line:  # which of the two to score is not ours to guess
            raise ConfigError(f"{path}:{lineno}: sample id {sid} already has a prediction (line {first_line[sid]}); "
                              "give one prediction per sample")
        first_line[sid] = lineno
        preds[sid] = text
    return preds


def summarize(domains: list[str], results: list[RewardResult]) -> dict[str, Any]:
    """Per-domain and overall mean reward, rule-pass rate, judge and format failure rates."""
    groups: dict[str, list[RewardResult]] = defaultdict(list)
    for d, r in zip(domains, results):
        groups[d].append(r)
        groups["all"].append(r)

    def stats(rs: list[RewardResult]) -> dict[str, Any]:
        ruled = [r for r in rs if r.rule is not None]
        judged = [r for r in rs if r.format_status == "ok"]
        return {
            "samples": len(rs),
            "mean_reward": sum(r.reward for r in rs) / len(rs),
            "with_verifier": len(ruled),
            "rule_pass_rate": sum(bool(r.rule) for r in ruled) / len(ruled) if ruled else None,
            "judged": len(judged),
            "judge_failure_rate": sum(r.judge_failed for r in judged) / len(judged) if judged else None,
            "format_failure_rate": sum(r.format_status != "ok" for r in rs) / len(rs),
        }

    return {d: stats(rs) for d, rs in sorted(groups.items(), key=lambda kv: (kv[0] == "all", kv[0]))}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


@click.command("reward")
@click.argument("run_dir")
@click.argument("predictions")
# show_envvar: the help and the missing-option error name the environment variable that can stand for the flag
@click.option("--judge-url", required=True, envvar="LWM_JUDGE_URL", show_envvar=True,
              help="OpenAI-compatible base URL (…/v1); the flag or its environment variable.")
@click.option("--judge-model", required=True, envvar="LWM_JUDGE_MODEL", show_envvar=True,
              help="Judge model name; the flag or its environment variable.")
@click.option("--judge-api-key", envvar="LWM_JUDGE_API_KEY", show_envvar=True, help="API key.")
@click.option("--pool", type=click.Choice(["rl", "eval"]), default="rl", show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True,
              help="Judge requests in flight.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=120.0, show_default=True,
              help="Seconds per judge request.")
@click.option("--retries", type=click.IntRange(min=0), default=4, show_default=True,
              help="Retries on 429/5xx/timeouts.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=4096, show_default=True, help="Judge answer budget.")
@click.option("--cache", "cache_dir", help="Judge cache directory or fsspec URL (repeat runs cost no calls).")
@click.option("--rubric-weight", type=float, default=9.0, show_default=True)
@click.option("--rule-weight", type=float, default=1.0, show_default=True)
@click.option("--without-verifier", type=click.Choice(["rubric", "zero"]), default="rubric", show_default=True)
@click.option("--on-judge-failure", type=click.Choice(["zero", "rule"]), default="zero", show_default=True)
@click.option("--out", "out_path", help="Write one JSON line of reward parts per scored sample here.")
@json_option
@handle_errors
def reward_cmd(**kw: Any) -> None:
    """Score PREDICTIONS.jsonl against the rl (or eval) pool of RUN_DIR with the world-model reward.

    \b
      lwm reward out/ preds.jsonl --judge-url http://localhost:8000/v1 --judge-model Qwen/Qwen3-32B
    """
    score_predictions(**kw)


def score_predictions(run_dir, predictions, judge_url, judge_model, judge_api_key, pool, concurrency, timeout_s,
                      retries, max_tokens, cache_dir, rubric_weight, rule_weight, without_verifier,
                      on_judge_failure, out_path, as_json) -> None:
    """The body of `lwm reward` (module docstring)."""
    from stages.llm.client import ChatClient

    check_judge_url(judge_url)
    try:
        cfg = RewardConfig(rubric_weight=rubric_weight, rule_weight=rule_weight,
                           without_verifier=without_verifier, on_judge_failure=on_judge_failure)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    inputs = rl_inputs(run_dir) if pool == "rl" else eval_inputs(run_dir)
    if not inputs:
        raise ConfigError(f"{run_dir}: the {pool} pool is empty")
    preds = read_predictions(predictions)
    unknown = sorted(set(preds) - set(inputs))
    ids = sorted(set(preds) & set(inputs))
    if not preds:
        raise ConfigError(f"{predictions}: holds no predictions")
    if not ids:
        raise ConfigError(f"{predictions}: none of its {len(preds)} sample ids is in the {pool} pool of {run_dir}"
                          + _where_they_are(run_dir, set(preds), pool))
    items = [dataclasses.replace(inputs[i], completion=preds[i]) for i in ids]
    client = ChatClient(judge_url, judge_model, judge_api_key, timeout_s=timeout_s, max_retries=retries,
                        max_concurrency=concurrency, cache_dir=cache_dir,
                        default_params={"max_tokens": max_tokens, "temperature": 0.0})
    results = score_batch(items, client, cfg)
    if out_path:
        import fsspec

        with fsspec.open(out_path, "w", encoding="utf-8") as f:
            for sid, item, r in zip(ids, items, results):
                f.write(json.dumps({"sample_id": sid, "domain": item.domain, "reward": r.reward, "rule": r.rule,
                                    "rubric": r.rubric, "verifier": r.verifier, "format": r.format_status,
                                    "judge_error": r.judge_error, "scores": r.scores}) + "\n")
    report = {
        "pool": pool,
        "scored": len(ids),
        "without_prediction": len(inputs) - len(ids),
        "unknown_ids": len(unknown),
        "domains": summarize([it.domain for it in items], results),
        "judge": client.usage.as_dict(),
        "config": dataclasses.asdict(cfg),
    }
    if as_json:
        click.echo(json.dumps(report, sort_keys=True))
    else:
        _print_report(report, pool, unknown)
    _check_judge_answered(report["judge"], judge_url, results)


def _where_they_are(run_dir: str, ids: set[str], asked: str) -> str:
    """``; they are in the eval pool: give --pool eval`` for sample ids of the run's other pools (their
    ``sample_id`` column alone is read), or ''."""
    fs, root = finished_run(run_dir)
    found: Counter[str] = Counter()
    for other in (p for p in POOLS if p != asked):
        for path in parquet_files(fs, posixpath.join(root, "shards", other)):
            with fs.open(path, "rb") as f:
                found[other] += len(ids & set(pq.read_table(f, columns=["sample_id"]).column(0).to_pylist()))
    held = [(p, n) for p, n in found.most_common() if n]
    if not held:
        return ""
    top, most = held[0]
    if len(held) == 1 and most == len(ids):
        where = f"they are in the {top} pool"
    else:
        where = ", ".join([f"{most} {'is' if most == 1 else 'are'} in the {top} pool",
                           *(f"{n} in the {p} pool" for p, n in held[1:])])
    hint = f": give --pool {top}" if top in ("rl", "eval") else " (lwm reward scores the rl and eval pools)"
    return f"; {where}{hint}"


def check_judge_url(url: str) -> None:
    """An http(s) base URL, or one line saying what is expected."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"--judge-url: expected an http(s) base URL such as http://localhost:8000/v1, not {url!r}")


def _check_judge_answered(usage: dict[str, Any], url: str, results: list[RewardResult]) -> None:
    """Rewards of a judge that never answered are not scores: exit 2 with one line naming it and why (after the
    report and ``--out``, which record the failures). Some failures are a warning."""
    failed = sum(r.judge_failed for r in results)
    if not failed:
        return
    why = Counter(r.judge_error for r in results if r.judge_failed)  # "no JSON object", "judge call failed: HTTP 500"
    reasons = ", ".join(f"{e} ×{n}" for e, n in sorted(why.items()))
    sent = sum(r.format_status == "ok" for r in results)
    if failed == sent:
        raise ConfigError(f"the judge at {url} gave no usable answer for any of the {sent} samples sent to it "
                          f"({reasons}); the rewards above hold no rubric scores")
    click.echo(f"warning: the judge at {url} gave no usable answer for {failed} of {sent} samples ({reasons}); "
               "their rewards follow --on-judge-failure", err=True)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _print_report(report: dict[str, Any], pool: str, unknown: list[str]) -> None:
    click.echo(f"{'domain':<10} {'n':>5} {'reward':>7} {'rule pass':>10} {'judge fail':>11} {'format fail':>12}")
    for d, s in report["domains"].items():
        click.echo(f"{d:<10} {s['samples']:>5} {s['mean_reward']:>7.2f} {_pct(s['rule_pass_rate']):>10} "
                   f"{_pct(s['judge_failure_rate']):>11} {_pct(s['format_failure_rate']):>12}")
    u = report["judge"]
    click.echo(f"judge: {u['calls']} calls ({u['failures']} failed), {u['cache_hits']} cached, {u['retries']} retries, "
               f"{u['prompt_tokens']} prompt + {u['completion_tokens']} completion tokens", err=True)
    if report["without_prediction"] or unknown:
        click.echo(f"{_count(report['without_prediction'], f'{pool} sample')} had no prediction; "
                   f"{_count(len(unknown), 'prediction')} named unknown sample ids", err=True)
