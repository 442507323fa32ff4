"""Helpers for testing the Dagster UI as a person would: a real webserver, GraphQL, headless Chromium.

The webserver runs as a subprocess in its own session with SIGINT/SIGTERM reset to default
(Dagster copies SIGINT's disposition to SIGTERM, so an inherited "ignore" would make it
unkillable) and is stopped by process group, leaving nothing behind. Chromium is used two ways:
the plain command line (``--screenshot`` / ``--dump-dom`` after ``--virtual-time-budget``) for
pages that only need to render, and a small DevTools-protocol client for pages where a person
has to click (a markdown plot behind the metadata table's "[Show Markdown]" button).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from specs.paths import REPO_ROOT

CHROMIUM = Path(os.environ.get("AUTORESEARCH_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--window-size=1600,1000",
]
WEBSERVER = Path(sys.executable).parent / "dagster-webserver"

WORKSPACE_QUERY = """
query { workspaceOrError { __typename
  ... on Workspace { locationEntries { name loadStatus
    locationOrLoadError { __typename ... on PythonError { message stack } } } }
  ... on PythonError { message } } }
"""


def require_chromium() -> Path:
    """Chromium's path; a clear failure (not a skip) when it is missing: CI installs it."""
    if not CHROMIUM.exists():
        raise RuntimeError(
            f"Chromium not found at {CHROMIUM}: the browser tests need it. Run scripts/setup.sh "
            "(it installs the Debian package `chromium`) or set AUTORESEARCH_CHROMIUM."
        )
    return CHROMIUM


def report_dir() -> Path:
    """Where screenshots and DOM dumps go: $AUTORESEARCH_TEST_REPORT or .autoresearch/test-report."""
    root = Path(os.environ.get("AUTORESEARCH_TEST_REPORT", REPO_ROOT / ".autoresearch" / "test-report"))
    path = root / "ui"
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _default_signals() -> None:
    """Runs in the child before exec: default SIGINT/SIGTERM so SIGTERM stops Dagster."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def stop_group(process: subprocess.Popen, timeout: float = 30.0) -> None:
    """SIGTERM the process's group, SIGKILL what is left after ``timeout``; wait until it is empty."""
    pgid = process.pid  # start_new_session: the group id is the leader's pid
    for sig, wait_s in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            process.poll()
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                process.wait()
                return
            time.sleep(0.2)
    process.wait(timeout=10)


def graphql(url: str, query: str, variables: dict | None = None, timeout: float = 60.0) -> dict:
    """POST a GraphQL query to the webserver; GraphQL errors raise with their messages."""
    response = httpx.post(f"{url}/graphql", json={"query": query, "variables": variables or {}}, timeout=timeout)
    response.raise_for_status()
    body = response.json()
    if body.get("errors"):
        raise RuntimeError(f"GraphQL errors: {json.dumps(body['errors'])[:2000]}")
    return body["data"]


@dataclass
class Webserver:
    """A running ``dagster-webserver``; ``stop()`` ends its whole process group."""

    url: str
    process: subprocess.Popen
    log_path: Path
    dagster_home: Path
    stopped: bool = False

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        return graphql(self.url, query, variables)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def stop(self) -> None:
        """Stop the whole process group (once; later calls do nothing)."""
        if not self.stopped:
            self.stopped = True
            stop_group(self.process)


def start_webserver(
    dagster_home: Path, location: list[str], log_path: Path, timeout: float = 120.0, env: dict[str, str] | None = None
) -> Webserver:
    """Start ``dagster-webserver`` for ``location`` (e.g. ``["-m", "dagster_project.definitions"]``
    or ``["-w", "workspace.yaml"]``) on a free port with ``DAGSTER_HOME=dagster_home``; return
    once every code location has loaded (a load error raises with Dagster's message). The
    first-visit popup is dismissed (``setNuxSeen``) so screenshots show the page itself."""
    port = free_port()
    dagster_home.mkdir(parents=True, exist_ok=True)
    child_env = {
        **os.environ,
        **(env or {}),
        "DAGSTER_HOME": str(dagster_home),
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "PYTHONUNBUFFERED": "1",
    }
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(WEBSERVER), "-h", "127.0.0.1", "-p", str(port), *location],
            cwd=REPO_ROOT,
            env=child_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_default_signals,
        )
    server = Webserver(f"http://127.0.0.1:{port}", process, log_path, dagster_home)
    try:
        _wait_loaded(server, timeout)
        server.graphql("mutation { setNuxSeen }")
    except BaseException:
        server.stop()
        raise
    return server


def _wait_loaded(server: Webserver, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"dagster-webserver exited with {server.process.returncode}:\n{server.log_tail()}")
        try:
            data = server.graphql(WORKSPACE_QUERY)["workspaceOrError"]
        except (httpx.HTTPError, RuntimeError, ValueError) as exc:
            last = repr(exc)
            time.sleep(0.5)
            continue
        entries = data.get("locationEntries") or []
        if entries and all(e["loadStatus"] == "LOADED" for e in entries):
            errors = [e for e in entries if e["locationOrLoadError"]["__typename"] == "PythonError"]
            if errors:
                raise RuntimeError(
                    "code location failed to load: "
                    + "\n".join(f"{e['name']}: {e['locationOrLoadError']['message']}" for e in errors)
                )
            return
        last = json.dumps(data)[:500]
        time.sleep(0.5)
    raise TimeoutError(f"webserver not ready after {timeout:.0f}s ({last}):\n{server.log_tail()}")


