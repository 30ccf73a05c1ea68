"""The Dockerfile's two images, built with podman and run: `make container-check` (needs root,
podman, mmdebstrap; ~12 min here), and the serve image alone at the end of CI (.ci/run). Writes
the `container` section of BENCHMARKS.md.

    python .ci/container.py [--only serve|train] [--keep] [--no-write]

1. Bases: Debian bookworm's own Python 3.11 (mmdebstrap, BASE_PACKAGES) imported once and tagged
   by a hash of its package list, in place of PYTHON_IMAGE; for `train`, that base with the torch
   pyproject.toml pins in a venv on PATH, in place of TRAIN_IMAGE (the CUDA image carries the
   pinned torch in its Python, and so does this one; torch's CUDA build runs on a CPU).
2. Each target built from this tree by `podman build --isolation chroot --network host`, pip
   reaching the registry as it does on this machine (PIP_FILES, those that exist, read-only).
3. Each image run as a container runtime would run it: a container's writable copy of its files,
   its USER, WorkingDir, Env, ENTRYPOINT and CMD, in mount, network and PID namespaces of its own.
   `podman run` cannot start a container on this machine (crun: setrlimit RLIMIT_NOFILE not
   permitted), so `unshare` and `chroot` do what crun would.
4. serve: its CMD answers on its EXPOSEd port (`/`: 200) and its HEALTHCHECK passes; `rotkws
   detect` in it hears the right word in real clips with each bundled model; it holds no torch.
   train: `rotkws train` for one step and `rotkws enroll` on a tiny budget (the verifier written
   beside it), every TTS engine (Kokoro included), the data root mounted where the image's
   ROTKWS_DATA points.
5. Build times and sizes into BENCHMARKS.md; the dangling images removed.
"""
import argparse
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))      # run as a file, by any Python 3.11 (make container-check's)

from benchmarks.report import write_section        # noqa: E402
from corpus.folders import default_data_root        # noqa: E402

SUITE = "bookworm"                   # Debian's release: its python3 is 3.11, as PYTHON_IMAGE's
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
PIP_FILES = ("/etc/ssl/certs", "/etc/pip.conf", "/etc/xdg/pip", "/opt/wheels")   # pip's setup here
TOOLS = ("podman", "mmdebstrap", "unshare", "nsenter", "chroot", "ip")
IMAGE = "localhost/rotkws-{}:check"  # the built targets' tags
LOGS = Path(tempfile.gettempdir())   # where each build's output goes
LOADS: list[float] = []              # the 5-min load average at the end of each build (the report's)
CLIPS = REPO / "tests" / "data" / "clips"
WAKE_CLIP = REPO / "tests" / "data" / "wakeword" / "alexa" / "1.flac"   # the first (ATTRIBUTION.md)
COMMAND = "stop"                     # said after the wake word in the two-stage clip
KOKORO_VOICES = 28                   # Kokoro v1.0's English voices (training/kokoro.py)
PAGE_TIMEOUT_S = 180                 # for the demo to answer after its CMD starts
ENROLL_BUDGET = ("--positives", "8", "--tts-negatives", "8", "--images", "16", "--wav-negatives", "8",
                 "--noise-negatives", "4", "--speech-negatives", "8", "--tts-sentences", "0",
                 "--kokoro-positives", "4", "--kokoro-negatives", "4", "--kokoro-sentences", "0",
                 "--max-steps", "2", "--validation-hours", "0.05", "--progress", "none")


# -- commands -------------------------------------------------------------------------------------
def run(argv: list[str], timeout: float = 3600) -> subprocess.CompletedProcess:
    """Run argv; on failure raise with its output's tail, which says what went wrong."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            stop(proc)
            raise
    if proc.returncode != 0:
        tail = "\n".join((out + err).splitlines()[-40:])
        raise RuntimeError(f"{shlex.join(argv[:8])}{' …' if len(argv) > 8 else ''} exited {proc.returncode}:\n{tail}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def stop(proc: subprocess.Popen) -> None:
    """Kill proc and, where it is `unshare --pid --fork`, every process of its PID namespace: its
    child is that namespace's init, which SIGKILL ends with all in it (unshare ignores SIGTERM, and
    `chroot --userspec` clears the parent-death signal that --kill-child would send)."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    for pid in children.read_text().split() if children.exists() else []:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    proc.kill()
    proc.wait()


def podman(*args: str, **kw) -> str:
    return run(["podman", *args], **kw).stdout.strip()


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def digest(*parts) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:12]


def exists(image: str) -> bool:
    return subprocess.run(["podman", "image", "exists", image]).returncode == 0


