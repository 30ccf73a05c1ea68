"""The packages import downward only: app/ and corpus/ (the runtime and the data) import none of
model/, training/, export/, benchmarks/; evaluation/ imports only app/ and corpus/; model/ only
corpus/; training/ not export/; nothing outside benchmarks/ imports benchmarks/. Read from the
source, every import statement (inside functions too)."""
import ast

import pytest

from conftest import REPO

PACKAGES = ("app", "corpus", "evaluation", "model", "training", "export", "benchmarks")
MAY_IMPORT = {
    "corpus": set(),
    "app": {"corpus"},
    "evaluation": {"app", "corpus"},
    "model": {"corpus"},
    "training": {"app", "corpus", "evaluation", "model"},
    "export": {"app", "corpus", "evaluation", "model", "training"},
    "benchmarks": set(PACKAGES),
}


def imports(package: str) -> list[tuple[str, int, str]]:
    """(file, line, imported package) for every import of another of PACKAGES in `package`."""
    out = []
    for path in sorted((REPO / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [package] if node.level else [node.module or ""]
            else:
                continue
            out += [(str(path.relative_to(REPO)), node.lineno, n.split(".")[0]) for n in names
                    if n.split(".")[0] in PACKAGES and n.split(".")[0] != package]
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_only_the_layers_below_it(package):
    wrong = [f"{f}:{line} imports {target}" for f, line, target in imports(package)
             if target not in MAY_IMPORT[package]]
    assert not wrong, "imports up the layers:\n" + "\n".join(wrong)


def test_the_reader_sees_imports_inside_functions():
    found = {(f, t) for f, _, t in imports("export")}
    assert ("export/enroll.py", "training") in found and ("export/calibrate.py", "evaluation") in found
