"""``requirements.txt`` (the install lock) and ``pyproject.toml`` (the project file) pin the same packages."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def canonical(requirement: str) -> str:
    """``Name==1.0`` with the name normalised as PEP 503 does (``horde_sdk`` and ``Horde-SDK`` are one package)."""
    name, separator, version = requirement.strip().partition("==")
    assert separator, f"not pinned with ==: {requirement!r}"
    return f"{re.sub(r'[-_.]+', '-', name).lower()}=={version.strip()}"


def pyproject_pins() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    groups = project["dependency-groups"]
    return [*project["project"]["dependencies"], *(pin for group in groups.values() for pin in group)]


def requirements_pins() -> list[str]:
    lines = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    return [line for line in (line.split("#", 1)[0].strip() for line in lines) if line]


def test_requirements_and_pyproject_pin_the_same_packages() -> None:
    assert sorted(map(canonical, requirements_pins())) == sorted(map(canonical, pyproject_pins()))


def test_pyproject_has_the_runtime_test_and_lint_groups() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert set(project["dependency-groups"]) == {"test", "lint"}
    assert "django==6.1.3" in map(canonical, project["project"]["dependencies"])
    assert "pytest==9.2.0" in map(canonical, project["dependency-groups"]["test"])
    assert "mypy==2.4.1" in map(canonical, project["dependency-groups"]["lint"])


def test_no_package_is_pinned_twice() -> None:
    names = [canonical(pin).split("==")[0] for pin in pyproject_pins()]
    assert len(names) == len(set(names))


def test_every_test_module_has_a_basename_of_its_own() -> None:
    """The test folders are not packages, so pytest imports each test module by its basename: two test files of one
    name in different folders stop the whole run at collection ("import file mismatch")."""
    names = sorted(path.name for path in (Path(__file__).resolve().parents[1]).rglob("test_*.py"))
    assert len(names) > 100
    assert sorted({name for name in names if names.count(name) > 1}) == []
