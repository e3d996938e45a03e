"""Pipeline stages: pure, deterministic transformations over Arrow data."""
