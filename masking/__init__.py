"""Turn-level information-theoretic loss masking (SPEC §5)."""
