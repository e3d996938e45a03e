"""The Android UI-tree renderer on every real dump (both XML dialects) and on hand-made corners."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from schemas.errors import InvalidRecord
from stages.ingest.android_render import (
    DEFAULT_MAX_CHARS,
    DEFAULT_MAX_ELEMENTS,
    EMPTY_SCREEN,
    UIElement,
    elements_from_aitw,
    elements_from_droidbot,
    elements_from_xml,
    format_element,
    looks_like_view_xml,
    render_elements,
    render_view_xml,
)

LINE = re.compile(
    r"^\[ ?\d+\] \| [\w.$]+( \| res=\S+)?( \| text=\".*\")?( \| desc=\".*\")?( \| bounds=\[-?\d+,-?\d+\]\[-?\d+,-?\d+\])?( \| [a-z-]+)*$"
)


def real_dumps(shared_data: Path) -> list[Path]:
    dumps = sorted((shared_data / "uiautomator-xml").rglob("*.xml"))
    assert len(dumps) == 21  # 20 Appium page sources (shirates-core) + 1 raw dump (mobile-env)
    return dumps


def render_file(path: Path) -> str:
    return render_view_xml(path.read_text(encoding="utf-8"), path.name).text


def test_every_real_dump_renders_stably_in_the_line_format(shared_data):
    for path in real_dumps(shared_data):
        first, second = render_file(path), render_file(path)
        assert first == second, path.name
        assert len(first) <= DEFAULT_MAX_CHARS
        lines = first.split("\n")
        assert len(lines) <= DEFAULT_MAX_ELEMENTS + 1
        if first != EMPTY_SCREEN:
            for i, line in enumerate(lines):
                assert LINE.match(line), f"{path.name}: {line}"
                assert line.startswith(f"[{i:2d}]"), "indices run in document order from 0"
        assert looks_like_view_xml(path.read_text(encoding="utf-8")[:4096]), path.name


def test_appium_dialect_prunes_empty_layouts_and_keeps_known_elements(shared_data):
    text = render_file(shared_data / "uiautomator-xml/shirates-core/SettingsTopScreen.xml")
    lines = text.split("\n")
    # 79 view elements in the file; the nameless full-screen FrameLayout/LinearLayout wrappers (and
    # other empty layouts) go, their children move up.
    assert len(lines) == 62
    assert "android.widget.LinearLayout | bounds=[0,0][1080,2088]" not in text
    assert "android.widget.FrameLayout | bounds=[0,0][1080,2088]" not in text
    assert lines[0] == "[ 0] | android.widget.FrameLayout | res=android:id/content | bounds=[0,0][1080,2088]"
    assert (
        '[21] | android.widget.TextView | res=android:id/title | text="Network & internet" | bounds=[198,441][573,500]'
        in lines
    )


def test_raw_dialect_drops_zero_area_nodes_and_keeps_the_button(shared_data):
    text = render_file(shared_data / "uiautomator-xml/mobile-env/window_dump.example.xml")
    assert "navigationBarBackground" not in text  # bounds [0,0][0,0]
    assert (
        '[ 6] | android.widget.TextView | res=com.google.android.gm:id/welcome_tour_got_it | text="GOT IT" '
        "| bounds=[0,1647][1080,1794] | clickable"
    ) in text.split("\n")
    assert len(text.split("\n")) == 8  # of 20 nodes


def test_state_flags_from_real_screens(shared_data):
    base = shared_data / "uiautomator-xml/shirates-core"
    android1 = render_file(base / "Android1.xml")
    assert 'text="password1" | bounds=[44,627][1036,768] | clickable | long-clickable | password' in android1
    check = render_file(base / "RelativeMisc_check.xml").split("\n")
    assert check[2] == (
        '[ 2] | android.widget.CheckBox | res=android:id/checkApple | text="Apple" | bounds=[42,1449][200,1533] '
        "| clickable | checkable | checked"
    )
    assert check[3].endswith("| clickable | checkable")
    date = render_file(base / "DateAndTime_en.xml")
    assert (
        '[16] | android.widget.TextView | res=android:id/title | text="Date" | bounds=[66,764][179,838] | disabled'
        in date
    )
    anr = render_file(base / "AppIsNotResponding.xml")
    assert 'res=android:id/aerr_close | text="Close app" | bounds=[72,1016][1008,1148] | clickable' in anr


def test_japanese_screen_keeps_its_text(shared_data):
    text = render_file(shared_data / "uiautomator-xml/shirates-core/DateAndTime_ja.xml")
    assert 'desc="日付と時刻"' in text
    assert 'text="日時を自動的に設定"' in text
    assert 'text="2023年12月15日"' in text
    assert "\\u" not in text


def test_a_screen_of_only_empty_layouts_is_the_empty_marker(shared_data):
    path = shared_data / "uiautomator-xml/shirates-core/NodeForRootElementNotFound.xml"
    assert render_file(path) == EMPTY_SCREEN


def test_size_caps_end_with_a_count_of_what_was_left_out(shared_data):
    xml = (shared_data / "uiautomator-xml/shirates-core/PlayStoreGamesScreen.xml").read_text(encoding="utf-8")
    full = render_view_xml(xml)
    assert full.total == 81
    capped = render_view_xml(xml, max_elements=10)
    lines = capped.text.split("\n")
    assert len(lines) == 11 and lines[-1] == "… (71 more elements)"
    assert lines[:10] == full.text.split("\n")[:10]
    by_chars = render_view_xml(xml, max_chars=2000)
    assert len(by_chars.text) <= 2000
    assert by_chars.text.split("\n")[-1] == f"… ({81 - len(by_chars.shown)} more elements)"


def test_dtd_and_malformed_xml_are_refused():
    bomb = '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">]><hierarchy><node text="&lol;"/></hierarchy>'
    with pytest.raises(InvalidRecord) as exc:
        elements_from_xml(bomb)
    assert exc.value.reason == "unsafe_xml"
    with pytest.raises(InvalidRecord) as exc:
        elements_from_xml("<hierarchy><node></hierarchy>")
    assert exc.value.reason == "malformed_xml"


def test_invisible_parent_is_dropped_and_its_children_kept():
    xml = (
        '<hierarchy><node class="android.widget.FrameLayout" resource-id="a:id/panel" visible-to-user="false" '
        'bounds="[0,0][100,100]"><node class="android.widget.Button" text="Go" clickable="true" '
        'bounds="[10,10][50,50]"/></node>'
        '<android.widget.TextView text="Hidden" displayed="false" bounds="[0,0][9,9]"/></hierarchy>'
    )
    assert render_view_xml(xml).text == '[ 0] | android.widget.Button | text="Go" | bounds=[10,10][50,50] | clickable'


def test_appium_element_without_class_attribute_takes_its_tag():
    xml = '<hierarchy><android.widget.ImageView content-desc="Logo" bounds="[0,0][5,5]"/></hierarchy>'
    assert render_view_xml(xml).text == '[ 0] | android.widget.ImageView | desc="Logo" | bounds=[0,0][5,5]'


def test_deep_nesting_renders_without_recursion():
    depth = 5000
    xml = "<hierarchy>" + '<node class="L" bounds="[0,0][9,9]">' * depth + '<node text="leaf" class="T"/>'
    xml += "</node>" * depth + "</hierarchy>"
    assert render_view_xml(xml).text == '[ 0] | T | text="leaf"'


def test_element_at_picks_the_smallest_containing_element():
    screen = render_elements(
        [
            UIElement("Row", bounds=(0, 0, 1000, 200), flags=("clickable",)),
            UIElement("Label", text="Wi-Fi", bounds=(100, 50, 400, 150)),
            UIElement("Far", text="x", bounds=(0, 900, 10, 910)),
        ]
    )
    assert screen.element_at(200, 100) == 1
    assert screen.element_at(800, 100) == 0
    assert screen.element_at(500, 500) is None


def test_droidbot_views_and_aitw_detections_use_the_same_line_style():
    views = [
        {"temp_id": 0, "class": "android.widget.FrameLayout", "bounds": [[0, 0], [1080, 2400]], "visible": True},
        {
            "temp_id": 1,
            "class": "android.widget.Button",
            "resource_id": "com.app:id/ok",
            "text": "OK",
            "content_description": None,
            "bounds": [[42, 149], [147, 275]],
            "visible": True,
            "clickable": True,
            "enabled": True,
        },
        {
            "temp_id": 2,
            "class": "android.widget.TextView",
            "text": "gone",
            "bounds": [[0, 0], [5, 5]],
            "visible": False,
        },
    ]
    (ok,) = elements_from_droidbot(views)
    assert (
        format_element(3, ok)
        == '[ 3] | android.widget.Button | res=com.app:id/ok | text="OK" | bounds=[42,149][147,275] | clickable'
    )
    assert ok.key == "1"
    # AITW positions are (y, x, h, w); fractions of the screen are printed in thousandths.
    normalized = elements_from_aitw([[0.1, 0.2, 0.05, 0.3]], ["Search"], ["TEXT"])
    assert format_element(0, normalized[0]) == '[ 0] | TEXT | text="Search" | bounds=[200,100][500,150]'
    pixels = elements_from_aitw([[54, 17, 8, 12], [0, 0, 0, 4]], ["", "x"], ["ICON_HOME", "TEXT"])
    assert [format_element(i, e) for i, e in enumerate(pixels)] == ["[ 0] | ICON_HOME | bounds=[17,54][29,62]"]
