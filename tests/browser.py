"""Headless Chromium for the tests of pages: the DOM a page has once loaded (its scripts run, or not),
and screenshots. Chromium is driven from its command line as the run report's test drives it
(tests/acceptance/test_run_report.py), here with the DevTools protocol on a pipe
(--remote-debugging-pipe): it reads the DOM and draws screenshots of a page whose scripts are off too
(--dump-dom and --screenshot need script, and print or draw nothing then).

The DOM is read into a small tree by the standard library's HTML parser: elements, attributes, text.
"""
from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from tests.helpers import missing_tool

__all__ = ["CHROMIUM", "Element", "rendered_dom", "in_page", "screenshot", "parse_html"]

CHROMIUM = "/usr/bin/chromium"
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict
    children: list = field(default_factory=list)     # Element or str

    def text(self) -> str:
        """The element's text, whitespace collapsed."""
        parts = [c if isinstance(c, str) else c.text() for c in self.children]
        return " ".join(" ".join(parts).split())

    def iter(self):
        yield self
        for child in self.children:
            if isinstance(child, Element):
                yield from child.iter()

    def find_all(self, tag: str, **attrs) -> list[Element]:
        """Descendants of `tag` whose attributes have the values given (data_x: data-x; class_: one of its classes)."""
        wanted_class = attrs.pop("class_", None)
        return [e for e in self.iter() if e.tag == tag
                and all(e.attrs.get(k.replace("data_", "data-", 1)) == v for k, v in attrs.items())
                and (wanted_class is None or wanted_class in e.attrs.get("class", "").split())]

    def find(self, tag: str, **attrs) -> Element:
        found = self.find_all(tag, **attrs)
        assert found, f"no <{tag}> with {attrs}"
        return found[0]

    @property
    def hidden(self) -> bool:
        return "hidden" in self.attrs


class _Builder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        element = Element(tag, {k: (v if v is not None else "") for k, v in attrs})
        self.stack[-1].children.append(element)
        if tag not in _VOID:
            self.stack.append(element)

    def handle_endtag(self, tag):
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data):
        self.stack[-1].children.append(data)


def parse_html(text: str) -> Element:
    builder = _Builder()
    builder.feed(text)
    builder.close()
    return builder.root


def _chromium() -> str:
    if not shutil.which(CHROMIUM):
        missing_tool(f"{CHROMIUM} not installed (bin/debian-packages.txt lists chromium): browser check skipped")
    return CHROMIUM


def _flags(script: bool) -> list[str]:
    return ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            *([] if script else ["--blink-settings=scriptEnabled=false"])]


class _DevTools:
    """Chromium with the DevTools protocol on a pipe (--remote-debugging-pipe: commands in on fd 3,
    answers out on fd 4, each a JSON text ended by a NUL), one page attached."""

    def __init__(self):
        to_browser, self._to_browser = os.pipe()
        self._from_browser, from_browser = os.pipe()

        # a profile of its own: a second Chromium on the default profile hands its page to the first and exits
        self._profile = tempfile.mkdtemp(prefix="anima-chromium-")
        self._log = open(Path(self._profile) / "chromium.log", "w+b")      # what it says when it closes the pipe
        # bash puts the pipes on fd 3 and 4 as it starts Chromium (dash reads one-digit fds only; a
        # preexec dup2 could land on subprocess's own error pipe)
        self.proc = subprocess.Popen(["bash", "-c", f'exec "$0" "$@" 3<&{to_browser} 4>&{from_browser}', _chromium(),
                                      *_flags(True), "--remote-debugging-pipe", f"--user-data-dir={self._profile}",
                                      "about:blank"], stdout=subprocess.DEVNULL, stderr=self._log,
                                     pass_fds=(to_browser, from_browser))
        os.close(to_browser)
        os.close(from_browser)
        self._buffer, self._id, self.session = b"", 0, None

    def send(self, method: str, params: dict | None = None, session: bool = True) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        answer = self.wait(lambda m: m.get("id") == self._id)
        assert "error" not in answer, f"{method}: {answer['error']}"
        return answer["result"]

    def wait(self, wanted, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                if wanted(message):
                    return message
            left = deadline - time.monotonic()
            assert left > 0 and select.select([self._from_browser], [], [], left)[0], "Chromium did not answer"
            chunk = os.read(self._from_browser, 1 << 20)
            assert chunk, f"Chromium closed its DevTools pipe: {self._said()}"
            self._buffer += chunk

    def _said(self) -> str:
        self._log.seek(0)
        lines = [line for line in self._log.read().decode(errors="replace").splitlines() if "dbus" not in line]
        return "\n".join(lines[-15:])

    def open(self, url: str, script: bool, window: tuple[int, int] = (1280, 1600)) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.send("Page.enable")
        self.send("Emulation.setScriptExecutionDisabled", {"value": not script})
        self.send("Emulation.setDeviceMetricsOverride", {"width": window[0], "height": window[1],
                                                         "deviceScaleFactor": 1, "mobile": False})
        self.send("Page.navigate", {"url": url})
        self.wait(lambda m: m.get("method") == "Page.loadEventFired" and m.get("sessionId") == self.session)

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def close(self) -> None:
        with contextlib.suppress(AssertionError, OSError):
            self.send("Browser.close", session=False)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        self._log.close()
        shutil.rmtree(self._profile, ignore_errors=True)


def in_page(url: str, expression: str, script: bool = True):
    """The value of a JavaScript `expression` evaluated by DevTools in the loaded page at `url` (the
    page's own scripts run, or are off with `script` False: DevTools still evaluates)."""
    browser = _DevTools()
    try:
        browser.open(url, script)
        return browser.evaluate(expression)
    finally:
        browser.close()


def rendered_dom(url: str, script: bool = True) -> Element:
    """The DOM of the page at `url` once Chromium has loaded it (and run its scripts, unless `script` is off)."""
    return parse_html(in_page(url, "document.documentElement.outerHTML", script))


def screenshot(url: str, out: Path, width: int = 1280, height: int = 1600, script: bool = True) -> Path:
    """A PNG of the page at `url` as a `width` x `height` window shows it (its scripts off with `script` False)."""
    browser = _DevTools()
    try:
        browser.open(url, script, (width, height))
        data = browser.send("Page.captureScreenshot", {"format": "png"})["data"]
    finally:
        browser.close()
    out.write_bytes(base64.b64decode(data))
    return out
