"""lwmkit: weighted token-loss shards for language world models."""
