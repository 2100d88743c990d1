"""TFRecord framing of event files: find every complete record, verify both CRCs.

A record is `uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)`
(little-endian). CRC32C runs in C (`google-crc32c`): TensorBoard's pure-Python fallback is
what makes its loader crawl. A record cut off at the end of the bytes is *pending* (a live
writer mid-flush; a final read calls it truncated); a record whose CRC does not match is
corrupt and raises, naming the file and the byte offset, because skipping it would hide data.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from gatekeeper.errors import RecordError, SourceError
from gatekeeper.extras import load

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8
# An event (a scalar, an image, a graph) is far below this; a length above it means the
# framing is broken, and trusting it would make a reader wait forever for the "rest".
MAX_RECORD_BYTES = 1 << 30


def crc32c_function() -> Callable[[bytes], int]:
    google_crc32c = load("google_crc32c", "tensorboard", "reading TensorBoard event files")
    if google_crc32c.implementation != "c":
        raise SourceError(
            "google-crc32c is installed without its C extension; reinstall it "
            "(pip install --force-reinstall google-crc32c) so CRCs are checked at C speed"
        )
    return google_crc32c.value  # type: ignore[no-any-return]


def masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


@dataclass
class Framed:
    """The complete records of `data` (a file's bytes from `base`): where each payload
    starts in `data` and its length, where the complete part ends (a file offset), and how
    many bytes of an incomplete record follow it."""

    data: bytes
    base: int
    starts: list[int]
    lengths: list[int]
    end: int
    pending: int

    def payload(self, i: int) -> bytes:
        start = self.starts[i]
        return self.data[start : start + self.lengths[i]]

    def offset(self, i: int) -> int:
        """The file offset of record `i` (its header)."""
        return self.base + self.starts[i] - 12


def frame(data: bytes, base: int, path: str) -> Framed:
    """Split `data` (the file's bytes from offset `base`) into verified records."""
    crc = crc32c_function()  # takes bytes only: payload slices are copies
    size = len(data)
    starts: list[int] = []
    lengths: list[int] = []
    # Records of one tag have one length, so the header CRC repeats: check it once per
    # length, comparing the stored CRC with the one computed for the same 8 bytes before.
    header_crcs: dict[int, int] = {}
    pos = 0
    unpack_header, unpack_footer = _HEADER.unpack_from, _FOOTER.unpack_from
    add_start, add_length = starts.append, lengths.append
    while size - pos >= 12:
        length, length_crc = unpack_header(data, pos)
        known = header_crcs.get(length)
        if known is None:
            c = crc(data[pos : pos + 8])
            known = header_crcs[length] = (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF
        if known != length_crc:
            raise RecordError(
                f"byte offset {base + pos}: corrupt record header (length CRC mismatch)", file=path
            )
        if length > MAX_RECORD_BYTES:
            raise RecordError(
                f"byte offset {base + pos}: record length {length} is not plausible", file=path
            )
        start = pos + 12
        end = start + length + 4
        if end > size:
            break
        c = crc(data[start : start + length])
        if (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF != unpack_footer(data, end - 4)[0]:
            raise RecordError(
                f"byte offset {base + pos}: corrupt record ({length} bytes, data CRC mismatch)",
                file=path,
            )
        add_start(start)
        add_length(length)
        pos = end
    return Framed(data, base, starts, lengths, base + pos, size - pos)
