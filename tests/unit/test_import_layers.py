"""The apps' imports run one way: ``chat`` in layers (:data:`CHAT_LAYERS`), no cycle anywhere, each module alone.

Three checks, because a cycle or a back-import can hide from any one alone:

- **The import graph** read from the source (every ``import`` and ``from ... import``, at module level, inside a
  function, or under ``if TYPE_CHECKING:``) has no cycle, across the apps too (``chat`` <-> ``oaifront``). An import
  deferred into a function body still ties two modules together (``chat.errors`` once imported ``chat.screening``
  inside ``error_from_refusal`` while ``chat.screening`` imported ``chat.errors``), and a ``TYPE_CHECKING`` import
  ties them for the reader and the type checker, so both count.
- **The layers**: each ``chat`` module imports only modules of its own layer or the layers below it in
  :data:`CHAT_LAYERS`; nothing in ``chat`` imports another app (the app is reusable without the project); no view
  module imports another view module, and ``models_list`` imports no view module.
- **Each module imports alone** in a fresh interpreter: one process is started with the third-party libraries loaded
  and Django set up, and each module is imported in a child forked from it after every app module is dropped from
  ``sys.modules``, so the module under test is the first app module the child imports. A top-level cycle that only
  breaks in one import order fails here with its traceback.

``chat.errors`` is the bottom layer: the envelope, codes, statuses and the failure catalogue, importing nothing from
``chat``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ("chat", "images", "models_list", "front_operations", "oaifront", "devhorde")


def module_files(root: Path, apps: Iterable[str]) -> dict[str, Path]:
    """Every module of ``apps`` under ``root`` by dotted name (a package by its own name, for its ``__init__``)."""
    modules: dict[str, Path] = {}
    for app in apps:
        for path in sorted((root / app).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterable[str]:
    """Dotted names ``tree`` imports (``from a import b`` gives ``a`` and ``a.b``), ``if TYPE_CHECKING`` included."""
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)
        pending.extend(ast.iter_child_nodes(node))


def import_graph(root: Path, apps: Iterable[str]) -> dict[str, set[str]]:
    """The modules of ``apps`` each module imports: named ones, and the packages a submodule import runs first."""
    files = module_files(root, apps)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets: set[str] = set()
        for name in _imported_names(tree, module, path.name == "__init__.py"):
            parts = name.split(".")
            targets.update(".".join(parts[:end]) for end in range(1, len(parts) + 1) if ".".join(parts[:end]) in files)
        targets.discard(module)
        graph[module] = targets
    return graph


def import_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


CHAT_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("floor", ("chat", "chat.errors", "chat.limits", "chat.horde_url")),
    ("settings and metrics", ("chat.settings", "chat.cors_settings", "chat.metrics")),
    ("protocol: wire models, no I/O", ("chat.protocol",)),
    ("reading: bytes -> a validated request", ("chat.reading",)),
    ("horde: the clients, Redis readers, cancels, ports", ("chat.horde",)),
    ("rendering: native status -> replies, SSE framing", ("chat.rendering",)),
    ("waiting: the waiter and availability refusals", ("chat.waiting",)),
    ("streaming: buffered, relayed, pacing", ("chat.streaming",)),
    ("serving: the one path, its outcome, the record", ("chat.serving",)),
    ("views: the HTTP adapters", ("chat.views",)),
    ("the app: checks, URLs, ASGI wrapper", ("chat.apps", "chat.checks", "chat.urls", "chat.asgi")),
)
"""The layers of ``chat``, bottom first: a module imports only its own layer and the ones below. ``chat`` itself (its
``__init__`` imports only ``chat.horde_url``) is at the floor, since importing any submodule runs it."""

VIEW_MODULES: tuple[str, ...] = ("chat.views.chat_completions", "chat.views.responses", "chat.views.completions")
"""One module per API; the shared adapter modules of ``chat.views`` (the prelude, the event stream) are not here."""


IMAGE_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("protocol: wire models, no I/O", ("images", "images.protocol")),
    ("reading: bytes -> a validated plan", ("images.reading",)),
    ("horde: the image API calls, the conversion", ("images.horde", "images.convert")),
    ("serving: the wait, the answer, the record", ("images.service",)),
    ("views: the HTTP adapter", ("images.views",)),
    ("the app: URLs", ("images.apps", "images.urls")),
)
"""The layers of ``images``, bottom first, as :data:`CHAT_LAYERS`: a module imports only its own layer and the ones
below (and any ``chat`` module; ``chat`` imports no ``images`` module)."""


def chat_layer(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = CHAT_LAYERS) -> int:
    """The index in ``layers`` (:data:`CHAT_LAYERS`) of a module of that app (its longest listed prefix)."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    assert best is not None, f"{module} is in no layer"
    return best[1]


def test_the_apps_have_no_import_cycle() -> None:
    graph = import_graph(ROOT, APPS)
    assert len(graph) > 40  # every module was read
    assert import_cycles(graph) == []


def edges(graph: Mapping[str, set[str]]) -> list[tuple[str, str]]:
    """Every import of the graph as ``(module, imported module)``, sorted."""
    return sorted((module, target) for module, targets in graph.items() for target in targets)


