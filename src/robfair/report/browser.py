"""Look at a report the way a person does: headless Chromium over the DevTools protocol (a pipe,
no network, no extra package). Used by the browser test and ``docs/screenshots/make_screenshots.py``.

    with Browser() as b:                                  # None-safe: Browser.find() is None without chromium
        page = b.open("report.html", width=1400)
        page.evaluate("document.images.length")
        page.screenshot("page.png", full_page=True)

Chromium runs with ``--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
--disable-background-networking --disable-component-update --disable-sync`` and a new, empty
``--user-data-dir`` that is deleted afterwards.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from ..errors import RobfairError

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe")

#: JavaScript run in the page: every image (decoded, non-empty) and every table's overflow.
CHECK_JS = """JSON.stringify({
  width: document.documentElement.clientWidth,
  scrollWidth: document.documentElement.scrollWidth,
  height: document.documentElement.scrollHeight,
  images: [...document.images].map(i => ({alt: i.alt, complete: i.complete, w: i.naturalWidth, h: i.naturalHeight,
                                           shownW: i.getBoundingClientRect().width})),
  tables: [...document.querySelectorAll('table')].map(t => {
      const box = (t.closest('.scroll') || t.parentElement).getBoundingClientRect();
      const r = t.getBoundingClientRect();
      return {title: (t.closest('section') && t.closest('section').querySelector('h3')
                      ? t.closest('section').querySelector('h3').textContent : ''),
              width: r.width, right: r.right, containerWidth: box.width, scrollWidth: t.scrollWidth};
  }),
  details: [...document.querySelectorAll('details')].map(d => d.open),
  title: document.title, h1: (document.querySelector('h1') || {}).textContent || ''
})"""


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


class Page:
    def __init__(self, browser: "Browser", session: str) -> None:
        self.browser, self.session = browser, session

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.call(method, params, session=self.session)

    def evaluate(self, expression: str) -> Any:
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RobfairError(f"page script failed: {r['exceptionDetails'].get('text')}")
        return r["result"].get("value")

    def check(self) -> dict[str, Any]:
        """Images, tables and sizes of the page (see CHECK_JS)."""
        return json.loads(self.evaluate(CHECK_JS))

    def screenshot(self, path: str | Path, *, full_page: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            m = self.call("Page.getLayoutMetrics")
            size = m.get("cssContentSize") or m["contentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        data = self.call("Page.captureScreenshot", params)["data"]
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path


class Browser:
    """Headless Chromium driven over ``--remote-debugging-pipe`` (fds 3 and 4)."""

    def __init__(self, executable: str | None = None, timeout: float = 60.0) -> None:
        self.executable = executable or find_chromium()
        if self.executable is None:
            raise RobfairError("chromium is not installed; install it (apt-get install chromium) to check reports in a browser")
        self.timeout = timeout
        self._id = 0
        self._buf = b""
        self.console: list[str] = []

    def __enter__(self) -> "Browser":
        self._dir = tempfile.mkdtemp(prefix="robfair-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds() -> None:  # in the child: its end of the pipes become fds 3 (read) and 4 (write)
            a, b = os.dup(to_child_r), os.dup(from_child_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen([self.executable, *FLAGS, f"--user-data-dir={self._dir}", "about:blank"],
                                     preexec_fn=fds, close_fds=False, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.call("Browser.close")
        except Exception:  # noqa: BLE001 - it may be gone already
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._dir, ignore_errors=True)

    # ------------------------------------------------------------------ protocol
    def call(self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        return self._wait(lambda m: m.get("id") == self._id)["result"]

    def _wait(self, want: Any) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                m = json.loads(raw)
                if m.get("method") in ("Runtime.consoleAPICalled", "Runtime.exceptionThrown"):
                    self.console.append(json.dumps(m.get("params"))[:500])
                if want(m):
                    if "error" in m:
                        raise RobfairError(f"chromium: {m['error'].get('message')}")
                    return m
            left = deadline - time.monotonic()
            if left <= 0:
                raise RobfairError(f"chromium did not answer within {self.timeout:.0f} s")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    raise RobfairError("chromium exited")
                self._buf += chunk

    def open(self, path_or_url: str | Path, *, width: int = 1400, height: int = 1000) -> Page:
        """A new tab at ``width`` x ``height`` CSS pixels with the page loaded (load event fired)."""
        url = str(path_or_url)
        if "://" not in url:
            url = Path(url).resolve().as_uri()
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        page.call("Page.enable")
        page.call("Runtime.enable")
        page.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                          "mobile": False})
        page.call("Page.navigate", {"url": url})
        self._wait(lambda m: m.get("method") == "Page.loadEventFired" and m.get("sessionId") == session)
        return page
