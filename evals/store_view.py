"""A digest of a SQLite database as its readers see it, computed from its files without SQL.

Why: a sweep reads a store's state several times per faulted unit, and most of those reads find a state
already read: a failed write rolled back to the snapshot, an idempotent repeat changed nothing, a close
checkpointed the same pages into the main file. Two databases whose pages are the same bytes answer every
query the same, so a read whose digest equals an earlier read's may reuse that read's rows (`RowMemo`).

The digest covers every page a reader sees: the main file's pages, overlaid with the WAL's frames up to the
last commit the wal-index (`-shm`) publishes, which is how SQLite's readers find a page
(https://sqlite.org/fileformat2.html#the_write_ahead_log, https://sqlite.org/walformat.html). It is a hash
of the per-page SHA-256 digests, and a page's digest is recomputed only when its bytes differ from the same
file's at the last call. Anything unexpected (a WAL without its index, index headers that disagree, salts
that do not match, a page found nowhere) gives None: the caller reads the rows instead.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import numpy as np

_DB_MAGIC = b"SQLite format 3\x00"
_WAL_MAGICS = (0x377F0682, 0x377F0683)
_WAL_HEADER, _FRAME_HEADER = 32, 24
_SHM_HEADER = struct.Struct("=IIIBBHII8s8s8s")  # WalIndexHdr, in the writer's native byte order
_WAL_VERSION = 3007000


class PageDigests:
    """Per-page digests of each file, kept per file so an unchanged page is never hashed twice.

    A file's pages are compared with that file's at the last call, page by page (numpy, at memory speed):
    only the pages whose bytes differ are hashed again.
    """

    def __init__(self, max_files: int = 32):
        self._files: dict[tuple[str, int], tuple[bytes, int, list[bytes]]] = {}
        self._max_files = max_files

    def of_pages(self, name: str, data: bytes, start: int, stride: int, header: int, count: int) -> list[bytes]:
        """The SHA-256 of each of `count` pages of `data`: the i-th is the `stride - header` bytes after a
        `header`-byte header at `start + i * stride` (a WAL frame's header is compared but not hashed)."""
        key = (name, stride)
        last = self._files.get(key)
        digests: list[bytes] = []
        if last is not None:
            old_data, old_start, old = last
            shared = min(count, len(old))
            words = stride // 8  # strides are multiples of 8 (a page size is a power of two from 512)
            now = np.frombuffer(data, np.uint64, shared * words, start).reshape(shared, words)
            was = np.frombuffer(old_data, np.uint64, shared * words, old_start).reshape(shared, words)
            same = ~(now != was).any(axis=1)
            digests = [old[i] if same[i] else _digest(data, start + i * stride + header, stride - header)
                       for i in range(shared)]
        digests += [_digest(data, start + i * stride + header, stride - header) for i in range(len(digests), count)]
        if key not in self._files and len(self._files) >= self._max_files:
            self._files.pop(next(iter(self._files)))
        self._files[key] = (data, start, digests)
        return digests


def _digest(data: bytes, at: int, size: int) -> bytes:
    return hashlib.sha256(memoryview(data)[at:at + size]).digest()


def view_digest(db_path: Path, pages: PageDigests | None = None) -> bytes | None:
    """A digest of the database at `db_path` as a new reader would see it now, or None when it cannot tell.

    Equal digests: every page a reader reads is the same bytes, so every query answers the same.
    """
    pages = pages if pages is not None else PageDigests()
    try:
        data = db_path.read_bytes()
    except OSError:
        return None
    if len(data) < 100 or not data.startswith(_DB_MAGIC):
        return None
    page_size = _page_size(struct.unpack(">H", data[16:18])[0])
    if len(data) % page_size:
        return None
    wal_path, shm_path = Path(f"{db_path}-wal"), Path(f"{db_path}-shm")
    frames: dict[int, bytes] = {}
    count = len(data) // page_size
    if wal_path.exists() or shm_path.exists():  # WAL mode with a wal-index: both, or the caller reads rows
        published = _published_frames(wal_path, shm_path, page_size, pages)
        if published is None:
            return None
        frames, n_page = published
        if n_page:  # 0: no commit in this WAL; the main file's size is the database's
            count = n_page
    file_digests = pages.of_pages(str(db_path), data, 0, page_size, 0, len(data) // page_size)
    digest = hashlib.sha256(struct.pack(">II", page_size, count))
    for pgno in range(1, count + 1):
        if pgno in frames:
            digest.update(frames[pgno])
        elif pgno <= len(file_digests):
            digest.update(file_digests[pgno - 1])
        else:  # a page neither the WAL nor the main file holds: not a state a reader can see
            return None
    return digest.digest()


def _page_size(raw: int) -> int:
    return 65536 if raw == 1 else raw


def _published_frames(wal_path: Path, shm_path: Path, page_size: int, pages: PageDigests
                      ) -> tuple[dict[int, bytes], int] | None:
    """(page number -> digest of its newest published frame, the database's size in pages; 0: the main file's).

    The published frames are those up to `mxFrame` of the wal-index header: what a reader starting now uses.
    A frame after them that belongs to this WAL (its salts) is either a rolled-back spill or a commit a crashed
    writer never published, which a reader's recovery would replay: None, as the caller cannot tell which.
    """
    try:
        with open(shm_path, "rb") as f:
            shm = f.read(2 * _SHM_HEADER.size)
        wal = wal_path.read_bytes()
    except OSError:
        return None
    if len(shm) < 2 * _SHM_HEADER.size or shm[:_SHM_HEADER.size] != shm[_SHM_HEADER.size:]:
        return None  # a header being written, or no index: SQLite would recover; the caller reads rows
    version, _, _, is_init, _, raw_size, mx_frame, n_page, _, salts, _ = _SHM_HEADER.unpack(shm[:_SHM_HEADER.size])
    if version != _WAL_VERSION or not is_init:
        return None
    frame_size = _FRAME_HEADER + page_size
    if len(wal) < _WAL_HEADER + frame_size:  # no whole frame in the file
        return ({}, 0) if mx_frame == 0 else None
    magic, _, wal_page_size = struct.unpack(">III", wal[:12])
    if magic not in _WAL_MAGICS or wal_page_size != page_size:
        return None
    if mx_frame and (_page_size(raw_size) != page_size or n_page == 0 or wal[16:24] != salts
                     or len(wal) < _WAL_HEADER + mx_frame * frame_size):
        return None
    in_file = (len(wal) - _WAL_HEADER) // frame_size
    for frame in range(mx_frame, in_file):
        at = _WAL_HEADER + frame * frame_size
        if wal[at + 8:at + 16] == wal[16:24]:
            return None
    digests = pages.of_pages(str(wal_path), wal, _WAL_HEADER, frame_size, _FRAME_HEADER, mx_frame)
    newest: dict[int, bytes] = {}
    for frame in range(mx_frame):  # in order: a page's newest frame is the one a reader uses
        at = _WAL_HEADER + frame * frame_size
        if wal[at + 8:at + 16] != salts:  # a frame of an earlier WAL generation below mxFrame: not expected
            return None
        newest[int.from_bytes(wal[at:at + 4], "big")] = digests[frame]
    return newest, n_page


__all__ = ["PageDigests", "view_digest"]
