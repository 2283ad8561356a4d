"""The project file and the locks agree: ``pyproject.toml`` declares the runtime dependencies as ranges (what a host
project installs from) and each pin of ``requirements.txt`` (the runtime lock `make run` installs) satisfies its range;
the test and lint tools are pinned alike in ``pyproject.toml``'s dependency groups and in ``requirements-test.txt`` and
``requirements-lint.txt``, which `make test` and `make lint` install on top of the runtime lock, and so is the installer
(uv, ``requirements-installer.txt``) that installs them.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCKS = {
    "runtime": "requirements.txt",
    "test": "requirements-test.txt",
    "lint": "requirements-lint.txt",
    "installer": "requirements-installer.txt",
}


def project() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def canonical(requirement: str) -> str:
    """``Name==1.0`` with the name normalised as PEP 503 does (``horde_sdk`` and ``Horde-SDK`` are one package)."""
    name, separator, version = requirement.strip().partition("==")
    assert separator, f"not pinned with ==: {requirement!r}"
    return f"{canonicalize_name(name)}=={version.strip()}"


def lock_lines(name: str) -> list[str]:
    """The lock's requirement lines, comments and blank lines left out (``-r`` includes kept as they are)."""
    lines = (ROOT / name).read_text(encoding="utf-8").splitlines()
    return [line for line in (line.split("#", 1)[0].strip() for line in lines) if line]


def lock_pins(name: str) -> list[str]:
    return [line for line in lock_lines(name) if not line.startswith("-")]


def runtime_ranges() -> dict[str, Requirement]:
    requirements = [Requirement(text) for text in project()["project"]["dependencies"]]
    return {canonicalize_name(requirement.name): requirement for requirement in requirements}


def test_each_runtime_pin_satisfies_its_pyproject_range() -> None:
    ranges = runtime_ranges()
    pins = {canonical(pin).split("==")[0]: canonical(pin).split("==")[1] for pin in lock_pins("requirements.txt")}
    assert sorted(pins) == sorted(ranges), "the runtime lock and pyproject's dependencies name different packages"
    outside = {name: (version, str(ranges[name].specifier)) for name, version in pins.items()}
    outside = {name: pair for name, pair in outside.items() if not ranges[name].specifier.contains(pair[0], True)}
    assert outside == {}


@pytest.mark.parametrize("requirement", ["Django>=5.2,<7"])
def test_a_host_keeps_its_django_from_the_lts_on(requirement: str) -> None:
    django = runtime_ranges()["django"]
    assert str(django.specifier) == str(Requirement(requirement).specifier)
    assert django.specifier.contains("5.2.0") and django.specifier.contains("6.1.3")
    assert not django.specifier.contains("5.1.15") and not django.specifier.contains("7.0")


def test_runtime_dependencies_are_ranges_not_pins() -> None:
    """A pin (``==``) in pyproject's dependencies would replace a host's own version of that package."""
    assert [str(r) for r in runtime_ranges().values() if any(s.operator == "==" for s in r.specifier)] == []


@pytest.mark.parametrize("group", ["test", "lint"])
def test_each_tool_lock_is_the_runtime_lock_plus_its_pyproject_group(group: str) -> None:
    lock = LOCKS[group]
    assert [line for line in lock_lines(lock) if line.startswith("-")] == ["-r requirements.txt"]
    groups = project()["dependency-groups"]
    assert sorted(map(canonical, lock_pins(lock))) == sorted(map(canonical, groups[group]))


def test_the_installer_lock_is_its_pyproject_group_alone() -> None:
    """uv, installed by the venv's pip before anything else (bin/ensure-venv): no ``-r``, nothing but the group."""
    lock = LOCKS["installer"]
    assert lock_lines(lock) == lock_pins(lock)
    assert sorted(map(canonical, lock_pins(lock))) == sorted(
        map(canonical, project()["dependency-groups"]["installer"])
    )
    assert [canonical(pin).split("==")[0] for pin in lock_pins(lock)] == ["uv"]


def test_pyproject_has_the_test_lint_and_installer_groups() -> None:
    groups = project()["dependency-groups"]
    assert set(groups) == {"test", "lint", "installer"}
    assert "pytest==9.2.0" in map(canonical, groups["test"])
    assert "mypy==2.4.1" in map(canonical, groups["lint"])


def test_no_package_is_locked_twice() -> None:
    names = [canonical(pin).split("==")[0] for lock in LOCKS.values() for pin in lock_pins(lock)]
    assert sorted({name for name in names if names.count(name) > 1}) == []


def test_every_lock_line_is_one_exact_pin() -> None:
    """The locks stay obvious to merge: ``Name==version`` a line (plus the tool locks' one ``-r`` include)."""
    for lock in LOCKS.values():
        assert [pin for pin in lock_pins(lock) if not re.fullmatch(r"[A-Za-z0-9_.-]+==[A-Za-z0-9_.+-]+", pin)] == []


def test_every_test_module_has_a_basename_of_its_own() -> None:
    """The test folders are not packages, so pytest imports each test module by its basename: two test files of one
    name in different folders stop the whole run at collection ("import file mismatch")."""
    names = sorted(path.name for path in (Path(__file__).resolve().parents[1]).rglob("test_*.py"))
    assert len(names) > 100
    assert sorted({name for name in names if names.count(name) > 1}) == []
