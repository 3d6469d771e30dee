"""Record values, compressed: an event's JSON is deflated before it is sealed.

The embedded broker stores each record byte as a decimal number in one JSON document it
rewrites as it changes, so every byte a record keeps costs disk and CPU again and again;
event JSON (field names, ids, timestamps) deflates 2-4x. Compression comes before sealing
(``topics/shred.py``): ciphertext does not compress.

A compressed value starts with ``MAGIC`` (a NUL byte, which no JSON text starts with), so
values written before compression, or by producers that do not compress, are read as they
are: the marker is the format's version.
"""

from __future__ import annotations

import zlib

MAGIC = b"\x00z1"
MIN_BYTES = 160  # shorter values rarely shrink enough to pay for the marker
LEVEL = 6
MAX_INFLATED = 64 * 1024 * 1024  # a value never opens to more (a compression bomb stops here)


class Unreadable(ValueError):
    """A compressed value that does not inflate (damaged, or over ``MAX_INFLATED``)."""


def deflate(data: bytes) -> bytes:
    """``data`` compressed behind the marker, or as it is when that is not shorter."""
    if len(data) < MIN_BYTES:
        return data
    packed = MAGIC + zlib.compress(data, LEVEL)
    return packed if len(packed) < len(data) else data


def is_deflated(data: bytes | str) -> bool:
    return isinstance(data, bytes) and data.startswith(MAGIC)


def inflate(data: bytes | str, max_bytes: int = MAX_INFLATED) -> bytes | str:
    """The original bytes of a ``deflate``d value; any other value as it is."""
    if not is_deflated(data):
        return data
    assert isinstance(data, bytes)  # noqa: S101 - is_deflated checked it
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data[len(MAGIC):], max_bytes)
    except zlib.error as exc:
        raise Unreadable(f"a compressed value that does not inflate ({exc})") from None
    if inflater.unconsumed_tail or not inflater.eof:
        raise Unreadable(f"a compressed value that opens to more than {max_bytes:,} bytes, "
                         "or is cut short")
    return out
