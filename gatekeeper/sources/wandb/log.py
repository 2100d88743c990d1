"""Reader of wandb's `.wandb` transaction log: LevelDB-log framing of protobuf `Record`s.

Layout (the framing of https://github.com/google/leveldb/blob/main/doc/log_format.md):

    header := ident ":W&B" (4 bytes) | magic 0xBEE1 (uint16 LE) | version (uint8)
    then 32 KiB blocks (the header takes the first 7 bytes of block 0) of chunks:
    chunk  := crc32 (uint32 LE, over type byte + data) | length (uint16 LE) | type (uint8) | data
    type   := FULL 1 | FIRST 2 | MIDDLE 3 | LAST 4; a block tail shorter than a chunk
              header is zero padding.

A record is one FULL chunk or FIRST, MIDDLE*, LAST. `LogReader` tails a file that is
still being written: it yields complete records and remembers the byte offset just past
the last one, so the next call resumes there. A partial trailing record (the writer is
mid-write, or was killed mid-record) is not an error: it is simply not yielded yet.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import IO

from gatekeeper.errors import RecordError, SourceNotFound
from gatekeeper.safe_open import open_regular

IDENT = b":W&B"
MAGIC = 0xBEE1
KNOWN_VERSIONS = (0,)
HEADER_LEN = 7
BLOCK_LEN = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
READ_SIZE = 4 * 1024 * 1024

_CHUNK = struct.Struct("<IHB")
# crc32 of the type byte, the seed each chunk's checksum continues from.
_TYPE_CRC = [zlib.crc32(bytes([t])) for t in range(5)]


def check_header(head: bytes, path: str) -> None:
    """Raise a RecordError unless `head` is a `.wandb` header of a version this reader knows."""
    ident, magic, version = head[:4], int.from_bytes(head[4:6], "little"), head[6]
    if ident != IDENT or magic != MAGIC:
        raise RecordError(
            f"not a wandb transaction log: header is {head!r}, expected {IDENT!r} + "
            f"magic 0x{MAGIC:X}; pass a wandb run directory or its run-*.wandb file",
            file=path,
        )
    if version not in KNOWN_VERSIONS:
        raise RecordError(
            f"unknown .wandb format version {version} (this gatekeeper reads versions "
            f"{list(KNOWN_VERSIONS)}); upgrade gatekeeper to read files of a newer wandb SDK",
            file=path,
        )


class LogReader:
    """Incremental reader of one `.wandb` file; `offset` is the resume position.

    `offset` 0 means the header has not been read yet; afterwards it is always the byte
    just past the last complete record, so it can be persisted and restored.
    """

    def __init__(self, path: str, offset: int = 0):
        self.path = path
        self.offset = offset
        self.pending_bytes = 0  # bytes after `offset` that do not yet form a whole record

    def records(self) -> Iterator[bytes]:
        """Yield every complete record after `offset`, advancing `offset` past each one."""
        try:
            fh = open_regular(self.path)  # a FIFO named run-x.wandb: an error, not a hang
        except FileNotFoundError:
            raise SourceNotFound(f"{self.path}: no such file") from None
        except OSError as exc:
            raise RecordError(f"cannot read: {exc.strerror}", file=self.path) from None
        with fh:
            if self.offset == 0:
                head = fh.read(HEADER_LEN)
                if len(head) < HEADER_LEN:
                    self.pending_bytes = len(head)
                    return  # the writer has not written the header yet
                check_header(head, self.path)
                self.offset = HEADER_LEN
            fh.seek(self.offset)
            yield from self._scan(fh)

    def _scan(self, fh: IO[bytes]) -> Iterator[bytes]:
        buf = fh.read(READ_SIZE)
        base = self.offset  # file offset of buf[0]
        pos = 0  # next chunk header, relative to buf
        parts: list[bytes] = []  # chunks of a FIRST..LAST record being assembled
        while True:
            block_left = BLOCK_LEN - (base + pos) % BLOCK_LEN
            if block_left < HEADER_LEN:
                pos += block_left  # zero padding at a block tail
                if not parts:
                    self.offset = base + pos
                continue
            end = pos + HEADER_LEN
            if end <= len(buf):
                crc, length, kind = _CHUNK.unpack_from(buf, pos)
                if kind == 0 and length == 0 and crc == 0:
                    break  # preallocated zeros: nothing written here yet
                end += length
            if end > len(buf):
                more = fh.read(READ_SIZE)
                if not more:
                    break  # a partial trailing record: wait for the writer
                # drop what is consumed, keep the pending record (padding may end past buf)
                keep = min(self.offset - base, len(buf))
                buf = buf[keep:] + more
                pos -= keep
                base += keep
                continue
            data = buf[pos + HEADER_LEN : end]
            if kind > LAST or zlib.crc32(data, _TYPE_CRC[kind]) != crc:
                raise self._corrupt(base + pos, kind)
            pos = end
            record = self._assemble(kind, data, parts, base + pos)
            if record is not None:
                self.offset = base + pos
                yield record
        self.pending_bytes = base + len(buf) - self.offset

    def _corrupt(self, at: int, kind: int) -> RecordError:
        what = "CRC32 mismatch" if kind <= LAST else f"unknown chunk type {kind}"
        return RecordError(
            f"corrupt record at byte {at}: {what}; the file was damaged after it was "
            "written (a writer killed mid-record only truncates it, which is handled)",
            file=self.path,
        )

    def _assemble(self, kind: int, data: bytes, parts: list[bytes], at: int) -> bytes | None:
        if kind == FULL:
            if parts:
                raise self._framing_error(at, "FULL chunk inside a FIRST..LAST record")
            return data
        if kind == FIRST:
            if parts:
                raise self._framing_error(at, "FIRST chunk before the previous record's LAST")
            parts.append(data)
            return None
        if not parts:
            raise self._framing_error(at, "MIDDLE/LAST chunk without a FIRST")
        parts.append(data)
        if kind == MIDDLE:
            return None
        record = b"".join(parts)
        parts.clear()
        return record

    def _framing_error(self, at: int, what: str) -> RecordError:
        return RecordError(f"corrupt record framing near byte {at}: {what}", file=self.path)
