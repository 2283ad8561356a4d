"""No module of the project uses a private (underscore) name of uvicorn, uvloop, httptools, asyncio or Django
(issue 34: a library's documented interface beats its internals).

Each module of ``oaifront``, ``front_operations``, ``chat``, ``images``, ``models_list``, ``devhorde`` and ``bench``
is read with ``ast``: its imports, the attribute chains that start at a name bound to one of those libraries
(``asyncio.base_events._x``, ``ASGIHandler._y``), and in a class that subclasses one of their classes, the methods it
defines and the ``self.``/``super().`` attributes it reads that are the base class's underscore names. A dunder
(``__init__``) is public; the project's own underscore names are its own business.
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("oaifront", "front_operations", "chat", "images", "models_list", "devhorde", "bench")
LIBRARIES = frozenset({"uvicorn", "uvloop", "httptools", "asyncio", "django"})


def private(name: str) -> bool:
    """An underscore name that is not a dunder."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def library_of(module: str) -> str | None:
    top = module.split(".", maxsplit=1)[0]
    return top if top in LIBRARIES else None


@dataclass
class Finder(ast.NodeVisitor):
    """The private library names one module uses, as ``line: what`` strings."""

    bound: dict[str, str] = field(default_factory=dict)
    """A local name -> the dotted library path it is bound to (``asyncio``, ``django.core.handlers.asgi.Handler``)."""
    found: list[str] = field(default_factory=list)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if library_of(alias.name) is None:
                continue
            if any(private(part) for part in alias.name.split(".")):
                self.found.append(f"{node.lineno}: import {alias.name}")
            top = alias.name.split(".", maxsplit=1)[0]
            self.bound[alias.asname or top] = alias.name if alias.asname else top

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or library_of(module) is None:
            return
        for alias in node.names:
            path = f"{module}.{alias.name}"
            if any(private(part) for part in path.split(".")):
                self.found.append(f"{node.lineno}: from {module} import {alias.name}")
            self.bound[alias.asname or alias.name] = path

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain: list[str] = []
        inner: ast.expr = node
        while isinstance(inner, ast.Attribute):
            chain.insert(0, inner.attr)
            inner = inner.value
        if isinstance(inner, ast.Name) and inner.id in self.bound:
            for name in chain:
                if private(name):
                    self.found.append(f"{node.lineno}: {self.bound[inner.id]}.{'.'.join(chain)}")
                    break
            return  # the whole chain is judged once
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            base_path = self.dotted(base)
            if base_path is None:
                continue
            base_class = resolve(base_path)
            if base_class is None:
                continue
            for name in sorted(self.privates_used(node)):
                if hasattr(base_class, name):
                    self.found.append(f"{node.lineno}: class {node.name}({base_path}) uses {name}")
        self.generic_visit(node)

    def dotted(self, node: ast.expr) -> str | None:
        """The library path of a base class expression (``ASGIHandler``, ``security.SecurityMiddleware``)."""
        chain: list[str] = []
        while isinstance(node, ast.Attribute):
            chain.insert(0, node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.bound:
            return ".".join([self.bound[node.id], *chain])
        return None

    @staticmethod
    def privates_used(node: ast.ClassDef) -> set[str]:
        """Underscore names the class defines as methods or reads as ``self.x`` / ``super().x``."""
        names = {
            item.name
            for item in node.body
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and private(item.name)
        }
        for inner in ast.walk(node):
            if isinstance(inner, ast.Attribute) and private(inner.attr):
                value = inner.value
                is_self = isinstance(value, ast.Name) and value.id == "self"
                is_super = isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"
                if is_self or is_super:
                    names.add(inner.attr)
        return names


def resolve(path: str) -> object | None:
    """The object at a dotted library path, or None when it is not importable as such."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name, None)
            if found is None:
                return None
        return found
    return None


def private_uses(source: str) -> list[str]:
    finder = Finder()
    finder.visit(ast.parse(source))
    return finder.found


def project_modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def test_the_walk_covers_every_package() -> None:
    modules = project_modules()
    assert {path.relative_to(ROOT).parts[0] for path in modules} == set(PACKAGES)
    assert ROOT / "oaifront" / "guards.py" in modules


@pytest.mark.parametrize("path", project_modules(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_private_name_of_the_serving_libraries(path: Path) -> None:
    assert private_uses(path.read_text()) == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from asyncio.base_events import _format_handle", ["1: from asyncio.base_events import _format_handle"]),
        (
            "import asyncio\nasyncio.base_events._run_until_complete_cb",
            ["2: asyncio.base_events._run_until_complete_cb"],
        ),
        (
            "from uvicorn.protocols.http import httptools_impl as h\nh.HttpToolsProtocol._start_asgi_task",
            ["2: uvicorn.protocols.http.httptools_impl.HttpToolsProtocol._start_asgi_task"],
        ),
        (
            "from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol\n"
            "class Door(HttpToolsProtocol):\n    def _should_upgrade(self):\n        return False\n",
            ["2: class Door(uvicorn.protocols.http.httptools_impl.HttpToolsProtocol) uses _should_upgrade"],
        ),
        (
            "from django.core.handlers.asgi import ASGIHandler\n"
            "class H(ASGIHandler):\n    async def __call__(self, s, r, d):\n        self._middleware_chain\n",
            ["2: class H(django.core.handlers.asgi.ASGIHandler) uses _middleware_chain"],
        ),
        ("import django.conf\ndjango.conf.settings._wrapped", ["2: django.conf.settings._wrapped"]),
        # public, dunder, or the project's own
        ("import asyncio\nasyncio.get_running_loop().call_soon", []),
        (
            "from django.utils.deprecation import MiddlewareMixin\n"
            "class M(MiddlewareMixin):\n    def __init__(self):\n        self._own = 1\n",
            [],
        ),
        ("from chat import runtime\nruntime._runtimes", []),
    ],
)
def test_the_finder_sees_what_it_must(source: str, found: list[str]) -> None:
    assert private_uses(source) == found
