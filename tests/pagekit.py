"""Shared helpers for tests that read an HTML page as a reader would: a strict parse into a small tree, and headless
Chromium (the DOM once the page's scripts ran, and a screenshot).

Chromium is Debian's package (`apt-get install -y chromium`). It tries to reach Google's services at start-up; on a
machine without a network those connections are refused many at a time, so the background ones are turned off.
Each call gets its own profile directory and a hard timeout.
"""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

NAMES = ("chromium", "chromium-browser", "google-chrome")
WINDOW = (1400, 2000)
TIMEOUT_S = 90.0
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--force-device-scale-factor=1")
MISSING = "no chromium on PATH (Debian: apt-get install -y chromium)"


def find_chromium() -> str | None:
    """The path of a Chromium (or Chrome) executable, or None."""
    return next((path for name in NAMES if (path := shutil.which(name))), None)


def _run(page: Path, work: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    exe = find_chromium()
    if exe is None:
        raise FileNotFoundError(MISSING)
    profile = work / f"profile-{len(list(work.glob('profile-*')))}"
    width, height = WINDOW
    cmd = [exe, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", *extra,
           page.resolve().as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited with {done.returncode}: {done.stderr[-2000:]}")
    return done


def dump_dom(page: Path, work: Path) -> str:
    """The page's DOM, serialized after load (its scripts have run), at the WINDOW size."""
    return _run(page, work, "--dump-dom").stdout


def screenshot(page: Path, png: Path, work: Path) -> Path:
    """A PNG of the page's first WINDOW-sized screen."""
    _run(page, work, f"--screenshot={png.resolve()}")
    if not png.exists() or png.stat().st_size == 0:
        raise RuntimeError(f"chromium wrote no screenshot at {png}")
    return png


# --- a small DOM ---

VOID = {"meta", "br", "input", "img", "hr", "link", "col", "area", "base", "wbr", "source", "track", "embed"}


class Node:
    """An element: its tag, attributes, and content in document order (text and child elements)."""

    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent, self.content = tag, attrs, parent, []

    @property
    def children(self) -> list[Node]:
        return [c for c in self.content if isinstance(c, Node)]

    def all(self, tag: str, cls: str | None = None, **attrs: str) -> list[Node]:
        found = []
        for child in self.children:
            if (child.tag == tag and (cls is None or cls in (child.attrs.get("class") or "").split())
                    and all(child.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())):
                found.append(child)
            found += child.all(tag, cls, **attrs)
        return found

    def all_elements(self) -> list[Node]:
        return [d for c in self.children for d in (c, *c.all_elements())]

    def full_text(self) -> str:
        return "".join(c if isinstance(c, str) else c.full_text() for c in self.content)


class Page(HTMLParser):
    """Parses the document into Nodes and records every tag that closes out of order."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = self.current = Node("#root", {}, None)
        self.errors: list[str] = []
        self.feed(text)
        self.close()
        if self.current is not self.root:
            self.errors.append(f"unclosed <{self.current.tag}>")

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs), self.current)
        self.current.content.append(node)
        if tag not in VOID:
            self.current = node

    def handle_startendtag(self, tag, attrs):
        self.current.content.append(Node(tag, dict(attrs), self.current))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if self.current.tag != tag:
            self.errors.append(f"</{tag}> closes <{self.current.tag}>")
            return
        self.current = self.current.parent

    def handle_data(self, data):
        self.current.content.append(data)


def parse(text: str) -> Node:
    """The document's tree; it must be well formed: every tag closed in order, every id once."""
    page = Page(text)
    assert page.errors == []
    ids = [n.attrs["id"] for n in page.root.all_elements() if "id" in n.attrs]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    return page.root
