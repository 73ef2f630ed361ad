"""Headless Chromium for the dashboard tests: a page rendered by a real browser (its DOM after
layout, and a screenshot), and a small PNG decoder (no Pillow) to check what was drawn."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest


def chromium() -> str:
    """The browser's path; the test is skipped where none is installed (.ci/run installs it)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("chromium not installed (.ci/run installs it)")
    return path


def shoot(url: str, shot: Path, size: str, profile: Path) -> str:
    """Load ``url`` in headless Chromium at window ``size`` ("W,H"); write the screenshot to ``shot``
    and return the rendered DOM. GPUWISE_SCREENSHOTS=DIR keeps a copy of the screenshot there."""
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={profile}"]
    dom = subprocess.run([chromium(), *flags, f"--window-size={size}", f"--screenshot={shot}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120).stdout
    if os.environ.get("GPUWISE_SCREENSHOTS"):
        shutil.copy(shot, Path(os.environ["GPUWISE_SCREENSHOTS"]) / shot.name)
    return dom


def _unfilter(line: bytearray, prev: bytearray, f: int, bpp: int) -> None:
    for i in range(len(line)):
        a = line[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if f == 1:
            line[i] = (line[i] + a) & 255
        elif f == 2:
            line[i] = (line[i] + b) & 255
        elif f == 3:
            line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255


def png_pixels(path: Path, every: int = 4) -> tuple[int, int, set]:
    """Width, height and the distinct RGB pixels of an 8-bit RGB/RGBA PNG, sampling every
    ``every``-th row and column (1: all of them)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w, h, bpp = 8, b"", 0, 0, 3
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, color = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and color in (2, 6)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    raw, stride, prev, pixels = zlib.decompress(idat), w * bpp, bytearray(w * bpp), set()
    for y in range(h):
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        _unfilter(line, prev, raw[y * (stride + 1)], bpp)
        if y % every == 0:
            pixels.update(bytes(line[i:i + 3]) for i in range(0, stride, bpp * every))
        prev = line
    return w, h, pixels
