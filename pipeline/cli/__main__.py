"""``python -m pipeline.cli`` is ``lwm``."""

from pipeline.cli import entry

entry()