def capture_page(url: str, screenshot: Path | None = None, budget_ms: int = 20000, timeout: float = 90.0) -> str:
    """Load ``url`` in headless Chromium (command line), let client-side rendering run for
    ``budget_ms`` of virtual time, optionally write a screenshot, and return the rendered DOM."""
    chromium = require_chromium()
    args = [str(chromium), *CHROMIUM_FLAGS, f"--virtual-time-budget={budget_ms}", "--dump-dom"]
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        screenshot.unlink(missing_ok=True)
        args.append(f"--screenshot={screenshot}")
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        dom = _run_chromium([*args, f"--user-data-dir={profile}", url], timeout)
    if screenshot is not None and not screenshot.exists():
        raise RuntimeError(f"Chromium wrote no screenshot for {url}")
    return dom


def _run_chromium(args: list[str], timeout: float) -> str:
    process = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True
    )
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        stop_group(process, timeout=5)  # helpers (zygote, renderers) that outlived the browser
    if process.returncode != 0:
        raise RuntimeError(f"chromium exited {process.returncode}: {err.decode(errors='replace')[-2000:]}")
    return out.decode(errors="replace")


@dataclass
class Browser:
    """Headless Chromium driven over the DevTools protocol (one page), for pages needing clicks.

    Use as a context manager; ``evaluate`` runs JavaScript in the page, ``wait_for`` polls an
    expression until it is truthy, ``screenshot`` writes a PNG of the viewport.
    """

    timeout: float = 60.0
    _stack: ExitStack = field(default_factory=ExitStack, init=False)
    _process: subprocess.Popen | None = field(default=None, init=False)
    _ws: Any = field(default=None, init=False)
    _next_id: int = field(default=0, init=False)

    def __enter__(self) -> "Browser":
        from websockets.sync.client import connect

        chromium = require_chromium()
        with self._stack as stack:  # unwinds only if start-up fails (pop_all below)
            profile = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="chromium-")))
            self._process = subprocess.Popen(
                [
                    str(chromium),
                    *CHROMIUM_FLAGS,
                    f"--user-data-dir={profile}",
                    "--remote-debugging-address=127.0.0.1",
                    "--remote-debugging-port=0",
                    "about:blank",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            stack.callback(stop_group, self._process, 5)
            port = self._devtools_port(profile)
            targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
            page = next(t for t in targets if t.get("type") == "page")
            self._ws = stack.enter_context(connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10))
            self.send("Emulation.setDeviceMetricsOverride", width=1600, height=1000, deviceScaleFactor=1, mobile=False)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _devtools_port(self, profile: Path) -> int:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"chromium exited {self._process.returncode} at start")
            if port_file.exists() and port_file.read_text().strip():
                return int(port_file.read_text().split()[0])
            time.sleep(0.1)
        raise TimeoutError("chromium did not open its DevTools port within 30 s")

    def send(self, method: str, **params: Any) -> dict:
        """One DevTools command; events arriving meanwhile are ignored."""
        self._next_id += 1
        msg_id = self._next_id
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout
        while True:
            reply = json.loads(self._ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def goto(self, url: str) -> None:
        """Navigate and wait until the document has a body (the app then renders client side)."""
        self.send("Page.navigate", url=url)
        self.wait_for("document.readyState !== 'loading' && !!document.body", what=f"{url} to load")

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript error in {expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float | None = None, what: str = "") -> Any:
        """Poll ``expression`` until truthy; return its value or raise naming ``what``."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.25)
        raise TimeoutError(f"timed out waiting for {what or expression}")

    def wait_stable(self, expression: str, timeout: float | None = None, what: str = "") -> Any:
        """Poll ``expression`` until it is truthy and unchanged between two polls (animations
        done, e.g. a dialog that grows in); return that value."""
        deadline = time.monotonic() + (timeout or self.timeout)
        previous = None
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value and value == previous:
                return value
            previous = value
            time.sleep(0.25)
        raise TimeoutError(f"timed out waiting for {what or expression} to settle")

    def click_text(self, text: str, row: str | None = None, selector: str = "button, a, [role=button]") -> None:
        """Click the first element matching ``selector`` whose text contains ``text``; with
        ``row``, only inside the table row whose first cell reads ``row`` (a metadata key)."""
        scope = (
            "document"
            if row is None
            else "[...document.querySelectorAll('tr')].find(r => r.cells.length"
            f" && r.cells[0].innerText.trim() === {json.dumps(row)})"
        )
        found = self.wait_for(
            f"(() => {{ const scope = {scope}; if (!scope) return false;"
            f" const el = [...scope.querySelectorAll({json.dumps(selector)})]"
            f".find(e => e.textContent.includes({json.dumps(text)}));"
            " if (!el) return false; el.scrollIntoView(); el.click(); return true; })()",
            what=f"a clickable {text!r}" + (f" in the row {row!r}" if row else ""),
        )
        assert found

    def dom(self) -> str:
        return self.evaluate("document.documentElement.outerHTML")

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
