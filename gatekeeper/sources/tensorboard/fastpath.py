"""Decode the common scalar event without protobuf, for all records at once, in numpy.

tensorboardX and `torch.utils.tensorboard` write one scalar per event in exactly one layout
(fields in number order, as every protobuf serializer emits them):

    09 <wall_time f64> [10 <step varint>] 2A <len> 0A <len> 0A <len> <tag> 15 <value f32>

`simple_scalars` recognises that layout with vectorized byte compares and varint decodes,
and returns steps, values and tags of the records that match it *exactly* (every length
must add up to the record's end); everything else — TF2 tensor scalars, several values in
one event, images, metadata — is left to the protobuf decoder. A tag that is not UTF-8
is left to it too, so such a record is refused by protobuf's own check, as any other
record is, instead of becoming a metric of its own. This is what makes a million-scalar
file cost about as much as checking its CRCs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_MAX_TAG = 255  # longer tags take the protobuf path (the length is kept in one byte)
_CHUNK = 131072  # records per tag-grouping batch: bounds the padded tag matrix


@dataclass
class Scalars:
    index: np.ndarray  # record numbers that matched (int64, increasing)
    steps: np.ndarray
    values: np.ndarray
    tags: np.ndarray  # per matched record: index into `names`
    names: list[str]


def _at(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return buf[np.clip(pos, 0, buf.size - 1)]


def _varint(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Decode a varint at every position: (value as int64, its byte length, complete)."""
    value = np.zeros(pos.size, np.uint64)
    length = np.zeros(pos.size, np.int64)
    done = np.zeros(pos.size, bool)
    for j in range(10):
        byte = _at(buf, pos + j).astype(np.uint64)
        live = ~done
        value[live] |= (byte[live] & np.uint64(0x7F)) << np.uint64(7 * j)
        length[live] += 1
        done |= byte < 0x80
        if done.all():
            break
    return value.view(np.int64), length, done


def simple_scalars(data: bytes, starts: list[int], lengths: list[int]) -> Scalars:
    buf = np.frombuffer(data, np.uint8)
    s = np.asarray(starts, np.int64)
    e = s + np.asarray(lengths, np.int64)
    ok = (e - s >= 12) & (_at(buf, s) == 0x09)
    p = s + 9
    has_step = _at(buf, p) == 0x10  # proto3 leaves step 0 out
    step, n, complete = _varint(buf, p + 1)
    step = np.where(has_step, step, 0)
    ok &= complete | ~has_step
    p = np.where(has_step, p + 1 + n, p)
    ok &= _at(buf, p) == 0x2A
    summary_len, n, complete = _varint(buf, p + 1)
    p = p + 1 + n
    ok &= complete & (p + summary_len == e) & (_at(buf, p) == 0x0A)
    value_len, n, complete = _varint(buf, p + 1)
    p = p + 1 + n
    ok &= complete & (p + value_len == e) & (_at(buf, p) == 0x0A)
    tag_len, n, complete = _varint(buf, p + 1)
    tag_start = p + 1 + n
    p = tag_start + tag_len
    ok &= complete & (tag_len > 0) & (tag_len <= _MAX_TAG)
    ok &= (_at(buf, p) == 0x15) & (p + 5 == e)
    index = np.flatnonzero(ok)
    tags, names, utf8 = _group_tags(buf, tag_start[index], tag_len[index])
    if not utf8.all():
        index, tags = index[utf8], tags[utf8]
    vpos = p[index, None] + np.arange(1, 5)
    values = _at(buf, vpos).astype(np.uint8).view("<f4").ravel().astype(np.float64)
    return Scalars(index, step[index], values, tags, names)


def _group_tags(
    buf: np.ndarray, start: np.ndarray, length: np.ndarray
) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Tag number per record, the tag names, and per record whether its tag is UTF-8,
    grouping equal tag bytes in batches."""
    names: list[str] = []
    known: dict[bytes, int] = {}
    invalid: list[int] = []  # numbers of the tags that are not UTF-8
    out = np.empty(start.size, np.int64)
    for lo in range(0, start.size, _CHUNK):
        st, ln = start[lo : lo + _CHUNK], length[lo : lo + _CHUNK]
        width = int(ln.max()) + 1
        cols = np.arange(width - 1)
        matrix = np.zeros((st.size, width), np.uint8)
        body = _at(buf, st[:, None] + cols)
        matrix[:, : width - 1] = np.where(cols < ln[:, None], body, 0)
        matrix[:, -1] = ln  # tags differing only by trailing NULs stay apart
        rows = np.ascontiguousarray(matrix).view(np.dtype((np.void, width))).ravel()
        uniq, inverse = np.unique(rows, return_inverse=True)
        ids = np.empty(uniq.size, np.int64)
        for k, row in enumerate(uniq):
            raw = bytes(row)
            tag = raw[: raw[-1]]
            if tag not in known:
                known[tag] = len(names)
                try:
                    names.append(tag.decode("utf-8"))
                except UnicodeDecodeError:
                    invalid.append(len(names))
                    names.append("")
            ids[k] = known[tag]
        out[lo : lo + _CHUNK] = ids[inverse.ravel()]
    return out, names, ~np.isin(out, invalid)
