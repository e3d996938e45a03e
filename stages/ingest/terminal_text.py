"""Terminal text: what a screen shows, recovered from the bytes a program wrote to it.

Raw terminal output carries colors, cursor moves, carriage-return redraws (progress bars),
bracketed-paste markers, mode switches and whole full-screen programs drawn on the alternate
screen. SPEC §4 wants observations as the agent saw them, with escape codes removed and ``\\r``
overwrites collapsed. The helpers here do that line by line:

- `collapse_overwrites` emulates one line of a terminal: ``\\r`` returns to column 0, backspace
  moves left, erase-in-line (``ESC[K``) and the few horizontal cursor moves are applied, and every
  other escape sequence (colors, modes, titles) is dropped. A progress bar therefore becomes its
  final state. Vertical cursor moves are not emulated: lines redrawn with cursor-up stay as
  separate lines.
- `remove_bracketed_paste` drops the ``ESC[200~`` / ``ESC[201~`` markers and keeps the pasted text.
- `replace_full_screen` replaces everything drawn on the alternate screen (vim, less, htop) by one
  placeholder line, ``[full-screen program: vim]``; a screen-by-screen redraw is not text a model
  can learn from, and the shell output after the program exits is kept.
- `clean_terminal_text` chains them for terminal recordings; `clean_tool_output` only removes
  escape codes and collapses overwrites (tool outputs keep their other bytes).

Terminal actions are keystroke JSON (SPEC §4): `keystroke_action` writes
``[{"keystrokes": "ls\\n", "duration": 0.5}]``.
"""

from __future__ import annotations

import re

from stages.ingest.common import canonical_json

PASTE_START = "\x1b[200~"
PASTE_END = "\x1b[201~"
FULL_SCREEN_ENTER = ("\x1b[?1049h", "\x1b[?1047h", "\x1b[?47h")
FULL_SCREEN_LEAVE = ("\x1b[?1049l", "\x1b[?1047l", "\x1b[?47l")

# One terminal token: a CSI sequence, a string sequence (OSC/DCS/PM/APC, possibly unterminated),
# another two-byte escape, a carriage return, a backspace, or a run of plain text.
_TOKEN = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b[\]P^_X][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[ -/]*[0-~]"
    r"|\x1b"
    r"|\r|\x08"
    r"|[^\x1b\r\x08]+"
)
_FULL_SCREEN_SWITCH = re.compile(r"\x1b\[\?(?:1049|1047|47)([hl])")
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_ESCAPE_OR_OVERWRITE = re.compile(r"[\x1b\r\x08]")
# The right margin of the terminal a line is drawn on: cursor moves and inserted blanks stop there, as a real
# terminal stops them at its width, so a few bytes (``ESC[999999999C``) cannot ask for a gigabyte of blanks.
# Text itself is never cut: a line written without a terminal may be longer.
MAX_COLUMNS = 4096


def keystroke_action(keys: str, duration: float | None = None) -> str:
    """Canonical terminal action: ``[{"keystrokes": keys, "duration": seconds}]`` (duration when known)."""
    step: dict[str, object] = {"keystrokes": keys}
    if duration is not None:
        step["duration"] = duration
    return canonical_json([step])


def remove_bracketed_paste(text: str) -> str:
    """Drop bracketed-paste markers, keeping the pasted text itself."""
    return text.replace(PASTE_START, "").replace(PASTE_END, "")


def collapse_overwrites(text: str) -> str:
    """Apply ``\\r``, backspace and erase-in-line per line; drop every other escape sequence."""
    if not _ESCAPE_OR_OVERWRITE.search(text):
        return text
    lines = text.replace("\r\n", "\n").split("\n")
    return "\n".join(_render_line(line) if _ESCAPE_OR_OVERWRITE.search(line) else line for line in lines)


def _render_line(line: str) -> str:
    cells: list[str] = []
    col = 0
    for token in _TOKEN.findall(line):
        if token == "\r":
            col = 0
        elif token == "\x08":
            col = max(0, col - 1)
        elif token.startswith("\x1b["):
            col = _apply_csi(cells, col, token)
        elif token.startswith("\x1b"):
            continue  # colors' siblings: charset switches, keypad modes, titles
        else:
            if col > len(cells):
                cells.extend(" " * (col - len(cells)))
            cells[col : col + len(token)] = token
            col += len(token)
    return "".join(cells)


def _apply_csi(cells: list[str], col: int, seq: str) -> int:
    """Apply a line-local CSI sequence to `cells`; return the new cursor column."""
    final, params = seq[-1], seq[2:-1]
    if params.startswith("?") or not re.fullmatch(r"\d*", params):
        return col  # private modes and multi-parameter sequences (colors) do not move the cursor
    n = (int(params) if len(params) <= 6 else MAX_COLUMNS) if params else None  # larger counts: the margin
    if final == "K":
        if not n:
            del cells[col:]
        elif n == 1:
            cells[: col + 1] = " " * min(col + 1, len(cells))
        else:
            cells.clear()
    elif final == "G":
        col = min(max(0, (n or 1) - 1), MAX_COLUMNS)
    elif final == "C":
        col = max(col, min(col + (n or 1), MAX_COLUMNS))
    elif final == "D":
        col = max(0, col - (n or 1))
    elif final == "P":
        del cells[col : col + (n or 1)]
    elif final == "X":
        end = min(len(cells), col + (n or 1))
        cells[col:end] = " " * max(0, end - col)
    elif final == "@":  # blanks pushed past the margin fall off the line, but no text already there
        width = max(len(cells), MAX_COLUMNS)
        cells[col:col] = " " * min(n or 1, max(0, width - col))
        del cells[width:]
    return col


def drop_control_chars(text: str) -> str:
    """Remove C0 control characters other than tab and newline (bells, shift-in/out, stray ESC)."""
    return _CONTROL_CHARS.sub("", text)


def replace_full_screen(text: str, program: str | None = None, in_full_screen: bool = False) -> tuple[str, bool]:
    """Replace what is drawn on the alternate screen by ``[full-screen program: NAME]``.

    `in_full_screen` says whether `text` starts on the alternate screen (its placeholder was
    written earlier); the returned flag says whether it ends there.
    """
    if not in_full_screen and "\x1b[?" not in text:
        return text, False
    label = f"[full-screen program: {program}]" if program else "[full-screen program]"
    out: list[str] = []
    pos = 0
    for match in _FULL_SCREEN_SWITCH.finditer(text):
        entering = match.group(1) == "h"
        if entering and not in_full_screen:
            out.append(text[pos : match.start()])
            out.append(f"\n{label}\n")
            in_full_screen = True
        elif not entering and in_full_screen:
            in_full_screen = False
        else:
            if not in_full_screen:
                out.append(text[pos : match.start()])
        pos = match.end()
    if not in_full_screen:
        out.append(text[pos:])
    return "".join(out), in_full_screen


def full_screen_after(text: str, in_full_screen: bool = False) -> bool:
    """Whether the terminal is on the alternate screen after `text` has been written."""
    for match in _FULL_SCREEN_SWITCH.finditer(text):
        in_full_screen = match.group(1) == "h"
    return in_full_screen


def clean_terminal_text(text: str) -> str:
    """What a terminal recording shows: paste markers, escapes and controls gone, overwrites applied."""
    return drop_control_chars(collapse_overwrites(remove_bracketed_paste(text)))


def clean_tool_output(text: str) -> str:
    """A tool's captured output with ANSI escape codes removed and ``\\r`` overwrites collapsed."""
    return collapse_overwrites(text)
