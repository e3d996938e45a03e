"""The bundled torch trainer and the shard dataset (import name `training`)."""