def pip_volumes() -> list[str]:
    return [f"--volume={p}:{p}:ro" for p in PIP_FILES if Path(p).exists()]


def build(tag: str, context: Path, *args: str) -> float:
    """`podman build` as this module builds every image (its output in LOGS); its wall time in s.
    `--format=docker` keeps the HEALTHCHECK, as `docker build` does."""
    log = LOGS / f"{tag.split('/')[-1].replace(':', '-')}.log"
    print(f"building {tag} (log: {log})", flush=True)
    start = time.monotonic()
    with open(log, "w") as out:
        built = subprocess.run(["podman", "build", "--format=docker", "--isolation=chroot", "--network=host",
                                "--pull=never", *pip_volumes(), "--tag", tag, *args, str(context)],
                               stdout=out, stderr=subprocess.STDOUT)
    if built.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-40:])
        raise RuntimeError(f"podman build of {tag} exited {built.returncode} (log: {log}):\n{tail}")
    LOADS.append(os.getloadavg()[1])
    return time.monotonic() - start


# -- the bases ------------------------------------------------------------------------------------
def base_image() -> tuple[str, float]:
    """Debian's Python 3.11 as an image (tag: its package list's hash); seconds spent, 0 if cached."""
    tag = f"localhost/rotkws-base:{digest(SUITE, 'apt', BASE_PACKAGES)}"
    if exists(tag):
        return tag, 0.0
    print(f"building {tag} (mmdebstrap {SUITE})", flush=True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        tar = Path(tmp) / "base.tar"
        run(["mmdebstrap", "--variant=apt", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(tar)])
        podman("import", str(tar), tag)
    return tag, time.monotonic() - start


def torch_pin() -> str:
    train = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["train"]
    return next(d for d in train if d.startswith("torch=="))


def train_base_image(base: str) -> tuple[str, float]:
    """`base` with pyproject's torch in /opt/venv, on PATH: the CUDA image's stand-in."""
    pin = torch_pin()
    tag = f"localhost/rotkws-train-base:{digest(base, pin)}"
    if exists(tag):
        return tag, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "Containerfile").write_text(
            f"FROM {base}\n"
            f"RUN python -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir '{pin}'\n"
            "ENV PATH=/opt/venv/bin:$PATH\n")
        return tag, build(tag, Path(tmp), "--layers=false")


# -- an image, run ----------------------------------------------------------------------------------
def config(image: str) -> dict:
    """The image's Config (User, Env, WorkingDir, Entrypoint, Cmd, ExposedPorts) with its
    HEALTHCHECK as `Healthcheck`."""
    found = json.loads(podman("image", "inspect", image))[0]
    return found["Config"] | {"Healthcheck": found.get("Healthcheck") or found.get("HealthCheck") or {}}


def size(image: str) -> int:
    return int(podman("image", "inspect", "--format", "{{.Size}}", image))


@contextlib.contextmanager
def rootfs(image: str):
    """A container's writable copy of the image's files, mounted; removed afterwards."""
    cid = podman("create", image)
    try:
        yield Path(podman("mount", cid))
    finally:
        subprocess.run(["podman", "umount", cid], capture_output=True)
        subprocess.run(["podman", "rm", "--force", cid], capture_output=True)


def user_env(root: Path, cfg: dict) -> tuple[str, dict]:
    """(uid:gid, environment) as a runtime gives the image's USER: its Env, and HOME from the
    image's /etc/passwd where Env has none."""
    user = cfg.get("User") or "0"
    name, _, group = user.partition(":")
    entry = next((f for f in (ln.split(":") for ln in (root / "etc/passwd").read_text().splitlines())
                  if name in (f[0], f[2])), None)
    if entry is None:
        raise RuntimeError(f"USER {user}: not in the image's /etc/passwd")
    env = dict(e.split("=", 1) for e in cfg.get("Env") or [])
    env.setdefault("HOME", entry[5])
    return f"{entry[2]}:{group or entry[3]}", env


