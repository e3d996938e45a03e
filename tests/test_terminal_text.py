"""Terminal text helpers: escape removal, carriage-return collapse, paste markers, full-screen programs."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from stages.ingest.terminal_text import (
    clean_terminal_text,
    clean_tool_output,
    collapse_overwrites,
    drop_control_chars,
    full_screen_after,
    keystroke_action,
    remove_bracketed_paste,
    replace_full_screen,
)


def test_progress_bar_collapses_to_its_final_state():
    text = "Downloading\r\n  [#     ]  10%\r  [###   ]  50%\r  [######] 100%\r\nDone\r\n"
    assert collapse_overwrites(text) == "Downloading\n  [######] 100%\nDone\n"


def test_shorter_overwrite_keeps_the_tail_like_a_terminal_and_erase_line_clears_it():
    assert collapse_overwrites("abcdef\rXY") == "XYcdef"
    assert collapse_overwrites("abcdef\r\x1b[KXY") == "XY"
    assert collapse_overwrites("abcdef\r\x1b[2KXY") == "XY"


def test_backspace_moves_left_and_characters_overwrite():
    # What readline prints when "b" is typed and then erased.
    assert collapse_overwrites("$ ab\x08 \x08c") == "$ ac"


def test_colors_cursor_modes_and_titles_are_removed():
    text = "\x1b]0;user@box: ~\x07\x1b[?2004h\x1b[01;32muser@box\x1b[00m:\x1b[01;34m~\x1b[00m$ \x1b[?25l"
    assert collapse_overwrites(text) == "user@box:~$ "


def test_text_without_escapes_is_returned_unchanged():
    text = "plain\ttext\nwith lines\n"
    assert collapse_overwrites(text) is text


def test_bracketed_paste_markers_are_dropped_and_the_pasted_text_kept():
    assert remove_bracketed_paste("\x1b[200~echo hi\nls\x1b[201~") == "echo hi\nls"


def test_full_screen_drawing_becomes_one_placeholder_and_the_shell_after_it_stays():
    text = 'vim a.txt\r\n\x1b[?1049h\x1b[H\x1b[2J~\r\n~\r\n"a.txt" 3L\x1b[?1049l\r$ '
    replaced, still_full_screen = replace_full_screen(text, "vim")
    assert not still_full_screen
    assert clean_terminal_text(replaced) == "vim a.txt\n\n[full-screen program: vim]\n$ "


def test_full_screen_state_carries_across_chunks():
    first, inside = replace_full_screen("less log\r\n\x1b[?1049hpage 1", "less")
    assert inside and first.endswith("[full-screen program: less]\n")
    second, inside = replace_full_screen("page 2\x1b[?1049l$ ", "less", inside)
    assert (second, inside) == ("$ ", False)
    assert full_screen_after("\x1b[?1049h", False) and not full_screen_after("\x1b[?1049hx\x1b[?1049l", False)


def test_unnamed_full_screen_program_gets_a_generic_placeholder():
    assert replace_full_screen("\x1b[?1049hdraw", None)[0] == "\n[full-screen program]\n"


def test_clean_terminal_text_drops_control_characters_but_keeps_tabs():
    assert clean_terminal_text("a\x07b\tc\x0fd\r\n") == "ab\tcd\n"
    assert drop_control_chars("x\x00y\x7fz\n") == "xyz\n"


def test_clean_tool_output_keeps_other_control_bytes():
    # Tool output is data: a literal EOT in a packet dump stays; only escapes and overwrites change.
    assert clean_tool_output("\x1b[31mERR\x1b[0m \x04\r\n") == "ERR \x04\n"


def test_keystroke_action_is_canonical_json_with_optional_duration():
    assert keystroke_action("ls\n", 0.5) == '[{"keystrokes": "ls\\n", "duration": 0.5}]'
    assert json.loads(keystroke_action("\x03")) == [{"keystrokes": "\x03"}]


@given(st.text(alphabet=st.sampled_from(list("ab \n\r\x08\x1b[];?0123456789mKhl~\x07")), max_size=60))
def test_cleaned_terminal_text_never_contains_escape_or_overwrite_characters(text):
    cleaned = clean_terminal_text(text)
    assert not any(ch in cleaned for ch in "\x1b\r\x08\x07")


@given(st.text(alphabet=st.characters(blacklist_characters="\x1b\r\x08"), max_size=80))
def test_collapse_is_the_identity_on_text_without_escapes_or_overwrites(text):
    assert collapse_overwrites(text) == text


def test_a_huge_cursor_move_or_insert_stops_at_the_margin_instead_of_filling_memory():
    """``ESC[999999999@`` once inserted a billion blanks (a 13-byte observation took gigabytes); a count of more
    digits than Python converts raised ValueError. Both now stop at the margin, as a terminal stops at its width."""
    from stages.ingest.terminal_text import MAX_COLUMNS

    for seq, kept in (("\x1b[999999999@", 3), ("\x1b[999999999C", 3), ("\x1b[" + "9" * 5000 + "C", 3),
                      ("\x1b[999999999G", 1)):  # G is absolute: each x lands on the last column, over the one before
        out = clean_tool_output((seq + "x") * 3)
        assert len(out) <= MAX_COLUMNS + 3 and out.count("x") == kept, (seq[:12], len(out))
    assert clean_tool_output("abc\x1b[2Dz\x1b[5@q") == "azq    c"  # small counts act as before
    assert clean_tool_output("ab\x1b[3Cc") == "ab   c"
    long_line = "y" * (MAX_COLUMNS + 10)
    assert clean_tool_output(long_line + "\x1b[5Cz") == long_line + "z"  # past the margin: no move, no text lost
