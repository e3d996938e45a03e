"""The world-model reward for the rl pool (strict extraction, rubric judge, rule verifiers).

`score_batch` is the core; `frameworks` wraps it for verl (``compute_score``) and TRL
(``trl_reward``). Importing this package needs nothing beyond the standard library and the
project's own modules.
"""

from stages.reward.core import (
    MAX_REWARD,
    RewardConfig,
    RewardInput,
    RewardResult,
    combine,
    score_batch,
    split_prompt,
)
from stages.reward.extract import Extraction, extract_prediction
from stages.reward.rubric import RubricScores, parse_judge_answer
from stages.reward.verifiers import NO_VERIFIER, VERIFIER_KINDS, verifier_kind, verify

__all__ = [
    "MAX_REWARD",
    "NO_VERIFIER",
    "VERIFIER_KINDS",
    "Extraction",
    "RewardConfig",
    "RewardInput",
    "RewardResult",
    "RubricScores",
    "combine",
    "extract_prediction",
    "parse_judge_answer",
    "score_batch",
    "split_prompt",
    "verifier_kind",
    "verify",
]
