"""Turn-level information-theoretic loss masking (SPEC §5).

Per (action, observation) turn: word sets (`masking.words`) → the four statistics OL, Nov, Jac,
R (`masking.stats`) → the first matching category of a configurable table (`masking.table`,
`masking.classify`) → its keep ratio → token weights under a keep mode (`masking.keep`).
"""

from masking.classify import TurnScore, classify, keep_ratio, score_turn
from masking.keep import (
    DEFAULT_KEEP_MODE,
    KEEP_MODES,
    check_keep_mode,
    masking_key,
    same_weight,
    token_weights,
    turn_weight,
)
from masking.stats import TurnStats, stats_from_word_sets, turn_stats
from masking.table import Category, CategoryTable, default_table, load_table, load_table_file
from masking.words import word_set

__all__ = [
    "DEFAULT_KEEP_MODE",
    "KEEP_MODES",
    "Category",
    "CategoryTable",
    "TurnScore",
    "TurnStats",
    "check_keep_mode",
    "classify",
    "default_table",
    "keep_ratio",
    "load_table",
    "load_table_file",
    "masking_key",
    "same_weight",
    "score_turn",
    "stats_from_word_sets",
    "token_weights",
    "turn_stats",
    "turn_weight",
    "word_set",
]