def in_image(root: Path, cfg: dict, argv: list[str], mounts: dict[str, str] | None = None,
             env: dict[str, str] | None = None, net: str | None = None) -> list[str]:
    """The command line that runs argv as the image would: its user, environment and WorkingDir,
    /proc and /dev, `mounts` (host path → image path, read-only), in new mount and PID namespaces
    and a network namespace of its own (or the one at `net`, a /proc/PID/ns/net path)."""
    uid, image_env = user_env(root, cfg)
    setup = ["mount -t proc proc \"$ROOT/proc\"", "mount --rbind /dev \"$ROOT/dev\""]
    for src, dst in (mounts or {}).items():
        target = shlex.quote(f"{root}/{dst.lstrip('/')}")
        setup += [f"mkdir -p {target}", f"mount --bind {shlex.quote(src)} {target}",
                  f"mount -o remount,bind,ro {target}"]
    if net is None:
        setup.insert(0, "ip link set lo up")
    env_args = [f"{k}={v}" for k, v in (image_env | (env or {})).items()]
    inner = ["chroot", f"--userspec={uid}", str(root), "/usr/bin/env", "-i",
             f"--chdir={cfg.get('WorkingDir') or '/'}", *env_args, *argv]
    script = " && ".join(setup) + " && exec " + shlex.join(inner)
    spaces = ["unshare", "--mount", "--pid", "--fork", *([] if net else ["--net"])]
    enter = ["nsenter", f"--net={net}"] if net else []
    return [*enter, *spaces, "env", f"ROOT={root}", "sh", "-c", script]


def image_command(cfg: dict, args: list[str] | None = None) -> list[str]:
    """ENTRYPOINT + CMD (or + args in CMD's place), as `docker run IMAGE [args]` runs."""
    return (cfg.get("Entrypoint") or []) + (args if args is not None else cfg.get("Cmd") or [])


def venv_bytes(root: Path) -> int:
    return int(run(["du", "-sb", str(root / "opt/venv")]).stdout.split()[0])


def torch_files(root: Path) -> list[str]:
    """Every torch, triton or nvidia package folder in the image (what the serve image must lack)."""
    site = root / "opt/venv/lib"
    return sorted(str(p.relative_to(root)) for p in site.glob("python3*/site-packages/*")
                  if p.name.lower().startswith(("torch", "triton", "nvidia")))


# -- serve ----------------------------------------------------------------------------------------
def http_status(net: str, url: str) -> int | None:
    """GET url from inside the network namespace `net`; its status, None if nothing answers."""
    probe = ("import sys, urllib.request\ntry: print(urllib.request.urlopen(sys.argv[1], timeout=5).status)\n"
             "except Exception as e: print(getattr(e, 'code', '') or '')")
    out = subprocess.run(["nsenter", f"--net={net}", sys.executable, "-c", probe, url],
                         capture_output=True, text=True, timeout=30).stdout.strip()
    return int(out) if out.isdigit() else None


def check_page(root: Path, cfg: dict) -> dict:
    """The image's own CMD, started; `/` answers 200 on its EXPOSEd port and its HEALTHCHECK
    passes, in the server's network namespace. Seconds to the first answer."""
    port = int(next(iter(cfg["ExposedPorts"])).split("/")[0])
    with tempfile.TemporaryFile("w+") as log:
        server = subprocess.Popen(in_image(root, cfg, image_command(cfg)), stdout=log, stderr=subprocess.STDOUT)
        try:
            net, start = f"/proc/{server.pid}/ns/net", time.monotonic()
            while (status := http_status(net, f"http://127.0.0.1:{port}/")) is None:
                if server.poll() is not None or time.monotonic() - start > PAGE_TIMEOUT_S:
                    log.seek(0)
                    raise RuntimeError(f"the serve image's CMD never answered on port {port}:\n{log.read()[-3000:]}")
                time.sleep(2)
            answered = time.monotonic() - start
            test = cfg.get("Healthcheck", {}).get("Test") or []
            if test[:1] != ["CMD"]:
                raise RuntimeError(f"the serve image declares no HEALTHCHECK CMD (got {test})")
            healthy = subprocess.run(in_image(root, cfg, test[1:], net=net), capture_output=True).returncode == 0
        finally:
            stop(server)
    if status != 200 or not healthy:
        raise RuntimeError(f"the serve image's page: GET / gave {status}, "
                           f"HEALTHCHECK {'passed' if healthy else 'failed'}")
    return {"port": port, "answered_s": answered}


