"""Pools, turn choice and template choice (SPEC §7), all from stable hashes.

Every choice is a pure function of ids and config: the pool of a trajectory depends only on its
``split_key`` (so trajectories of one task share a pool and adding other trajectories never
moves it), turn choice on (``traj_id``, pool, turn), template choice on (``traj_id``, pool).
"""

from __future__ import annotations

import hashlib
import math

POOLS = ("cpt", "sft", "rl", "eval")


def stable_unit(*parts: object) -> float:
    """A uniform draw in [0, 1) from the parts' text (blake2b, 53 bits)."""
    key = "\x1f".join(str(p) for p in parts).encode("utf-8")
    value = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 11
    return value / float(1 << 53)


def pool_of(split_key: str, ratios: dict[str, float], seed: int = 0) -> str:
    """The pool of a split key: cumulative ratios in the order cpt, sft, rl, eval."""
    total = sum(ratios.get(p, 0.0) for p in POOLS)
    u = stable_unit("pool", seed, split_key) * total
    acc = 0.0
    last = None
    for pool in POOLS:
        share = ratios.get(pool, 0.0)
        if share <= 0:
            continue
        acc += share
        last = pool
        if u < acc:
            return pool
    return last  # float rounding at the top end


def eval_turns(num_turns: int) -> list[int]:
    """First, last and three evenly spaced middle turns (1-based, deduplicated, sorted)."""
    if num_turns <= 0:
        return []
    picks = {1, num_turns}
    for i in (1, 2, 3):
        picks.add(math.floor(1 + i * (num_turns - 1) / 4 + 0.5))
    return sorted(picks)


def choose_turns(traj_id: str, pool: str, num_turns: int, sft_turns: int | str = 1, eval_keep: float = 0.5,
                 seed: int = 0) -> list[int]:
    """Target turns (1-based) of the turn samples of one trajectory in `pool`; [] for cpt."""
    if pool == "cpt" or num_turns <= 0:
        return []
    if pool == "eval":
        return [t for t in eval_turns(num_turns) if stable_unit("eval-keep", seed, traj_id, t) < eval_keep]
    ranked = sorted(range(1, num_turns + 1), key=lambda t: (stable_unit("turn", seed, pool, traj_id, t), t))
    if pool == "rl":
        return ranked[:1]
    k = num_turns if sft_turns == "all" else int(sft_turns)
    return sorted(ranked[:k])


def choose_template(traj_id: str, pool: str, variants: list[str], seed: int = 0) -> str:
    """One template of the pool's list, uniform by stable hash of the trajectory."""
    if len(variants) == 1:
        return variants[0]
    return variants[int(stable_unit("template", seed, pool, traj_id) * len(variants))]


def sample_id(traj_id: str, pool: str, turn_idx: int, template: str) -> str:
    digest = hashlib.sha256(f"{traj_id}\x1f{pool}\x1f{turn_idx}\x1f{template}".encode()).hexdigest()
    return digest[:24]
