"""Headless Chromium driven over its DevTools protocol (CDP), for the tests of the server's page.

A real browser: Debian's `chromium` package (`apt-get install chromium`; .ci/run installs it when missing), started
with `--headless --remote-debugging-port=0`, spoken to with `websockets` (its synchronous client): navigate, type
into a field, click, evaluate JavaScript, move the mouse, take a screenshot. Nothing else is needed."""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

BINARIES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_chromium() -> str | None:
    return next((path for path in map(shutil.which, BINARIES) if path), None)


class Browser:
    """One headless Chromium with one page. Use as a context manager; `profile` is a fresh folder for its user data
    (it must not exist or be empty)."""

    def __init__(self, binary: str, profile: Path, width: int = 1500, height: int = 1000):
        from websockets.sync.client import connect

        self.stack = contextlib.ExitStack()

        profile.mkdir(parents=True, exist_ok=True)
        # --no-sandbox: CI containers (root, or no user namespaces) cannot start Chromium's sandbox; the browser only
        # loads the page of a server on 127.0.0.1. No background networking: nothing is fetched from elsewhere.
        args = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--disable-component-update", "--no-pings",
                "--disable-dev-shm-usage", "--remote-debugging-port=0", f"--user-data-dir={profile}",
                f"--window-size={width},{height}", "about:blank"]  # fmt: skip
        self.log = open(profile / "chromium.log", "wb")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.ids = itertools.count(1)
        try:
            port = self._port(profile / "DevToolsActivePort")
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
                pages = [t for t in json.load(answer) if t["type"] == "page"]
            page = pages[0]["webSocketDebuggerUrl"]
            self.ws = self.stack.enter_context(connect(page, max_size=None, open_timeout=20))
        except Exception:
            self.close()
            raise
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        self.width, self.height = width, height

    def _port(self, active: Path, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.flush()
                said = (active.parent / "chromium.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"chromium exited with status {self.proc.returncode}: {said}")
            if active.exists() and active.read_text().strip():
                return int(active.read_text().split()[0])
            time.sleep(0.1)
        raise RuntimeError("chromium did not open its DevTools port within 30 s")

    def send(self, method: str, timeout: float = 30.0, **params: Any) -> dict:
        """A CDP command's result (events that arrive meanwhile are dropped)."""
        message_id = next(self.ids)
        self.ws.send(json.dumps({"id": message_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self.ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            if message.get("id") == message_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited when it is a promise)."""
        result = self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        """Waits until the expression is truthy in the page; its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"waited {timeout:g} s for {expression!r}")

    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'")

    def type(self, selector: str, text: str) -> None:
        """Focus a field and type into it, as a keyboard would (Input.insertText: input events, no paste)."""
        self.evaluate(f"(e => {{ e.focus(); e.select(); }})(document.querySelector({json.dumps(selector)}))")
        self.send("Input.insertText", text=text)

    def click(self, selector: str) -> None:
        x, y = self.centre(selector)
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def centre(self, selector: str) -> tuple[float, float]:
        """The centre of an element in the viewport (scrolled into view first)."""
        return tuple(self.evaluate(
            f"(e => {{ e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect();"
            f" return [r.x + r.width / 2, r.y + r.height / 2]; }})(document.querySelector({json.dumps(selector)}))"
        ))  # fmt: skip

    def hover(self, selector: str) -> None:
        x, y = self.centre(selector)
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)

    def screenshot(self, path: Path) -> Path:
        """The whole page (not only the viewport) as a PNG."""
        self.evaluate("window.scrollTo(0, 0)")
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=max(height, self.height),
                  deviceScaleFactor=1, mobile=False)  # fmt: skip
        data = self.send("Page.captureScreenshot", format="png")["data"]
        self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height, deviceScaleFactor=1,
                  mobile=False)  # fmt: skip
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        self.stack.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