def detections(root: Path, cfg: dict, args: list[str]) -> list[dict]:
    out = run(in_image(root, cfg, ["rotkws", "detect", *args]), timeout=300).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def check_detect(root: Path, cfg: dict) -> list[str]:
    """`rotkws detect` in the image on real clips: each word's two clips with the default model, and
    the wake word followed by a command with the wake word and the command stage. What it heard."""
    words = ("yes", "stop", "go")
    clips = root / "tmp/clips"
    for word in words:
        shutil.copytree(CLIPS / word, clips / word)
    shutil.copy(WAKE_CLIP, clips / "wake.flac")
    shutil.copy(sorted((CLIPS / COMMAND).glob("*.wav"))[0], clips / "command.wav")
    join = ("import numpy as np, soundfile as sf; a = [sf.read(f'/tmp/clips/{n}', dtype='float32')[0] "
            "for n in ('wake.flac', 'command.wav')]; z = np.zeros(4800, np.float32); "
            "sf.write('/tmp/wake_command.wav', np.concatenate([a[0], z, a[1], z * 10]), 16000)")
    run(in_image(root, cfg, ["python", "-c", join]))
    wrong = []
    for word in words:
        got = detections(root, cfg, [f"/tmp/clips/{word}/{p.name}" for p in sorted((CLIPS / word).glob("*.wav"))])
        wrong += [f"{d['file']}: {d.get('keyword')}" for d in got if d.get("keyword") != word]
        if len({d["file"] for d in got}) != 2:
            wrong.append(f"{word}: heard in {len(got)} of its 2 clips")
    wake_path = "$(python -c 'from app.spotter import WAKE_MODEL; print(WAKE_MODEL)')"
    out = run(in_image(root, cfg, ["sh", "-c", f"rotkws detect --wake {wake_path} /tmp/wake_command.wav"]),
              timeout=300).stdout.splitlines()
    pair = json.loads(out[0]) if out else {}
    if (pair.get("wake"), pair.get("command")) != ("alexa", COMMAND):
        wrong.append(f"wake word + {COMMAND}: {pair}")
    if wrong:
        raise RuntimeError("rotkws detect in the serve image heard wrong: " + "; ".join(wrong))
    return [*(f"{w} ×2" for w in words), f"alexa → {COMMAND}"]


def check_serve(image: str) -> dict:
    cfg = config(image)
    with rootfs(image) as root:
        found = torch_files(root)
        no_torch = subprocess.run(in_image(root, cfg, ["python", "-c", "import torch"]), capture_output=True)
        if found or no_torch.returncode == 0:
            raise RuntimeError(f"the serve image holds torch: {found or 'import torch works'}")
        return {"venv": venv_bytes(root), "heard": check_detect(root, cfg)} | check_page(root, cfg)


# -- train ----------------------------------------------------------------------------------------
def voices_env(root: Path, cfg: dict, data_in_image: str) -> dict:
    """Kokoro's voices: the ones the image ships (training/voices/), else the data root's copy."""
    shipped = root / (cfg.get("WorkingDir") or "/").lstrip("/") / "training/voices/kokoro_v1_0_en"
    if len(list(shipped.glob("*.pt"))) >= KOKORO_VOICES:
        return {}
    return {"ROTKWS_VOICES": f"{data_in_image}/tts/kokoro_v1_0_en"}


def check_train(image: str) -> dict:
    """One step of `rotkws train` on the tiny config, then a tiny `rotkws enroll`, each through the
    image's ENTRYPOINT, the data root mounted read-only where its ROTKWS_DATA points."""
    cfg = config(image)
    data = dict(e.split("=", 1) for e in cfg.get("Env") or []).get("ROTKWS_DATA", "/data")
    with rootfs(image) as root:
        mounts, env = {str(default_data_root()): data}, voices_env(root, cfg, data)
        engines = run(in_image(root, cfg, ["python", "-c", "from training import tts; print(' '.join(tts.engines()))"],
                               mounts, env)).stdout.split()
        start = time.monotonic()
        run(in_image(root, cfg, image_command(cfg, ["train", "--config", "training/configs/tiny.yaml",
                                                    "--trainer.max_steps", "1"]), mounts, env))
        trained = time.monotonic() - start
        workdir = root / (cfg.get("WorkingDir") or "/").lstrip("/")
        if not list(workdir.glob("runs/tiny/checkpoints/*.ckpt")):
            raise RuntimeError("rotkws train in the train image wrote no checkpoint under runs/tiny/checkpoints/")
        start = time.monotonic()
        run(in_image(root, cfg, image_command(cfg, ["enroll", "alexa", "-o", "/tmp/alexa.onnx", *ENROLL_BUDGET]),
                     mounts, env))
        enrolled = time.monotonic() - start
        home = root / user_env(root, cfg)[1]["HOME"].lstrip("/")
        kokoro = len(list(home.glob(".cache/rotkws/kokoro/*/*.npy")))   # training/kokoro.py's cache
        if kokoro == 0:
            raise RuntimeError("rotkws enroll in the train image said nothing in Kokoro's voices (no clip cached)")
        if not (root / "tmp/alexa.head.onnx").is_file():
            raise RuntimeError("rotkws enroll in the train image wrote no verifier (/tmp/alexa.head.onnx) beside its file")
        shutil.copy(WAKE_CLIP, root / "tmp/wake.flac")
        header = run(in_image(root, cfg, ["rotkws", "detect", "--model", "/tmp/alexa.onnx", "--scores",
                                          "/tmp/wake.flac"]), timeout=120).stdout.splitlines()[:1]
        if not header or "alexa" not in header[0]:
            raise RuntimeError(f"the enrolled file's scores name no `alexa` (detect --scores: {header})")
        return {"venv": venv_bytes(root), "engines": engines, "kokoro": kokoro,
                "voices": env.get("ROTKWS_VOICES", "shipped"), "train_s": trained, "enroll_s": enrolled}


