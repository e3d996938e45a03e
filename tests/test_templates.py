"""World-model system prompt templates: twelve variants per domain, field survival, user templates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.config import DEFAULTS
from schemas.errors import ConfigError
from schemas.trajectory import DOMAINS, Demonstration, Source, SystemPrompt, Trajectory, Turn
from stages.templates import list_variants, render_system
from stages.templates.fill import FIELD_NAMES, demonstrations_block, fill_template
from stages.templates.library import NOTE_KEYS, domain_notes

BUILTIN = [f"v{i}" for i in range(12)]

# A typical system prompt: short task, a few lines of action space and state, one demonstration.
TYPICAL = SystemPrompt(
    task_description="Rename every *.log file in /var/app to *.log.old.",
    action_space=(
        "Each action is one JSON object:\n"
        '{"action": "run", "command": str} | {"action": "wait", "seconds": float}\n'
        "Commands run in the session's shell."
    ),
    initial_state="root@box:/app# ls\nREADME.md  logs  src\nroot@box:/app# ",
    demonstrations=[Demonstration('{"action": "run", "command": "pwd"}', "/app\nroot@box:/app# ")],
    simulation_instruction="Print exactly what the shell would show, ending with the next prompt.",
)

# Values that break naive formatting: braces, format specs, `$` templates, regex back-references,
# placeholder look-alikes and a trailing space.
TRICKY = SystemPrompt(
    task_description='Set ${HOME}/cfg to {"a": {0}} and print {task_description} with 100% of $PATH',
    action_space='{"name": "write", "arguments": {"path": str, "text": str}}\n\\1 \\g<0> {{literal}} {action_space!r}',
    initial_state="{initial_state}\n$ echo {} $1 ",
    demonstrations=[
        Demonstration(
            '{"name": "write", "arguments": {"path": "/a", "text": "{x}"}}', '{"ok": true, "$ref": "#/{id}"}'
        ),
        Demonstration("{demonstrations}", ""),
    ],
    simulation_instruction='Return {observation} as JSON: {"result": ...}; never print ${SECRET}.',
)


def make_traj(domain: str, system: SystemPrompt) -> Trajectory:
    return Trajectory("t1", domain, "t1", Source(), system, [Turn('{"action": "run"}', "ok")])


def field_pieces(system: SystemPrompt) -> list[str]:
    """Every non-empty value that must appear verbatim: the fields and each demonstration part."""
    pieces = [system.task_description, system.action_space, system.initial_state, system.simulation_instruction]
    for demo in system.demonstrations:
        pieces += [demo.action, demo.observation]
    return [p for p in pieces if p and p.strip()]


def line_before(text: str, value: str) -> str:
    start = text.index(value)
    return text[:start].rstrip("\n").rsplit("\n", 1)[-1]


@pytest.mark.parametrize("domain", DOMAINS)
def test_twelve_distinct_builtin_variants_per_domain(domain):
    assert list_variants(domain) == BUILTIN
    texts = [render_system(make_traj(domain, TYPICAL), v) for v in BUILTIN]
    assert len(set(texts)) == 12


def test_same_variant_differs_between_domains():
    for variant in BUILTIN:
        texts = {render_system(make_traj(d, TYPICAL), variant) for d in DOMAINS}
        assert len(texts) == len(DOMAINS), variant


@pytest.mark.parametrize("domain", DOMAINS)
def test_v0_is_about_thirty_lines_and_v11_is_much_longer(domain):
    traj = make_traj(domain, TYPICAL)
    v0, v11 = render_system(traj, "v0"), render_system(traj, "v11")
    v0_lines, v11_lines = len(v0.splitlines()), len(v11.splitlines())
    assert 25 <= v0_lines <= 36
    assert v11_lines >= 75
    assert v11_lines >= 2.5 * v0_lines
    assert len(v11) >= 5 * len(v0)


@pytest.mark.parametrize("domain", DOMAINS)
def test_variant_length_grows_from_constraint_to_specification(domain):
    traj = make_traj(domain, TYPICAL)
    sizes = [len(render_system(traj, v)) for v in BUILTIN]
    # The sft range v2..v11 runs from brief to long: each third is longer than the previous one.
    assert max(sizes[2:5]) < min(sizes[8:11]) and sizes[11] == max(sizes)
    assert sizes[0] < sizes[5]


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_field_survives_verbatim_in_every_variant(domain):
    traj = make_traj(domain, TRICKY)
    for variant in BUILTIN:
        text = render_system(traj, variant)
        for piece in field_pieces(TRICKY):
            assert piece in text, (variant, piece)
        # The demonstration with an empty observation is still shown, marked as empty.
        assert "Action:\n{demonstrations}\nObservation:\n(empty)" in text


@pytest.mark.parametrize("domain", DOMAINS)
def test_no_placeholder_is_left_unfilled(domain):
    known = {*FIELD_NAMES, *NOTE_KEYS, "domain"}
    for variant in BUILTIN:
        text = render_system(make_traj(domain, TYPICAL), variant)
        assert not {name for name in re.findall(r"\{([a-z_]+)\}", text)} & known, variant


TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60).filter(lambda s: s.strip() != "")


@settings(max_examples=60, deadline=None)
@given(
    domain=st.sampled_from(DOMAINS),
    variant=st.sampled_from(BUILTIN),
    fields=st.tuples(TEXT, TEXT, TEXT, TEXT, TEXT, TEXT),
)
def test_arbitrary_field_text_survives_and_rendering_is_deterministic(domain, variant, fields):
    task, space, state, act, obs, instruction = fields
    system = SystemPrompt(task, space, state, [Demonstration(act, obs)], instruction)
    text = render_system(make_traj(domain, system), variant)
    for piece in fields:
        assert piece in text
    assert render_system(make_traj(domain, system), variant) == text


SPARSE = SystemPrompt(
    task_description="Open the settings app.",
    action_space='{"action_type": "click", "x": int, "y": int}',
    initial_state=None,
    demonstrations=[],
    simulation_instruction="   ",
)


@pytest.mark.parametrize("domain", DOMAINS)
def test_empty_optional_fields_leave_no_empty_section(domain):
    full_traj, sparse_traj = make_traj(domain, TYPICAL), make_traj(domain, SPARSE)
    for variant in BUILTIN:
        full, sparse = render_system(full_traj, variant), render_system(sparse_traj, variant)
        # The line that introduces each optional field in the full prompt is gone with the field.
        for value in (TYPICAL.initial_state, "Example 1", TYPICAL.simulation_instruction):
            assert line_before(full, value) not in sparse, (variant, line_before(full, value))
        assert "Example 1" not in sparse and "\n\n\n" not in sparse
        assert not sparse.rstrip().endswith(":")
        assert SPARSE.task_description in sparse and SPARSE.action_space in sparse


def test_empty_action_space_drops_its_heading():
    system = SystemPrompt(task_description="Find the capital of Peru.", action_space="")
    text = render_system(make_traj("search", system), "v0")
    assert "Available actions:" not in text
    assert "Task of the agent:\nFind the capital of Peru." in text


def test_demonstrations_block_layout():
    demos = [Demonstration("ls", "a  b"), Demonstration("mkdir x", "")]
    assert demonstrations_block(demos) == (
        "Example 1\nAction:\nls\nObservation:\na  b\n\nExample 2\nAction:\nmkdir x\nObservation:\n(empty)"
    )
    assert demonstrations_block([]) == ""


def test_user_template_is_used_by_name(tmp_path):
    (tmp_path / "terse.txt").write_text(
        "Simulate {environment}.\n\nTask: {task_description}\n\nTools:\n{action_space}\n\n"
        "Start:\n{initial_state}\n\n{demonstrations}\n\nNote: {simulation_instruction}\n"
    )
    dirs = (str(tmp_path),)
    assert list_variants("os", dirs) == ["terse", *BUILTIN]
    system = SystemPrompt("Close the window.", "click x y", None, [Demonstration("click 1 1", "[1] pane")], "Be exact.")
    assert render_system(make_traj("os", system), "terse", dirs) == (
        f"Simulate {domain_notes('os')['environment']}.\n\nTask: Close the window.\n\nTools:\nclick x y\n\n"
        "Example 1\nAction:\nclick 1 1\nObservation:\n[1] pane\n\nNote: Be exact."
    )


def test_user_template_missing_placeholders_still_carries_every_field(tmp_path):
    (tmp_path / "bare.txt").write_text("You are the environment.\n\nGoal: {task_description}\n")
    text = render_system(make_traj("terminal", TYPICAL), "bare", [tmp_path])
    assert text == (
        "You are the environment.\n\n"
        f"Goal: {TYPICAL.task_description}\n\n"
        f"## Action space\n{TYPICAL.action_space}\n\n"
        f"## Initial state\n{TYPICAL.initial_state}\n\n"
        f"## Demonstrations\n{demonstrations_block(TYPICAL.demonstrations)}\n\n"
        f"## Simulation instruction\n{TYPICAL.simulation_instruction}"
    )


def test_field_sharing_a_paragraph_with_an_empty_one_is_appended():
    template = "Intro.\n\nState and rules:\n{initial_state}\n{simulation_instruction}"
    fields = {
        "task_description": "",
        "action_space": "",
        "initial_state": "",
        "demonstrations": "",
        "simulation_instruction": "Keep ids stable.",
    }
    assert fill_template(template, fields, {}) == "Intro.\n\n## Simulation instruction\nKeep ids stable."


def test_unknown_braces_in_templates_stay_and_crlf_is_normalized(tmp_path):
    (tmp_path / "raw.txt").write_bytes(b'Reply as JSON {"ok": {x}} {{literal}}\r\n\r\nTask: {task_description}\r\n')
    text = render_system(make_traj("mcp", SPARSE), "raw", (str(tmp_path),))
    assert text.startswith('Reply as JSON {"ok": {x}} {{literal}}\n\nTask: Open the settings app.')
    assert "\r" not in text


def test_domain_specific_file_wins_and_later_directory_overrides(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (first / "mine.txt").write_text("generic {task_description}")
    (first / "android.mine.txt").write_text("android only {task_description}")
    (second / "v0.txt").write_text("replaced v0 {task_description}")
    dirs = (str(first), str(second))
    android, web = make_traj("android", SPARSE), make_traj("web", SPARSE)
    assert render_system(android, "mine", dirs).startswith("android only Open the settings app.")
    assert render_system(web, "mine", dirs).startswith("generic Open the settings app.")
    assert render_system(web, "v0", dirs).startswith("replaced v0 Open the settings app.")
    assert render_system(web, "v0", (str(first),)) == render_system(web, "v0")


def test_unknown_variant_is_a_config_error_naming_the_known_ones():
    with pytest.raises(ConfigError) as err:
        render_system(make_traj("web", TYPICAL), "v12")
    message = str(err.value)
    assert "'v12'" in message and "v0, v1, v2" in message and "v11" in message


def test_bad_template_sources_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        list_variants("web", (str(tmp_path / "missing"),))
    (tmp_path / "kitchen.v1.txt").write_text("x")
    with pytest.raises(ConfigError, match=r"kitchen\.v1\.txt"):
        list_variants("web", (str(tmp_path),))
    (tmp_path / "kitchen.v1.txt").unlink()
    (tmp_path / "blank.txt").write_text(" \n")
    with pytest.raises(ConfigError, match=r"blank\.txt is empty"):
        list_variants("web", (str(tmp_path),))
    with pytest.raises(ConfigError, match="unknown domain"):
        list_variants("desktop")


def test_configured_pool_mapping_names_existing_variants():
    mapping = DEFAULTS["templates"]["mapping"]
    assert mapping["sft"] == BUILTIN[2:]
    for domain in DOMAINS:
        available = set(list_variants(domain))
        for variants in mapping.values():
            assert set(variants) <= available


@pytest.mark.parametrize(
    ("domain", "marker"),
    [
        ("terminal", "exit code"),
        ("android", "| bounds=[x1,y1][x2,y2] |"),
        ("web", "RootWebArea"),
        ("os", "rect=(left,top,right,bottom)"),
        ("mcp", "Input validation error"),
        ("search", "No results found"),
        ("swe", "git diff"),
    ],
)
def test_specification_variant_describes_the_domain(domain, marker):
    notes = domain_notes(domain)
    assert set(notes) == {"domain", *NOTE_KEYS}
    assert marker in render_system(make_traj(domain, SPARSE), "v11")
    assert marker not in render_system(make_traj(domain, SPARSE), "v0")


def test_builtin_variant_files_mention_all_five_fields():
    variants_dir = Path(__file__).resolve().parent.parent / "stages" / "templates" / "variants"
    for variant in BUILTIN:
        text = (variants_dir / f"{variant}.txt").read_text()
        for name in FIELD_NAMES:
            assert text.count("{" + name + "}") == 1, (variant, name)


def _terminal_notes_action_space() -> str:
    import tomllib

    path = Path(__file__).resolve().parents[1] / "stages" / "templates" / "domains" / "terminal.toml"
    with path.open("rb") as f:
        return tomllib.load(f)["action_space"].strip()


@pytest.mark.parametrize("variant", BUILTIN)
def test_a_terminal_trajectory_without_an_action_space_is_rendered_with_the_domains(variant):
    """SPEC §4 fixes the terminal action space: a log that declares none (asciinema, mini-swe-agent,
    terminus) gets it, in every variant; a declared one, other action forms and other domains do not."""
    fixed = _terminal_notes_action_space()
    assert "keystrokes" in fixed
    keys = [Turn('[{"keystrokes": "pwd\\n", "duration": 0.1}]', "/app\nroot@box:/app# "),
            Turn('[{"keystrokes": "ls\\n"}, {"keystrokes": ""}]', "README.md\nroot@box:/app# ")]
    bare = SystemPrompt(task_description="List the files.", action_space="")

    def render(domain: str, turns: list[Turn], system: SystemPrompt = bare) -> str:
        return render_system(Trajectory("t1", domain, "t1", Source(), system, turns), variant)

    assert fixed in render("terminal", keys)
    declared = SystemPrompt(task_description="List the files.", action_space="Type shell commands.")
    assert fixed not in render("terminal", keys, declared) and "Type shell commands." in render("terminal", keys, declared)
    tool_calls = [Turn('{"name": "navigate", "arguments": {"target": "/login"}}', "ok"), keys[0]]
    assert fixed not in render("terminal", tool_calls)  # one action that is not keystrokes: no fixed space
    assert fixed not in render("mcp", keys)  # only the terminal domain has one


def test_a_field_already_standing_in_the_prompt_as_whole_lines_is_not_appended_again():
    """An evaluator's system prompt read back as the simulation instruction already holds the initial screen:
    the field is not said twice. A short value that only occurs inside a sentence still gets its heading."""
    screen = "[1] button OK\n[2] text Delivering to Santa Clara"
    fields = {"simulation_instruction": f"You render the page.\n\nState before the first action:\n{screen}\n\nRules.",
              "initial_state": screen, "task_description": "order", "action_space": "", "demonstrations": ""}
    shown = fill_template("{simulation_instruction}", fields, {})
    assert shown.count(screen) == 1 and "## Initial state" not in shown
    assert shown.endswith("## Task\norder")  # "order" occurs only inside a word of another line


def test_the_implied_action_space_fills_a_slot_but_is_never_appended(tmp_path):
    """A terminal trajectory declaring no action space is rendered with the domain's fixed one where the template
    has {action_space}; a template without that slot gets no "## Action space" the trajectory never declared."""
    from stages.templates import reload_templates
    from stages.templates.library import fixed_action_space

    traj = Trajectory("t", "terminal", "k", Source(), SystemPrompt("Count the files.", ""),
                      [Turn('[{"keystrokes": "ls\\n"}]', "a b")])
    (tmp_path / "echo.txt").write_text("Task: {task_description}\n")
    (tmp_path / "slot.txt").write_text("Task: {task_description}\n\nActions: {action_space}\n")
    reload_templates()
    space = fixed_action_space("terminal")
    assert space and render_system(traj, "echo", (str(tmp_path),)) == "Task: Count the files."
    assert render_system(traj, "slot", (str(tmp_path),)) == f"Task: Count the files.\n\nActions: {space}"
    reload_templates()
