"""`make demo` from a fresh clone prints the in-browser page's address, and that page works with
no CDN: the demo serves the onnxruntime-web that `make demo`'s `npm ci` brought.

The clone is of the committed HEAD; its `make demo` runs with this checkout's virtual
environment (VENV=…, its `.app` mark up to date) and the clone's code first on the path, so the
test costs an `npm ci` (from npm's cache when it has the files) and not a second environment.
Chromium's requests to the CDN are refused. Without npm, git, make or /usr/bin/chromium the test
skips with the reason; under CI it fails instead.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from demo_client import free_port
from conftest import REPO
from test_browser import CHROMIUM_ARGS, chromium  # noqa: F401 (fixture)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

VENV = Path(sys.executable).parents[1]       # this checkout's environment, which `make demo` reuses
READY_TIMEOUT_S = 600                        # npm ci, then the server's start
PAGE_TIMEOUT_MS = 60_000
ORT_CDN = "https://cdn.jsdelivr.net/**"
WEB_LINE = re.compile(r"the in-browser runtime .* at (http://\S+/web/\S*)")


def missing(reason: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; under CI this test must run")
    pytest.skip(reason)


@pytest.fixture
def clone(tmp_path) -> Path:
    for tool in ("git", "make", "npm"):
        if shutil.which(tool) is None:
            missing(f"{tool} not found")
    if not (VENV / ".app").is_file():
        missing(f"{VENV / '.app'} not found: the test reuses an environment `make` made")
    out = tmp_path / "rotkws"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(out)], check=True, timeout=120)
    os.utime(out / "pyproject.toml", (0, 0))   # older than VENV/.app: make keeps the environment
    return out


def serve(clone: Path, port: int):
    """`make demo` in the clone on `port`; yields (process, the /web/ address it printed)."""
    env = os.environ | {"PYTHONPATH": str(clone), "npm_config_prefer_offline": "true"}
    make = subprocess.Popen(["make", "-C", str(clone), "demo", f"VENV={VENV}",
                             f"DEMO_ARGS=--port {port} --no-enroll"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    printed, deadline = [], time.monotonic() + READY_TIMEOUT_S
    try:
        for line in make.stdout:
            printed.append(line)
            if found := WEB_LINE.search(line):
                yield make, found.group(1), "".join(printed)
                return
            assert time.monotonic() < deadline, "".join(printed)
        pytest.fail(f"make demo ended ({make.wait()}) without printing the page's address:\n{''.join(printed)}")
    finally:
        os.killpg(make.pid, signal.SIGTERM)
        make.wait(timeout=30)


def test_the_address_make_demo_prints_works_without_the_cdn(chromium, clone):
    from playwright.sync_api import sync_playwright
    for make, url, printed in serve(clone, free_port()):
        assert (clone / "node_modules" / "onnxruntime-web" / "dist").is_dir(), printed
        assert "CDN" not in printed, printed
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
            try:
                page = browser.new_page()
                refused = []
                page.route(ORT_CDN, lambda route: (refused.append(route.request.url), route.abort()))
                page.goto(url)
                page.wait_for_function("() => window.rotkws && (window.rotkws.spotter || window.rotkws.error)",
                                       timeout=PAGE_TIMEOUT_MS)
                assert page.evaluate("window.rotkws.error") is None, page.locator("#status").inner_text()
                assert page.locator("#keywords").inner_text(), "the page shows no keywords of its model"
                assert not refused, f"the page asked the CDN: {refused}"
            finally:
                browser.close()
