"""Every third-party module the package imports is installed by what pyproject.toml declares: a runtime
dependency (or one it brings in), or the extra that the importing feature documents. A module that arrives
only with the test tools would work here and fail after a plain ``pip install``."""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "stages", "schemas", "masking", "training")
# Modules a feature's own extra installs (pyproject.toml); every other module must come with a plain install.
EXTRA_OF = {"torch": "train", "transformers": "train", "accelerate": "train", "matplotlib": "viz",
            "botocore": "s3"}  # botocore: only where the filesystem is s3fs (stages/store_answer.py)
# Imported only where an optional feature asks for it, each behind a one-line error naming what to install.
OPTIONAL = {
    "grpc": "Ray Client addresses (ray://): `ray[client]`, checked by pipeline/ray_executor.py",
    "psutil": "LWM_RAY_TIMELINE only, a profiling aid (pipeline/ray_worker.py)",
}


def imported_modules() -> dict[str, str]:
    """Top-level module → the first file that imports it (absolute imports only)."""
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return found


def _name(requirement: str) -> str:
    return re.split(r"[\s;\[<>=!~(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def installed_by(distribution: str, extras: tuple[str, ...] = ()) -> set[str]:
    """`distribution` and everything its requirements (with `extras`) bring in, as installed here."""
    seen: set[str] = set()
    todo = [(distribution, extras)]
    while todo:
        name, wanted = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for req in requires:
            marker = req.split(";", 1)[1] if ";" in req else ""
            extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
            if extra and extra.group(1) not in wanted:
                continue
            if "python_version" in marker and not _python_matches(marker):
                continue
            sub = re.search(r"\[([^\]]+)\]", req.split(";", 1)[0])
            todo.append((_name(req), tuple(s.strip() for s in sub.group(1).split(",")) if sub else ()))
    return seen


def _python_matches(marker: str) -> bool:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for op, wanted in re.findall(r"python_version\s*([<>=!]=?)\s*['\"]([\d.]+)['\"]", marker):
        have, want = tuple(map(int, version.split("."))), tuple(map(int, wanted.split(".")))
        if not {"<": have < want, "<=": have <= want, ">": have > want, ">=": have >= want, "==": have == want,
                "!=": have != want}[op]:
            return False
    return True


def test_every_imported_module_is_declared():
    providers = metadata.packages_distributions()
    closures: dict[str, set[str]] = {}
    missing = []
    for module, where in sorted(imported_modules().items()):
        if module in sys.stdlib_module_names or module in PACKAGES or module in OPTIONAL:
            continue
        extra = EXTRA_OF.get(module, "")
        if extra not in closures:
            closures[extra] = installed_by("lwmkit", (extra,) if extra else ())
        dists = {d.lower().replace("_", "-") for d in providers.get(module, [])}
        if not dists & closures[extra]:
            needs = f"lwmkit[{extra}]" if extra else "lwmkit"
            missing.append(f"{module} (imported by {where}; not installed by {needs}; here it comes from "
                           f"{sorted(dists) or 'nothing'})")
    assert not missing, "; ".join(missing)


def test_the_check_sees_what_is_imported():
    """The walk above finds imports inside functions too, and the closure follows extras only when asked."""
    modules = imported_modules()
    assert {"pydantic", "pyarrow", "torch", "yaml", "numpy"} <= set(modules)
    assert "torch" in installed_by("lwmkit", ("train",)) and "torch" not in installed_by("lwmkit")
    assert "pyyaml" in installed_by("lwmkit")  # what ray requires, for the DroidBot adapter
