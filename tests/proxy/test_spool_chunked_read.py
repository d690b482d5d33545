"""`SpoolReader.read` takes a segment in chunks, as far as the records wanted need. Whatever the chunk size, it
must return what reading each segment whole returns (the earlier implementation, kept here as the oracle):
the same records, the same position, the same stop at a write in progress, the same skip of a corrupt tail."""

from __future__ import annotations

import logging
import random
import struct
import zlib
from pathlib import Path

import pytest

from evolvable.proxy import spool
from evolvable.proxy.spool import SpoolReader, frame, list_segments, segment_path

_HEADER = struct.Struct("<II")


def _scan_whole(data: bytes, start: int = 0) -> list[tuple[bytes, int]]:
    """Valid frames from `start`, each with the offset past it; stops at a torn or corrupt one."""
    out, pos = [], start
    while pos + _HEADER.size <= len(data):
        length, crc = _HEADER.unpack_from(data, pos)
        body = data[pos + _HEADER.size : pos + _HEADER.size + length]
        if len(body) < length or zlib.crc32(body) != crc:
            break
        pos += _HEADER.size + length
        out.append((body, pos))
    return out


def read_whole(
    directory: Path, start: tuple[int, int], max_records: int, corrupt: list[tuple[int, int]]
) -> tuple[list[bytes], tuple[int, int]]:
    """The reader before chunked reads: each segment read from the offset to its end, then scanned. Older segments
    with bytes left after their last valid frame are added to `corrupt` (seq, offset), as it logged them."""
    records: list[bytes] = []
    seq, offset = start
    segments = [s for s in list_segments(directory) if s >= seq]
    while len(records) < max_records and segments:
        if seq < segments[0]:
            seq, offset = segments[0], 0
        newest = seq == segments[-1]
        path = segment_path(directory, seq)
        data = path.read_bytes()[offset:] if path.exists() else b""
        scanned = 0
        for payload, scanned in _scan_whole(data):
            records.append(payload)
            if len(records) >= max_records:
                return records, (seq, offset + scanned)
        offset += scanned
        if newest:
            break
        if scanned < len(data):
            corrupt.append((seq, offset))
        segments.pop(0)
        if segments:
            seq, offset = segments[0], 0
    return records, (seq, offset)


def _write_spool(directory: Path, rng: random.Random) -> None:
    """A few segments of records from a few bytes to several chunks long; some damaged like a crash or a bad disk."""
    directory.mkdir()
    for seq in range(1, rng.randint(1, 4) + 1):
        data = bytearray()
        for _ in range(rng.randint(0, 40)):
            size = rng.choice([1, 7, 100, 900, 3000, 9000])
            data += frame(rng.randbytes(rng.randint(1, size)))
        damage = rng.random()
        if data and damage < 0.15:  # a torn tail: a write cut short
            data = data[: rng.randint(0, len(data) - 1)]
        elif data and damage < 0.30:  # a flipped byte somewhere
            data[rng.randrange(len(data))] ^= 0xFF
        elif damage < 0.40:  # a frame whose length field claims far more than is there
            data += _HEADER.pack(50_000_000, 0) + b"tail"
        segment_path(directory, seq).write_bytes(bytes(data))


@pytest.mark.parametrize("seed", range(60))
def test_chunked_reads_return_what_whole_reads_do(tmp_path: Path, seed: int, caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(seed)
    directory = tmp_path / "spool"
    _write_spool(directory, rng)
    reader = SpoolReader(directory)
    reader.read_chunk_bytes = rng.choice([1, 5, 8, 13, 64, 1000, 4096, 1 << 20])
    reader.min_first_read_bytes = rng.choice([1, 16, 4096, 64 << 10])  # (a batch's first read follows the mean)
    position = (1, 0)
    for _ in range(200):  # a writer's cycles: a batch, its checkpoint, the next batch from there
        max_records = rng.choice([1, 3, 16, 256])
        corrupt: list[tuple[int, int]] = []
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="evolvable.proxy.spool"):
            got = reader.read(position, max_records)
        assert got == read_whole(directory, position, max_records, corrupt)
        assert [r.getMessage() for r in caplog.records] == [
            f"spool segment {seq} is corrupt at offset {offset}; skipping its remainder" for seq, offset in corrupt
        ]
        records, after = got
        if not records and after == position:
            break
        position = after


def test_a_batch_reads_only_the_chunks_its_records_need(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "spool"
    directory.mkdir()
    payloads = [bytes([i % 256]) * 2000 for i in range(2000)]  # about 4 MB in one segment
    segment_path(directory, 1).write_bytes(b"".join(frame(p) for p in payloads))
    reader = SpoolReader(directory)
    reader.read_chunk_bytes = 64 * 1024
    sizes: list[int] = []

    class CountedFile:
        def __init__(self, path: Path, mode: str) -> None:
            self.file = path.open(mode)

        def __enter__(self) -> CountedFile:
            return self

        def __exit__(self, *exc: object) -> None:
            self.file.close()

        def seek(self, offset: int) -> None:
            self.file.seek(offset)

        def read(self, n: int = -1) -> bytes:
            data: bytes = self.file.read(n)
            sizes.append(len(data))
            return data

    monkeypatch.setattr(spool, "open", CountedFile, raising=False)
    records, position = reader.read((1, 0), 16)
    assert records == payloads[:16]
    assert position == (1, 16 * (2000 + _HEADER.size))
    assert sum(sizes) <= 64 * 1024  # 16 records of 2 kB: one chunk, not the 4 MB segment
    records, _ = reader.read(position, 256)
    assert records == payloads[16:272]
    assert sum(sizes) <= 64 * 1024 * 10


def test_a_small_batch_reads_about_what_its_records_take_not_a_whole_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "spool"
    directory.mkdir()
    payloads = [bytes([i % 256]) * 2000 for i in range(1000)]  # about 2 MB in one segment
    segment_path(directory, 1).write_bytes(b"".join(frame(p) for p in payloads))
    reader = SpoolReader(directory)  # (1 MB chunks, 64 kB first reads at least)
    sizes: list[int] = []
    real_open = open

    def counted_open(path: Path, mode: str) -> object:
        handle = real_open(path, mode)
        read = handle.read

        def counted_read(n: int = -1) -> bytes:
            data: bytes = read(n)
            sizes.append(len(data))
            return data

        handle.read = counted_read
        return handle

    monkeypatch.setattr(spool, "open", counted_open, raising=False)
    records, position = reader.read((1, 0), 4)  # no frame seen yet: a whole chunk
    assert records == payloads[:4] and sizes == [1 << 20]
    sizes.clear()
    records, position = reader.read(position, 4)  # 4 frames of 2 kB: the smallest first read
    assert records == payloads[4:8] and sizes == [64 << 10]
    sizes.clear()
    records, _ = reader.read(position, 200)  # 200 of them: about 1.25 times what they take, in one read
    assert records == payloads[8:208]
    assert len(sizes) == 1 and 200 * 2008 <= sizes[0] <= 1.3 * 200 * 2008
