"""The scenario suite's data: generated deterministically, so every process agrees on the bytes.

The origin serves these bytes and the tests check what came through the cache against them: the
digests are computed here, from the generators, never read back from the server under test. Each
generator stands for one download that upstream's tests used to make into ``/tmp`` (see the
module docstrings of the scenario tests).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import struct
import zlib
from dataclasses import dataclass
from functools import cache

#: tiktoken's GPT-2 pre-tokeniser pattern (the regex splits text before BPE merges apply).
PAT_STR = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
#: Size of the generated BPE vocabulary: 256 single bytes plus merges.
N_RANKS = 300
#: Bands, height and width of a GeoTIFF tile (Prithvi reads six HLS bands).
TIFF_SHAPE = (6, 32, 32)


@dataclass(frozen=True)
class Asset:
    """One file the origin serves: its path on the origin, bytes, and cache namespace."""

    path: str
    data: bytes
    namespace: str
    content_type: str = "application/octet-stream"
    #: The entry's name in the cache, where the test code names it (else derived from the URL).
    filename: str | None = None

    @property
    def sha256(self) -> str:
        """Hex digest of :attr:`data` (what the tests pass to ``fetch``)."""
        return hashlib.sha256(self.data).hexdigest()


def gsm8k_jsonl(n: int = 24) -> bytes:
    """A GSM8K-style ``test.jsonl``: one JSON object per line, the answer after ``####``."""
    lines = []
    for i in range(n):
        a, b = 3 + i, 7 + 2 * i
        question = f"Natalia sold {a} clips in April and {b} clips in May. How many in total?"
        answer = f"She sold {a} + {b} = <<{a}+{b}={a + b}>>{a + b} clips.\n#### {a + b}"
        lines.append(json.dumps({"question": question, "answer": answer}, sort_keys=True))
    return ("\n".join(lines) + "\n").encode()


def _merges(limit: int) -> list[bytes]:
    """Byte tokens, then whole-word merges: every token joins two tokens ranked before it."""
    text = b"the quick brown fox jumps over the lazy dog while the cat sleeps in the sun"
    ranked: list[bytes] = [bytes([i]) for i in range(256)]
    known = set(ranked)
    for word in dict.fromkeys(b" " + w for w in text.split()):
        for end in range(2, len(word) + 1):
            piece = word[:end]
            if piece not in known and len(ranked) < limit:
                ranked.append(piece)  # word[:end - 1] and word[end - 1:end] are known
                known.add(piece)
    return ranked


def tiktoken_bpe() -> bytes:
    """An encoding file in tiktoken's format: ``base64(token) rank`` per line."""
    tokens = _merges(N_RANKS)
    return b"".join(base64.b64encode(t) + b" %d\n" % rank for rank, t in enumerate(tokens))


def geotiff(seed: int) -> bytes:
    """A six-band int16 GeoTIFF tile with pixel scale, tie point and GeoKey directory tags."""
    import numpy as np
    import tifffile

    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 10000, size=TIFF_SHAPE, dtype=np.int16)
    geokeys = (1, 1, 0, 3, 1024, 0, 1, 1, 1025, 0, 1, 1, 3072, 0, 1, 32633)  # UTM 33N
    extratags = [
        (33550, "d", 3, (30.0, 30.0, 0.0), False),  # ModelPixelScaleTag
        (33922, "d", 6, (0.0, 0.0, 0.0, 500000.0 + seed * 960, 4000000.0, 0.0), False),
        (34735, "H", len(geokeys), geokeys, False),  # GeoKeyDirectoryTag
    ]
    out = io.BytesIO()
    tifffile.imwrite(
        out,
        pixels,
        photometric="minisblack",
        planarconfig="separate",
        extratags=extratags,
        software=None,
    )
    return out.getvalue()


def png(seed: int, size: int = 16) -> bytes:
    """A small RGB PNG image (what a media connector downloads for a multimodal request)."""
    raw = b"".join(
        b"\x00" + bytes((x * 16 + seed) % 256 for x in range(size * 3)) for _ in range(size)
    )

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


@cache
def catalog() -> dict[str, Asset]:
    """Every asset the origin serves, by path (paths start with ``/``)."""
    assets = [
        Asset(
            "/datasets/gsm8k/test.jsonl", gsm8k_jsonl(), "gsm8k", "application/jsonl", "test.jsonl"
        ),
        Asset(
            "/encodings/scenario_bpe.tiktoken",
            tiktoken_bpe(),
            "tiktoken",
            "text/plain",
            "scenario_bpe.tiktoken",
        ),
        *(
            Asset(
                f"/prithvi/HLS.S30.T33UUP.2024{day:03d}.tif", geotiff(day), "prithvi", "image/tiff"
            )
            for day in (101, 117)
        ),
        *(Asset(f"/media/image_{i}.png", png(i), "media", "image/png") for i in range(3)),
    ]
    return {a.path: a for a in assets}


def by_namespace(namespace: str) -> list[Asset]:
    """The assets of one cache namespace, in path order."""
    return sorted((a for a in catalog().values() if a.namespace == namespace), key=lambda a: a.path)
