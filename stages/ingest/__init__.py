"""Ingest adapters, one module per input format, and the registry that finds them."""
