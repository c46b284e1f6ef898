"""A real headless Chromium (Debian's ``chromium``) driven over the DevTools protocol, for tests
that look at a page as a person would: load it, collect console errors, uncaught exceptions and
every network request, evaluate JavaScript in it, and take a full-page screenshot.

``scripts/install-chromium.sh`` installs the browser (``make test`` runs it).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websocket  # websocket-client

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--mute-audio")


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class PageLoad:
    """What happened while a page loaded."""

    console_errors: list[str] = field(default_factory=list)  # console.error/assert, uncaught exceptions, log errors
    requests: list[str] = field(default_factory=list)  # every URL the page asked for, the page itself included
    evaluations: dict[str, Any] = field(default_factory=dict)


class Chromium:
    """One headless browser with a fresh profile; use as a context manager."""

    def __init__(self, *, width: int = 1280, height: int = 900, timeout: float = 60.0) -> None:
        binary = chromium_binary()
        if binary is None:
            raise FileNotFoundError("chromium is not installed (scripts/install-chromium.sh)")
        self.timeout = timeout
        self.profile = Path(tempfile.mkdtemp(prefix="dsfed-chromium-"))
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-port=0",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        port = self._port()
        deadline = time.monotonic() + timeout
        while True:
            targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
            pages = [t for t in targets if t.get("type") == "page"]
            if pages or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=timeout, suppress_origin=True)
        self._id = 0

    def _port(self) -> int:
        marker = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            if marker.exists() and marker.read_text().strip():
                return int(marker.read_text().split()[0])
            time.sleep(0.1)
        raise TimeoutError("chromium did not open its DevTools port")

    def send(self, method: str, events: list[dict[str, Any]] | None = None, **params: Any) -> dict[str, Any]:
        """Call a DevTools method and return its result; events that arrive meanwhile go to ``events``."""
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            if events is not None and "method" in message:
                events.append(message)

    def load(self, url: str, *, evaluate: dict[str, str] | None = None, settle: float = 0.5) -> PageLoad:
        """Open ``url``, wait for its load event, evaluate each JavaScript expression of ``evaluate``."""
        events: list[dict[str, Any]] = []
        for domain in ("Runtime", "Log", "Page", "Network"):
            self.send(f"{domain}.enable", events)
        self.send("Page.navigate", events, url=url)
        deadline = time.monotonic() + self.timeout
        while not any(e["method"] == "Page.loadEventFired" for e in events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not finish loading")
            events.append(json.loads(self.ws.recv()))
        end = time.monotonic() + settle  # late console messages
        self.ws.settimeout(0.1)
        while time.monotonic() < end:
            try:
                events.append(json.loads(self.ws.recv()))
            except websocket.WebSocketTimeoutException:
                pass
        self.ws.settimeout(self.timeout)
        result = PageLoad()
        for e in events:
            params = e.get("params", {})
            if e.get("method") == "Runtime.exceptionThrown":
                result.console_errors.append(json.dumps(params.get("exceptionDetails", {}))[:500])
            elif e.get("method") == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                result.console_errors.append(json.dumps(params.get("args", []))[:500])
            elif e.get("method") == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                result.console_errors.append(params["entry"].get("text", "")[:500])
            elif e.get("method") == "Network.requestWillBeSent":
                result.requests.append(params.get("request", {}).get("url", ""))
        for name, expression in (evaluate or {}).items():
            value = self.send("Runtime.evaluate", None, expression=expression, returnByValue=True)
            if "exceptionDetails" in value:
                raise RuntimeError(f"{expression}: {value['exceptionDetails']}")
            result.evaluations[name] = value["result"].get("value")
        return result

    def screenshot(self, path: Path) -> Path:
        """The whole page (beyond the window) as a PNG."""
        metrics = self.send("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        shot = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                         clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
