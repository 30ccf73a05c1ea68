"""The packages import downward only, and no module imports itself round a circle. The layers:
corpus/ at the bottom; evaluation/, model/ and app/ (the runtime) on corpus/ alone; training/ on
those; export/ on those but training/; benchmarks/ on anything but the command; rotkws/ (the
command) on top; nothing outside benchmarks/ and rotkws/ imports benchmarks/. Read from the source:
every import statement (inside functions too) and every module named to importlib."""
import ast
from collections import defaultdict

import pytest

from conftest import REPO

PACKAGES = ("corpus", "evaluation", "model", "app", "training", "export", "benchmarks", "rotkws")
MAY_IMPORT = {
    "corpus": set(),
    "evaluation": {"corpus"},
    "model": {"corpus"},
    "app": {"corpus"},
    "training": {"corpus", "evaluation", "model", "app"},
    "export": {"corpus", "evaluation", "model", "app"},
    "benchmarks": set(PACKAGES) - {"rotkws"},
    "rotkws": set(PACKAGES),
}
BY_NAME = ("import_module", "find_spec")   # importlib's functions that take a module's name


def module_name(path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path) -> list[tuple[int, str]]:
    """(line, module) for every import in the file: statements, with `from X import Y` naming the
    module X.Y where there is one, and string literals handed to importlib by name."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                is_module = (REPO / sub.replace(".", "/")).with_suffix(".py").is_file() or \
                    (REPO / sub.replace(".", "/") / "__init__.py").is_file()
                out.append((node.lineno, sub if is_module else base))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in BY_NAME:
            out += [(node.lineno, a.value) for a in node.args[:1]
                    if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return out


def imports(package: str) -> list[tuple[str, int, str]]:
    """(file, line, imported package) for every import of another of PACKAGES in `package`."""
    return [(str(path.relative_to(REPO)), line, name.split(".")[0])
            for path in sorted((REPO / package).rglob("*.py")) for line, name in imported(path)
            if name.split(".")[0] in PACKAGES and name.split(".")[0] != package]


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_only_the_layers_below_it(package):
    wrong = [f"{f}:{line} imports {target}" for f, line, target in imports(package)
             if target not in MAY_IMPORT[package]]
    assert not wrong, "imports up the layers:\n" + "\n".join(wrong)


def test_no_module_imports_itself_round_a_circle():
    """Within and across packages, lazy imports included (app/demo.py and app/demo_enroll.py once
    imported each other, one of them inside functions)."""
    modules = {module_name(p): p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")}
    graph = defaultdict(set)
    for name, path in modules.items():
        graph[name] |= {m for _, m in imported(path) if m in modules and m != name}
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):                                       # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while not part or part[-1] != v:
                part.append(stack.pop())
                on_stack.discard(part[-1])
            if len(part) > 1:
                circles.append(sorted(part))

    for v in sorted(modules):
        if v not in index:
            visit(v)
    assert not circles, f"modules that import each other: {circles}"


def test_the_reader_sees_imports_inside_functions_and_by_name():
    found = {(f, t) for f, _, t in imports("rotkws")}
    assert ("rotkws/eval_cli.py", "training") in found                    # inside a function
    assert ("export/calibrate.py", "evaluation") in {(f, t) for f, _, t in imports("export")}
    tree = ast.parse("import importlib\nimportlib.import_module('training.cli')\n")
    path = REPO / "app" / "_probe.py"
    try:
        path.write_text(ast.unparse(tree))
        assert (2, "training.cli") in imported(path)
    finally:
        path.unlink()


def test_every_package_says_what_it_imports():
    for package in PACKAGES:
        doc = ast.get_docstring(ast.parse((REPO / package / "__init__.py").read_text())) or ""
        assert "import" in doc.lower(), f"{package}/__init__.py's docstring does not say what it imports"
