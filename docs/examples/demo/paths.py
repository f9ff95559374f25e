"""Where a small package keeps its files: the worked example of docs/explanation/audit.md."""

from __future__ import annotations

import os
import sys
import tempfile
import urllib.request

DEMO_MODELS = os.path.expanduser(os.environ.get("DEMO_MODELS", "~/.demo/models"))
DEMO_DUMP_DIR = os.environ.get("DEMO_DUMP_DIR", "/tmp/demo-dumps")  # noqa: S108

if sys.platform == "win32":
    CACHE_DIR = os.path.join(os.environ.get("LOCALAPPDATA", "C:/"), "demo")
    os.makedirs(CACHE_DIR, exist_ok=True)


def remember(url: str, text: str) -> str:
    path = os.path.join(tempfile.gettempdir(), url.rsplit("/", 1)[-1])
    with open(path, "w", encoding="utf-8") as out:
        out.write(text)
    return path


def read(url: str) -> bytes:
    return bytes(urllib.request.urlopen(url).read())  # noqa: S310


def place(kind: str) -> str | None:
    return os.environ.get(f"DEMO_{kind}_DIR")