# -- the report -----------------------------------------------------------------------------------
def mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def minutes(s: float) -> str:
    return f"{s / 60:.1f} min" if s else "cached"


BASES = {"serve": "Debian bookworm's Python 3.11", "train": "the same, with torch's CUDA build from PyPI"}


def section(results: dict, total_s: float) -> str:
    """The table: per target its base, build time, image and venv sizes, what was checked."""
    rows = ["| image | its base (built in, size) | built in | image size | its venv (`/opt/venv`) | checked |",
            "| --- | --- | ---: | ---: | ---: | --- |"]
    for target, r in results.items():
        base = f"{BASES[target]} (`{r['base'].split('/')[-1]}`: {minutes(r['base_s'])}, {mb(r['base_size'])})"
        rows.append(f"| `{target}` | {base} | {minutes(r['build_s'])} | {mb(r['size'])} | {mb(r['venv'])} | "
                    f"{checked(target, r)} |")
    load = f"{min(LOADS):.1f}–{max(LOADS):.1f}" if LOADS else "not measured"
    return ("\n".join(rows) + f"\n\n`make container-check`, all of it: {minutes(total_s)}. Built with podman (overlay storage, `--isolation chroot`) from this tree, "
            "no layer cache; a base is built once and cached by its package list (\"cached\": this run found "
            f"it). Times are wall-clock on a shared machine: load average {load} on {os.cpu_count()} cores "
            "at the builds' ends. Sizes: `podman image inspect` (uncompressed) and `du` of the venv. Each "
            "image ran through `chroot` as its USER with its Env and WorkingDir, in namespaces of its own "
            "(`podman run` cannot start containers on this machine). The `train` base stands in for the "
            "CUDA image with the torch pyproject pins (its CUDA build runs on the CPU).\n")


def checked(target: str, r: dict) -> str:
    if target == "serve":
        return (f"its CMD answers `/` (200) on {r['port']} after {r['answered_s']:.0f} s, HEALTHCHECK passes; "
                f"`rotkws detect` hears {', '.join(r['heard'])}; no torch")
    voices = "from the image" if r["voices"] == "shipped" else r["voices"]
    return (f"one step of `rotkws train` ({r['train_s']:.0f} s); `rotkws enroll` on a tiny budget "
            f"({r['enroll_s'] / 60:.1f} min, its verifier beside it): {', '.join(r['engines'])} and Kokoro "
            f"({r['kokoro']} clips, voices {voices})")


TARGETS = {"serve": ("PYTHON_IMAGE", check_serve),   # target → (the ARG naming its base, its check)
           "train": ("TRAIN_IMAGE", check_train)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=list(TARGETS), help="build and check one target")
    p.add_argument("--keep", action="store_true", help="keep the built images (tagged rotkws-*:check)")
    p.add_argument("--no-write", action="store_true", help="do not write BENCHMARKS.md")
    args = p.parse_args(argv)
    if missing := missing_tools():
        print(f"container check skipped: {', '.join(missing)} not found (apt-get install podman mmdebstrap)")
        return 0 if os.environ.get("CI") == "true" else 2
    targets = [args.only] if args.only else list(TARGETS)
    results, start = {}, time.monotonic()
    try:
        base, base_s = base_image()
        for target in targets:
            arg, check = TARGETS[target]
            from_, from_s = (base, base_s) if target == "serve" else train_base_image(base)
            tag = IMAGE.format(target)
            built = build(tag, REPO, "--no-cache", f"--build-arg={arg}={from_}", f"--target={target}")
            print(f"{target}: built in {built:.0f} s, {mb(size(tag))}; checking", flush=True)
            results[target] = check(tag) | {"base": from_, "base_s": from_s, "base_size": size(from_),
                                            "build_s": built, "size": size(tag)}
            print(f"{target}: {results[target]}", flush=True)
            if not args.keep:
                podman("rmi", tag)
    finally:
        subprocess.run(["podman", "image", "prune", "--force"], capture_output=True)   # the dangling ones
    if not args.no_write and not args.only:
        write_section("container", "Containers: the Dockerfile's images, built and run", section(results, time.monotonic() - start),
                      script=".ci/container.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
