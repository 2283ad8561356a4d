"""The container files: the image installs the runtime lock and the distribution, never the test or lint
tools, and ``compose.yaml`` sets only variables something in the image reads (no Docker daemon is needed: the files
are read as text and YAML)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from chat.settings import FrontSettings, environment_variable

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("chat", "images", "models_list", "front_operations", "oaifront", "devhorde")


def dockerfile_instructions() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments left out."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def read_by_the_image() -> set[str]:
    """The environment variables the image's processes read: the front's settings, every name the packages' sources
    spell out (``os.environ.get("DJANGO_SECRET_KEY")``, ``ENV_SCENARIO = "DEVHORDE_SCENARIO"``) and the ``$NAME`` the
    Dockerfile's command line expands."""
    names = {environment_variable(name) for name in FrontSettings.model_fields}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            names |= set(re.findall(r"\"([A-Z][A-Z0-9_]{2,})\"", path.read_text(encoding="utf-8")))
    (command,) = [line for line in dockerfile_instructions() if line.startswith("CMD ")]
    names |= set(re.findall(r"\$\{?([A-Z_]+)", command))
    return names


def test_the_image_installs_the_runtime_dependencies_and_the_distribution_only() -> None:
    runs = [line for line in dockerfile_instructions() if line.startswith("RUN ") and "pip install" in line]
    assert len(runs) == 2, runs
    assert runs[0] == "RUN python -m pip install -r /tmp/requirements.txt && rm /tmp/requirements.txt"
    assert "pip install --no-deps /tmp/src" in runs[1]
    assert "COPY requirements.txt /tmp/requirements.txt" in dockerfile_instructions()
    assert not [line for line in dockerfile_instructions() if "requirements-" in line]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    tools = {pin.split("==")[0].lower() for group in project["dependency-groups"].values() for pin in group}
    runtime_lock = (ROOT / "requirements.txt").read_text(encoding="utf-8").lower()
    assert [tool for tool in tools if f"\n{tool}==" in runtime_lock] == []
    assert not [line for line in dockerfile_instructions() if set(re.findall(r"[\w-]+", line.lower())) & tools]


def test_the_image_copies_every_package_the_distribution_holds() -> None:
    """The distribution's packages and ``docs/`` (the target of the link ``front_operations/guides``) go to the
    build, the project and the devhorde, which the distribution leaves out, to the working directory."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    copied = {match for line in dockerfile_instructions() for match in re.findall(r"^COPY (\w+) /tmp/src/", line)}
    included = {pattern.rstrip("*") for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert copied == {*included, "docs"}
    assert (ROOT / "front_operations" / "guides").readlink() == Path("../docs")
    assert "WORKDIR /app" in dockerfile_instructions()
    in_the_working_directory = {
        match for line in dockerfile_instructions() for match in re.findall(r"^COPY (\w+) /app/\1$", line)
    }
    assert in_the_working_directory == {"oaifront", "devhorde"}


def test_compose_sets_only_variables_the_image_reads() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    read = read_by_the_image()
    set_by_compose = {
        (service, variable) for service, spec in compose["services"].items() for variable in spec.get("environment", {})
    }
    assert ("front", "HORDE_OAI_LOG_LEVEL") in set_by_compose
    assert sorted(pair for pair in set_by_compose if pair[1] not in read) == []
