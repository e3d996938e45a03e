"""desktop_render: UIA trees → compact indexed lines (real OpenCUA trees and hand-written corners)."""

from __future__ import annotations

import json

import pytest

from schemas.errors import InvalidRecord
from stages.ingest.desktop_render import (
    EMPTY_SCREEN,
    RenderLimits,
    element_at,
    flatten_uia_tree,
    render_uia_tree,
)

SESSION = "opencua-raw/session-20241106114028"


@pytest.fixture(scope="module")
def snapshots(shared_data):
    """The 32 trees of a11y.jsonl, in file order."""
    with open(shared_data / SESSION / "a11y.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["axtree"] for line in f if line.strip()]


def node(role, name="", box=(0, 0, 100, 100), children=(), **props):
    out = {"Name": name, "ControlType": f"{role}Control", "Children": list(children), **props}
    if box is not None:
        out["BoundingRectangle"] = dict(zip(("left", "top", "right", "bottom"), box))
    return out


def test_real_trees_render_the_same_twice_and_within_the_cap(snapshots):
    assert len(snapshots) == 32
    for tree in snapshots:
        first = render_uia_tree(tree)
        assert render_uia_tree(json.loads(json.dumps(tree))) == first
        assert len(first) <= RenderLimits().max_chars
        assert all(line.startswith("[") for line in first.splitlines())  # one element per line


def test_taskbar_keeps_named_and_interactive_nodes_and_drops_empty_panes(snapshots):
    lines = render_uia_tree(snapshots[0]).splitlines()
    # 29 nodes; the unnamed panes at [94..993], [993..1366], [993..1185] and the unnamed custom control go.
    assert len(lines) == 25
    assert lines[0] == '[ 0] | Pane | name="Taskbar" | bounds=[0,728][1366,768]'
    assert lines[1] == '[ 1] | Button | name="Start" | bounds=[0,728][48,768]'
    assert "[11] | Button | bounds=[993,728][1017,768]" in lines  # an unnamed tray button is still clickable
    text = "\n".join(lines)
    for gone in ("bounds=[94,728][993,768]", "bounds=[993,728][1366,768]", "bounds=[904,728][953,768]", "Custom"):
        assert gone not in text


def test_real_unicode_and_escapes_stay_intact(snapshots):
    text = render_uia_tree(snapshots[0])
    assert 'name="扬声器: Muted"' in text
    assert "Scenes: 未命名 – 1 running window" in text
    assert "Microsoft\u200b Edge" in text  # a zero-width space in the window title is kept
    # A multi-line tooltip stays on its element's line, its line breaks escaped.
    assert 'name="Huorong Internet Security\\r\\nVersion: 5.0.76.1\\r\\nDefinition: 2024-11-05 12:36"' in text


def test_settings_window_prunes_invisible_icon_and_redundant_nodes(snapshots):
    settings = snapshots[6]  # the Settings window with the brightness tooltip (time_stamp 30693.68)
    assert settings["time_stamp"] == 30693.6820158
    text = render_uia_tree(settings)
    assert 'name="Clipboard"' not in text  # a list item with zero-area bounds
    assert 'name="Pop-up"' not in text  # a zero-area window ...
    assert '[ 2] | ToolTip | name="78" | bounds=[541,134][578,167]' in text  # ... whose visible child stays
    assert "\ue7f4" not in text and 'name=""' not in text  # icon-font glyph labels
    assert text.count('name="Home"') == 1  # the button's own label child repeats its name
    assert text.count('name="Night light settings"') == 1
    assert '| Slider | name="Change brightness for the built-in display" | bounds=[344,183][624,215]' in text
    assert len(text.splitlines()) == 57


def test_hand_written_unicode_names_are_kept():
    tree = node(
        "Window",
        "メモ帳 — 無題",
        (0, 0, 800, 600),
        [node("Button", "保存 💾", (10, 10, 90, 40)), node("Text", "Ünïcödé ✓ 😀👍🏽", (10, 50, 300, 70))],
    )
    assert render_uia_tree(tree) == (
        '[ 0] | Window | name="メモ帳 — 無題" | bounds=[0,0][800,600]\n'
        '[ 1] | Button | name="保存 💾" | bounds=[10,10][90,40]\n'
        '[ 2] | Text | name="Ünïcödé ✓ 😀👍🏽" | bounds=[10,50][300,70]'
    )


def test_properties_become_fields_and_flags():
    tree = node(
        "Window",
        "Dialog",
        children=[
            node("CheckBox", "Remember me", AutomationId="remember", ToggleState=1, IsKeyboardFocusable=True),
            node("Edit", "Password", IsPassword=True, HasKeyboardFocus=True, Value="secret"),
            node("Button", "OK", IsEnabled=False),
            node("TreeItem", "Folder", ExpandCollapseState=0, IsSelected=True),
            node("Button", "Hidden", IsOffscreen=True),
        ],
    )
    lines = render_uia_tree(tree).splitlines()
    assert lines[1:] == [
        '[ 1] | CheckBox | name="Remember me" | id=remember | bounds=[0,0][100,100] | focusable, checked',
        '[ 2] | Edit | name="Password" | value="secret" | bounds=[0,0][100,100] | focused, password',
        '[ 3] | Button | name="OK" | bounds=[0,0][100,100] | disabled',
        '[ 4] | TreeItem | name="Folder" | bounds=[0,0][100,100] | selected, collapsed',
    ]


def test_other_spellings_of_nodes_and_bounds_are_read():
    tree = {
        "name": "Root",
        "control_type": "PaneControl",
        "bounding_rectangle": {"x": 5, "y": 6, "w": 10, "h": 20},
        "children": [{"name": "Go", "role": "Button", "bounds": [1, 2, 3.6, 4]}],
    }
    assert (
        render_uia_tree(tree)
        == '[ 0] | Pane | name="Root" | bounds=[5,6][15,26]\n[ 1] | Button | name="Go" | bounds=[1,2][4,4]'
    )
    # A node without bounds is kept (nothing says it is invisible), shown without a bounds field.
    assert render_uia_tree(node("Button", "Anywhere", box=None)) == '[ 0] | Button | name="Anywhere"'


def test_element_cap_ends_with_a_count_of_what_was_left_out():
    tree = node("Window", "Big", (0, 0, 2000, 2000), [node("Button", f"b{i}", (0, i, 10, i + 1)) for i in range(1000)])
    lines = render_uia_tree(tree).splitlines()
    assert len(lines) == 301
    assert lines[299].startswith('[299] | Button | name="b298"')
    assert lines[-1] == "… (701 more elements)"


def test_character_cap_and_long_names_are_bounded():
    tree = node("Window", "W", children=[node("Text", "x" * 5000)] + [node("Button", f"button {i}") for i in range(50)])
    text = render_uia_tree(tree, RenderLimits(max_elements=300, max_chars=600, max_text_chars=300))
    assert len(text) <= 600
    assert '"' + "x" * 300 + '…"' in text
    assert text.endswith("more elements)")
    shown = len(text.splitlines()) - 1
    assert text.splitlines()[-1] == f"… ({52 - shown} more elements)"


def test_a_tree_with_nothing_visible_renders_as_empty_screen():
    tree = node("Pane", "", children=[node("Group", ""), node("Button", "Gone", (5, 5, 5, 50))])
    assert render_uia_tree(tree) == EMPTY_SCREEN


def test_deep_trees_do_not_hit_the_recursion_limit():
    tree = node("Group", "level 0")
    cursor = tree
    for depth in range(1, 5000):
        child = node("Group", f"level {depth}")
        cursor["Children"] = [child]
        cursor = child
    assert len(flatten_uia_tree(tree)) == 5000
    assert render_uia_tree(tree).splitlines()[-1] == "… (4700 more elements)"


@pytest.mark.parametrize(
    "bad",
    [
        node("Window", "W", children=["not a node"]),
        {"Name": "W", "ControlType": "WindowControl", "Children": {"a": 1}},
        node("Window", "W", box=None, BoundingRectangle="left=0"),
        {"Name": "W", "BoundingRectangle": {"left": 0, "top": 0, "right": "wide", "bottom": 3}},
    ],
)
def test_malformed_trees_raise_invalid_record(bad):
    with pytest.raises(InvalidRecord) as err:
        render_uia_tree(bad)
    assert err.value.reason == "malformed_tree"


def test_element_at_picks_the_smallest_element_under_the_point():
    tree = node(
        "Window", "W", (0, 0, 500, 500), [node("List", "L", (0, 0, 200, 200), [node("ListItem", "a", (0, 0, 200, 20))])]
    )
    elements = flatten_uia_tree(tree)
    assert element_at(elements, 10, 10) == 2
    assert element_at(elements, 10, 100) == 1
    assert element_at(elements, 400, 400) == 0
    assert element_at(elements, 600, 10) is None
    assert element_at(elements, 10, 10, shown=2) == 1  # elements past the rendered cap are not referred to
