""".ci/container.py without building (`make container-check` builds and runs the images):
the Dockerfile has the targets and base ARGs it builds with, the CUDA default carries the torch
pyproject pins, the train extra holds what training imports (the image installs only it), an
image's user and environment are read as a runtime reads them, torch is found where it lies, and
the check skips, naming what is missing, where podman is not installed."""
import ast
import importlib.metadata
import importlib.util
import re
import shlex
import sys
import tomllib

import pytest

from conftest import REPO
from test_dockerfile import DOCKERFILE, stages

SPEC = importlib.util.spec_from_file_location("container", REPO / ".ci" / "container.py")   # a file, not a package
container = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(container)


def test_dockerfile_has_the_targets_and_base_args_the_check_builds_with():
    text = DOCKERFILE.read_text()
    froms = {name: ops for name, ops in stages(text).items()}
    assert {"serve", "train"} <= set(froms), f"stages: {sorted(froms)}"
    args = set(re.findall(r"^ARG (\w+)=", text, re.M))
    assert {"PYTHON_IMAGE", "TRAIN_IMAGE"} <= args, f"ARGs: {sorted(args)}"
    assert re.search(r"^FROM \$\{PYTHON_IMAGE\} AS serve$", text, re.M)
    assert re.search(r"^FROM \$\{TRAIN_IMAGE\} AS train$", text, re.M)


def test_cuda_default_carries_the_torch_pyproject_pins():
    """The train stage installs the `train` extra over the base's torch: a base with another torch
    would have pip replace it (several GB) instead of keeping it."""
    version = container.torch_pin().removeprefix("torch==")
    default = re.search(r"^ARG TRAIN_IMAGE=(\S+)", DOCKERFILE.read_text(), re.M)[1]
    assert default.split(":")[1].startswith(f"{version}-"), f"TRAIN_IMAGE={default}, pyproject pins torch=={version}"


def fake_root(tmp_path, passwd: str):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text(passwd)
    return tmp_path


PASSWD = "root:x:0:0:root:/root:/bin/bash\nrotkws:x:10001:10002::/home/rotkws:/usr/sbin/nologin\n"


@pytest.mark.parametrize("user, expected", [("10001:10001", "10001:10001"), ("rotkws", "10001:10002"),
                                            ("10001", "10001:10002"), (None, "0:0")])
def test_user_is_read_from_the_images_passwd(tmp_path, user, expected):
    uid, env = container.user_env(fake_root(tmp_path, PASSWD), {"User": user, "Env": ["PATH=/opt/venv/bin:/bin"]})
    assert uid == expected
    assert env["HOME"] == ("/root" if expected.startswith("0:") else "/home/rotkws")
    assert env["PATH"] == "/opt/venv/bin:/bin"


def test_env_home_wins_and_an_unknown_user_is_an_error(tmp_path):
    root = fake_root(tmp_path, PASSWD)
    assert container.user_env(root, {"User": "10001", "Env": ["HOME=/data"]})[1]["HOME"] == "/data"
    with pytest.raises(RuntimeError, match="USER 4242"):
        container.user_env(root, {"User": "4242"})


def test_command_runs_as_the_image_in_its_own_namespaces(tmp_path):
    root = fake_root(tmp_path, PASSWD)
    cfg = {"User": "rotkws", "Env": ["PATH=/opt/venv/bin:/bin", "X=1"], "WorkingDir": "/home/rotkws"}
    argv = container.in_image(root, cfg, ["rotkws", "demo"], mounts={"/srv/data": "/data"}, env={"X": "2"})
    assert argv[:5] == ["unshare", "--mount", "--pid", "--fork", "--net"]
    script = argv[-1]
    inner = shlex.split(script.split("exec ", 1)[1])
    assert inner[:6] == ["chroot", "--userspec=10001:10002", str(root), "/usr/bin/env", "-i",
                         "--chdir=/home/rotkws"]
    assert inner[-2:] == ["rotkws", "demo"] and "X=2" in inner and "X=1" not in inner
    assert f"mount -o remount,bind,ro {root}/data" in script            # the data, read-only
    shared = container.in_image(root, cfg, ["true"], net="/proc/1/ns/net")
    assert shared[:2] == ["nsenter", "--net=/proc/1/ns/net"] and "--net" not in shared[2:7]


def test_torch_is_found_where_pip_puts_it(tmp_path):
    site = tmp_path / "opt/venv/lib/python3.11/site-packages"
    for name in ("onnxruntime", "gradio", "numpy"):
        (site / name).mkdir(parents=True)
    assert container.torch_files(tmp_path) == []
    for name in ("torch", "torch-2.14.1.dist-info", "nvidia", "triton"):
        (site / name).mkdir()
    assert len(container.torch_files(tmp_path)) == 4


def test_skips_naming_what_is_missing(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))                      # nothing on it
    assert container.missing_tools() == list(container.TOOLS)
    monkeypatch.setenv("CI", "true")
    assert container.main([]) == 0
    assert "container check skipped: podman, mmdebstrap" in capsys.readouterr().out
    monkeypatch.setenv("CI", "false")
    assert container.main([]) == 2                                  # asked for by hand: it did not run


def third_party_imports(*folders: str) -> set[str]:
    own = {p.parent.name for p in REPO.glob("*/__init__.py")}
    found = set()
    for path in (p for folder in folders for p in (REPO / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in own}


def requirement_name(spec: str) -> str:
    return re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0].lower().replace("_", "-")


def test_train_extra_holds_what_training_and_export_import():
    """The train image installs `.[train]` alone (no `app`): every package training/, export/ and
    the layers under them import comes from that extra, the project's dependencies, or a
    requirement of one of those (Pillow through matplotlib)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    direct = {requirement_name(r) for r in project["optional-dependencies"]["train"] + project["dependencies"]}
    through = {requirement_name(r) for d in direct for r in (importlib.metadata.requires(d) or [])
               if "extra ==" not in r}
    dists = importlib.metadata.packages_distributions()
    missing = {m: dists.get(m) for m in third_party_imports("training", "export", "model", "evaluation", "corpus")
               if not {requirement_name(d) for d in dists.get(m, [m])} & (direct | through)}
    assert not missing, f"imported by training/export but not in pyproject's train extra: {missing}"


def test_kokoro_voices_come_from_the_image_else_from_the_mounted_data(tmp_path):
    cfg = {"WorkingDir": "/home/rotkws/rotkws"}
    assert container.voices_env(tmp_path, cfg, "/data") == {"ROTKWS_VOICES": "/data/tts/kokoro_v1_0_en"}
    shipped = tmp_path / "home/rotkws/rotkws/training/voices/kokoro_v1_0_en"
    shipped.mkdir(parents=True)
    for i in range(container.KOKORO_VOICES):
        (shipped / f"af_{i}.pt").touch()
    assert container.voices_env(tmp_path, cfg, "/data") == {}