def app_of(module: str) -> str:
    return module.split(".", maxsplit=1)[0]


def test_chat_imports_run_down_its_layers_only() -> None:
    upward = [
        f"{module} ({CHAT_LAYERS[chat_layer(module)][0]}) -> {target} ({CHAT_LAYERS[chat_layer(target)][0]})"
        for module, target in edges(import_graph(ROOT, APPS))
        if app_of(module) == app_of(target) == "chat" and chat_layer(target) > chat_layer(module)
    ]
    assert upward == []


def test_images_imports_run_down_its_layers_only() -> None:
    upward = [
        f"{module} -> {target}"
        for module, target in edges(import_graph(ROOT, APPS))
        if app_of(module) == app_of(target) == "images"
        and chat_layer(target, IMAGE_LAYERS) > chat_layer(module, IMAGE_LAYERS)
    ]
    assert upward == []


def test_images_imports_only_chat_below_it() -> None:
    """The images app reuses the chat app's pieces and no other app's; no app but the project, the operations routes
    (the OpenAPI document describes its route) and the model list imports it."""
    graph = import_graph(ROOT, APPS)
    assert [
        (module, target)
        for module, target in edges(graph)
        if app_of(module) == "images" and app_of(target) not in {"images", "chat"}
    ] == []
    assert {app_of(module) for module, target in edges(graph) if app_of(target) == "images"} <= {
        "front_operations",
        "images",
        "models_list",
        "oaifront",
    }


def test_the_distributions_packages_import_neither_the_project_nor_the_devhorde() -> None:
    """The wheel holds ``chat``, ``images``, ``models_list`` and ``front_operations`` (``pyproject.toml``); the
    project (``oaifront``) and the devhorde stay in the checkout, so none of those four imports them, and the
    operations routes are imported by the project alone among the apps."""
    graph = import_graph(ROOT, APPS)
    installed = {"chat", "images", "models_list", "front_operations"}
    assert [
        (module, target)
        for module, target in edges(graph)
        if app_of(module) in installed and app_of(target) in {"oaifront", "devhorde"}
    ] == []
    assert {app_of(module) for module, target in edges(graph) if app_of(target) == "front_operations"} == {
        "front_operations",
        "oaifront",
    }


def test_chat_imports_no_other_app() -> None:
    graph = import_graph(ROOT, APPS)
    assert [(module, target) for module, target in edges(graph) if app_of(module) == "chat" != app_of(target)] == []


def test_no_view_module_imports_another_and_models_list_imports_none() -> None:
    crossing = [
        (module, target)
        for module, target in edges(import_graph(ROOT, APPS))
        if (module in VIEW_MODULES or app_of(module) == "models_list") and target in VIEW_MODULES
    ]
    assert crossing == []


def test_chat_errors_is_the_bottom_layer() -> None:
    """The envelope module imports nothing from ``chat`` (or any other app): everything else may import it."""
    assert import_graph(ROOT, APPS)["chat.errors"] == set()


def test_a_deferred_or_type_checking_import_circle_is_found(tmp_path: Path) -> None:
    """The checker's own test: the old circle's shape (an import inside a function closing the loop) is a cycle."""
    package = tmp_path / "front"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "errors.py").write_text(
        "def refusal():\n    from front.screening import log_line  # deferred\n\n    return log_line\n"
    )
    (package / "screening.py").write_text("from front import errors\n\nlog_line = errors\n")
    (package / "contract.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from front.views import View\n"
    )
    (package / "views.py").write_text("from . import contract\n")
    graph = import_graph(tmp_path, ["front"])
    assert graph["front.errors"] == {"front", "front.screening"}
    assert graph["front.contract"] == {"front", "front.views"}  # a TYPE_CHECKING import counts
    assert graph["front.views"] == {"front", "front.contract"}
    assert import_cycles(graph) == [["front.contract", "front.views"], ["front.errors", "front.screening"]]


IMPORT_EACH_ALONE = textwrap.dedent(
    """
    import importlib, os, sys, traceback

    apps, modules, preload = sys.argv[1].split(","), sys.argv[2].split(","), sys.argv[3].split(",")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "oaifront.settings")
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception:
            pass  # only a speed-up: the child imports what it needs anyway
    import django

    django.setup()
    failed = 0
    for module in modules:
        pid = os.fork()
        if pid == 0:
            for name in [name for name in sys.modules if name.split(".")[0] in apps]:
                del sys.modules[name]
            try:
                importlib.import_module(module)
            except BaseException:
                print(f"--- import {module} alone failed:", file=sys.stderr)
                traceback.print_exc()
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        failed += status != 0
    sys.exit(1 if failed else 0)
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="forks a child per module")
def test_each_module_imports_alone_in_a_fresh_interpreter() -> None:
    graph = import_graph(ROOT, APPS)
    modules = sorted(module for module in graph if not module.endswith("__main__"))
    preload: set[str] = set()
    for path in module_files(ROOT, APPS).values():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                preload.add(node.module)
            elif isinstance(node, ast.Import):
                preload.update(alias.name for alias in node.names)
    preload = {name for name in preload if name.split(".")[0] not in APPS}
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH_ALONE, ",".join(APPS), ",".join(modules), ",".join(sorted(preload))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
