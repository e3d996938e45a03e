"""Keep modes: how a turn's keep ratio becomes loss weights on its observation tokens (SPEC §5).

- ``weight`` (default): every observation token of the turn gets weight = keep;
- ``turn``: the whole turn is kept (weight 1.0 on every token) with probability keep, else 0.0;
- ``token``: each token is kept (1.0) with probability keep, else 0.0.

The renderer calls `token_weights(keep, mode, key, n_tokens)` once per observation segment
(its tokens including the closing end-of-turn token); `turn_weight` is the per-turn fast path
for the two modes that give every token of a turn the same weight.

Randomness comes only from stable hashes, never from global RNG state or arrival order, so
the same turn gets the same weights on any executor, worker count or retry. A draw is a
uniform number ``u`` in [0, 1): the top 53 bits of an 8-byte little-endian word of
SHAKE-256 (an extendable-output hash) of a mode prefix and the key; the turn is (or the
token is) kept when ``u < keep``, so keep 1 always keeps and keep 0 never does. Token ``i``
uses word ``i`` of one SHAKE-256 stream, so a turn's first ``n`` token draws do not depend on
how many are asked for. The key should name the turn: `masking_key(seed, traj_id, turn_idx)`
gives one, so a turn is masked the same way in every sample that contains it, and a new seed
gives a new, equally reproducible mask. This scheme is part of the determinism contract:
changing it changes output bytes.
"""

from __future__ import annotations

import hashlib
import struct

from schemas.errors import ConfigError

KEEP_MODES = ("weight", "turn", "token")
DEFAULT_KEEP_MODE = "weight"
_TURN_PREFIX = b"lwmkit/keep/turn\x00"
_TOKEN_PREFIX = b"lwmkit/keep/token\x00"
_UNIT = 2.0**-53


def check_keep_mode(mode: str) -> str:
    """`mode` if it is a known keep mode, else a one-line `ConfigError`."""
    if mode not in KEEP_MODES:
        raise ConfigError(f"unknown keep mode {mode!r} (expected one of {', '.join(KEEP_MODES)})")
    return mode


def masking_key(seed: int | str, traj_id: str, turn_idx: int) -> str:
    """The draw key of one turn: (seed, trajectory id, turn index), joined unambiguously."""
    return f"{seed}\x1f{traj_id}\x1f{turn_idx}"


def turn_draw(key: str) -> float:
    """The turn-level uniform draw in [0, 1) for `key`."""
    digest = hashlib.shake_256(_TURN_PREFIX + key.encode("utf-8")).digest(8)
    return (int.from_bytes(digest, "little") >> 11) * _UNIT


def token_draws(key: str, n_tokens: int) -> list[float]:
    """The first `n_tokens` token-level uniform draws in [0, 1) for `key`."""
    return [(word >> 11) * _UNIT for word in _token_words(key, n_tokens)]


def _token_words(key: str, n_tokens: int) -> tuple[int, ...]:
    _check_count(n_tokens)
    stream = hashlib.shake_256(_TOKEN_PREFIX + key.encode("utf-8")).digest(8 * n_tokens)
    return struct.unpack(f"<{n_tokens}Q", stream)


def _check_count(n_tokens: int) -> None:
    if n_tokens < 0:
        raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")


def _check_keep(keep: float) -> None:
    if not 0.0 <= keep <= 1.0:
        raise ValueError(f"keep must be in [0, 1], got {keep!r}")


def turn_weight(keep: float, mode: str, key: str) -> float | None:
    """The weight of every observation token of the turn, or None in ``token`` mode (use `token_weights`)."""
    _check_keep(keep)
    if check_keep_mode(mode) == "weight":
        return float(keep)
    if mode == "token":
        return None
    return 1.0 if turn_draw(key) < keep else 0.0


def same_weight(keep: float, mode: str, key: str) -> float | None:
    """The weight every observation token of the turn gets, when all get the same one (every mode but
    ``token``, and ``token`` with keep 0 or 1); None when each token is drawn (`token_weights`)."""
    weight = turn_weight(keep, mode, key)
    if weight is None and keep in (0.0, 1.0):  # what drawing gives (u < 1 always, u < 0 never), without hashing
        weight = float(keep)
    return weight


def token_weights(keep: float, mode: str, key: str, n_tokens: int) -> list[float]:
    """The weights of the `n_tokens` observation tokens of one turn, for any keep mode."""
    _check_count(n_tokens)
    weight = same_weight(keep, mode, key)
    if weight is not None:
        return [weight] * n_tokens
    # u < keep  <=>  (word >> 11) < keep * 2**53: both sides exact, so no float rounding decides a token.
    bound = keep * 2.0**53
    return [1.0 if (word >> 11) < bound else 0.0 for word in _token_words(key, n_tokens)]
