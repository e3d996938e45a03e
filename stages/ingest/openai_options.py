"""The options of the openai-messages adapter (``--opt KEY=VALUE``): what each one means and the values it takes.

The field options name a field or column of the record (``--opt messages_column=traj``); ``messages_path`` is a
dotted path into it. A value that is not text (``--opt messages_path=5`` reads as the number 5) names nothing.
"""

from __future__ import annotations

from typing import Any

from schemas.errors import OptionError
from stages.ingest.tool_calls import orphans_policy

OPENAI_OPTIONS = {
    "messages_path": "dotted path to the message list, with list indices (answer_generation.train_messages.-1)",
    "messages_column": "field/column holding the messages (default: messages, traj, TRAJECTORY, trajectory)",
    "tools_column": "field/column with the declared tools (default: tools, ENABLED_TOOLS)",
    "prompt_column": "field/column with the task prompt (default: PROMPT, prompt; else the first user message)",
    "task_column": "field/column with the task id used as split key (default: TASK, task_id, instance_id)",
    "id_column": "field/column with the native trajectory id (default: id, traj_id, session_id, ID)",
    "orphans": "quarantine (default) or skip: what to do with a tool result whose call is missing",
}


def check_openai_options(opts: dict[str, Any]) -> None:
    """Raise `OptionError` for an option value the adapter cannot use: ``orphans`` other than quarantine or skip,
    a field option that is not text."""
    orphans_policy(opts)
    for key in OPENAI_OPTIONS:
        value = opts.get(key)
        if key != "orphans" and value is not None and not isinstance(value, str):
            raise OptionError(key, f"must be a field name (text), not {value!r}")
