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

The main file is read whole unless a read found it settled (unchanged for `SETTLED_NS` before it) and its
stat (device, inode, size, mtime, ctime) is the same now: in WAL mode SQLite writes it only when it
checkpoints, and reading it whole made every read of a long case O(store) (`PageDigests.settled`).
"""

from __future__ import annotations

import hashlib
import os
import struct
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

_DB_MAGIC = b"SQLite format 3\x00"
_WAL_MAGICS = (0x377F0682, 0x377F0683)
_WAL_HEADER, _FRAME_HEADER = 32, 24
_SHM_HEADER = struct.Struct("=IIIBBHII8s8s8s")  # WalIndexHdr, in the writer's native byte order
_WAL_VERSION = 3007000
_INTERIOR_TABLE, _LEAF_TABLE = 0x05, 0x0D
INTERIOR_TABLE, LEAF_TABLE = _INTERIOR_TABLE, _LEAF_TABLE  # a table b-tree's interior and leaf page kinds


class PageDigests:
    """Per-page digests of each file, kept per file so an unchanged page is never hashed twice.

    A file's pages are compared with that file's at the last call, page by page (numpy, at memory speed):
    only the pages whose bytes differ are hashed again. The files kept are bounded in bytes (oldest dropped).
    """

    def __init__(self, max_bytes: int = 64 << 20):
        self._files: dict[tuple[str, int], tuple[bytes, int, list[bytes]]] = {}
        self._max_bytes, self._bytes = max_bytes, 0
        self.btree: dict[tuple[bool, bytes], tuple[int, tuple[int, ...]]] = {}  # `table_leaves`' parsed pages
        self.same_prefix = 0  # the last call's leading pages whose bytes were the same as the call before's
        # a WAL's published frames as its last read parsed them: (path, frame size) -> (salts, mxFrame, page ->
        # (offset, digest)); kept only when that read's `of_pages` call was the file's last (see _published_frames)
        self.frames: dict[tuple[str, int], tuple[bytes, int, dict[int, tuple[int, bytes]]]] = {}
        self._stats: dict[str, tuple[tuple[int, ...], int]] = {}  # a settled main file -> (its stat, page size)
        # each database's last view: (its main file's digests list, those joined, (page size, pages), its frames,
        # the view's `digests` and `digest`), see `view_digests`
        self._views: dict[str, tuple[list[bytes], bytes, tuple[int, int], dict[int, tuple[int, bytes]], bytes,
                                     bytes]] = {}

    def settled(self, name: str, stat: os.stat_result) -> tuple[bytes, int, list[bytes]] | None:
        """The bytes, page size and page digests of a main database file as its last read found them, when
        that read found it settled (`read_whole`) and its stat is the same now; else None: read it.

        Why: in WAL mode SQLite writes the main file only when it checkpoints, so most reads of a long case
        find it as it was, and reading and comparing it whole made every read O(store). This trusts the
        file's change time, not its bytes: a write, truncation, rename over it or utime after the read sets
        the ctime to the time of that change (the kernel's, not settable by a process), which is past the
        quiet period (`SETTLED_NS`, longer than the file system's timestamp granularity) that the recorded
        ctime had to be behind the read's start, so the stat differs. A file changed within that period of a
        read is read whole again at the next. What else it trusts: the wall clock not stepped back by more than
        that period between the two reads."""
        known = self._stats.get(name)
        if known is None or known[0] != _signature(stat):
            return None
        last = self._files.get((name, known[1]))
        if last is None or last[1] != 0:
            return None
        return last[0], known[1], last[2]

    def read_whole(self, name: str, stat: os.stat_result, started: int, page_size: int) -> None:
        """Note a read of the whole main file, `stat` taken before it at `started` (time.time_ns): settled
        when its last change (mtime and ctime) was `SETTLED_NS` or more before (`COARSE_SETTLED_NS` for a file
        system that keeps whole seconds: `_quiet_period`)."""
        self._stats.pop(name, None)
        changed = max(stat.st_mtime_ns, stat.st_ctime_ns)
        if changed > started - _quiet_period(stat) or (name, page_size) not in self._files:
            return
        if len(self._stats) >= _MAX_FILES:
            self._stats.pop(next(iter(self._stats)))
        self._stats[name] = (_signature(stat), page_size)

    def of_pages(self, name: str, data: bytes, start: int, stride: int, header: int, count: int) -> list[bytes]:
        """The SHA-256 of each of `count` pages of `data`: the i-th is the `stride - header` bytes after a
        `header`-byte header at `start + i * stride` (a WAL frame's header is compared but not hashed)."""
        key = (name, stride)
        last = self._files.get(key)
        digests: list[bytes] = []
        self.same_prefix = 0
        if last is not None:
            old_data, old_start, old = last
            shared = min(count, len(old))
            words = stride // 8  # strides are multiples of 8 (a page size is a power of two from 512)
            now = np.frombuffer(data, np.uint64, shared * words, start).reshape(shared, words)
            was = np.frombuffer(old_data, np.uint64, shared * words, old_start).reshape(shared, words)
            same = ~(now != was).any(axis=1)
            self.same_prefix = int(shared if same.all() else np.argmin(same))
            digests = old[:shared]  # the unchanged pages' digests copied at C speed, the others hashed again
            for i in np.flatnonzero(~same).tolist():
                digests[i] = _digest(data, start + i * stride + header, stride - header)
        digests += [_digest(data, start + i * stride + header, stride - header) for i in range(len(digests), count)]
        if last is not None:
            self._bytes -= len(self._files.pop(key)[0])
        while self._files and self._bytes + len(data) > self._max_bytes:
            self._bytes -= len(self._files.pop(next(iter(self._files)))[0])
        if len(data) <= self._max_bytes:
            self._files[key] = (data, start, digests)  # the newest last
            self._bytes += len(data)
        return digests


    def view_digests(self, name: str, page_size: int, count: int, file_digests: list[bytes],
                     frames: dict[int, tuple[int, bytes]]) -> tuple[bytes, bytes]:
        """A view's `digests` and `digest` (as `View` makes them), every page past the main file's end a frame.

        Why: a view's digests are O(pages) to join and hash, and a long case reads its store a few times a write
        (each read twice: before and after, to see it unchanged while read), so at 10,000 turns they were a
        growing part of every write. Taken from the last view of `name` when it is the same main file's digests
        (the same list: `of_pages` makes a new one whenever it hashes the file) and the same frames (page ->
        offset, SHA-256 of its bytes): the same pages' digests, so the same bytes. Else the main file's digests
        are joined once per list and only the frames' written over them; the digest is hashed again."""
        last = self._views.pop(name, None)
        shape = (page_size, count)
        if last is not None and last[0] is file_digests and last[2] == shape and last[3] == frames:
            base, digests, digest = last[1], last[4], last[5]
        else:
            base = last[1] if last is not None and last[0] is file_digests else b"".join(file_digests)
            digests = _overlaid(base, count, frames)
            digest = _view_digest(page_size, count, digests)
        if len(self._views) >= _MAX_FILES:
            self._views.pop(next(iter(self._views)))
        self._views[name] = (file_digests, base, shape, frames, digests, digest)
        return digests, digest


# A main file unchanged this long before a read is trusted unchanged while its stat is. It must pass the file
# system's timestamp granularity: Linux stamps a change with its coarse clock, which moves once a tick (10 ms at the
# slowest, HZ = 100), so a change after the read gets a later stamp than one this long before it (`_quiet_period`).
# 200 ms before the twenty-second session: a long case's main file, checkpointed every ~100 writes, was then read
# whole for 200 ms after each checkpoint, 0.6 times a write at 3,000 turns (2.6 MB a write).
SETTLED_NS = 50_000_000
COARSE_SETTLED_NS = 2_500_000_000  # for a file whose times are whole seconds: FAT keeps them to 2 s


def _quiet_period(stat: os.stat_result) -> int:
    """How long before a read a file's last change must be for its stat to vouch for its bytes afterwards. A stat
    whose modification and change times are both whole seconds comes from a file system that keeps no finer ones
    (or, one time in a billion, from chance, which then only waits longer)."""
    second = 1_000_000_000
    return COARSE_SETTLED_NS if not stat.st_mtime_ns % second and not stat.st_ctime_ns % second else SETTLED_NS


def _signature(stat: os.stat_result) -> tuple[int, ...]:
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns


def _digest(data: bytes, at: int, size: int) -> bytes:
    return hashlib.sha256(memoryview(data)[at:at + size]).digest()


def _view_digest(page_size: int, count: int, digests: bytes) -> bytes:
    return hashlib.sha256(struct.pack(">II", page_size, count) + digests).digest()


def _overlaid(base: bytes, count: int, frames: dict[int, tuple[int, bytes]]) -> bytes:
    """The first `count` pages' digests of `base` (32 bytes a page) with the frames' written over them; the
    pages past `base`'s end must all be frames (as `read_view` checks)."""
    out = bytearray(base[:count * 32])
    out.extend(bytes(count * 32 - len(out)))
    for pgno, (_, frame_digest) in frames.items():
        if pgno <= count:
            out[(pgno - 1) * 32:pgno * 32] = frame_digest  # a SHA-256: 32 bytes, so every page stays in place
    return bytes(out)


class View:
    """The pages of a database as a new reader sees them now: each page's bytes and SHA-256, and a digest of all.

    Equal digests: every page a reader reads is the same bytes, so every query answers the same.
    """

    def __init__(self, page_size: int, usable: int, count: int, file: bytes, file_digests: list[bytes],
                 wal: bytes, frames: dict[int, tuple[int, bytes]], digests: tuple[bytes, bytes] | None = None):
        self.page_size, self.usable, self.count = page_size, usable, count
        self._file, self._file_digests, self._wal, self._frames = file, file_digests, wal, frames
        if digests is not None:  # made by `PageDigests.view_digests`, the same as below
            self.digests, self.digest = digests
            return
        # every page's digest in page order, the WAL's frames over the main file's: one hash over their bytes
        pages = file_digests[:count] + [b""] * (count - len(file_digests))
        for pgno, (_, frame_digest) in frames.items():
            if pgno <= count:
                pages[pgno - 1] = frame_digest  # read_view: every page past the main file's end is a frame
        self.digests = b"".join(pages)  # each page's SHA-256 in page order: what `changed_pages` compares
        self.digest = _view_digest(page_size, count, self.digests)

    def page_digest(self, pgno: int) -> bytes:
        frame = self._frames.get(pgno)
        return frame[1] if frame is not None else self._file_digests[pgno - 1]

    def page(self, pgno: int) -> memoryview:
        if not 1 <= pgno <= self.count:
            raise ValueError(f"page {pgno} is outside the database (1..{self.count})")
        frame = self._frames.get(pgno)
        if frame is not None:
            return memoryview(self._wal)[frame[0]:frame[0] + self.page_size]
        return memoryview(self._file)[(pgno - 1) * self.page_size:pgno * self.page_size]


def read_view(db_path: str | Path, pages: PageDigests | None = None) -> View | None:
    """The database at `db_path` as a new reader would see it now (its main file overlaid with the WAL's
    published frames), or None when the files do not say it exactly."""
    pages = pages if pages is not None else PageDigests()
    db = str(db_path)
    try:
        started = time.time_ns()
        stat = os.stat(db)
        known = pages.settled(db, stat)
        if known is None:
            with open(db, "rb") as f:
                data = f.read()
    except OSError:
        return None
    if known is not None:
        data, page_size, file_digests = known
    else:
        if len(data) < 100 or not data.startswith(_DB_MAGIC):
            return None
        page_size = _page_size(int.from_bytes(data[16:18], "big"))
        if len(data) % page_size:
            return None
    wal_path, shm_path = db + "-wal", db + "-shm"
    wal: bytes = b""
    frames: dict[int, tuple[int, bytes]] = {}
    count = len(data) // page_size
    if os.path.exists(wal_path) or os.path.exists(shm_path):  # WAL mode: both, or the caller reads rows
        published = _published_frames(wal_path, shm_path, page_size, pages)
        if published is None:
            return None
        wal, frames, n_page = published
        if n_page:  # 0: no commit in this WAL; the main file's size is the database's
            count = n_page
    if known is None:
        file_digests = pages.of_pages(db, data, 0, page_size, 0, len(data) // page_size)
        pages.read_whole(db, stat, started, page_size)
    if any(pgno not in frames for pgno in range(len(file_digests) + 1, count + 1)):
        return None  # a page neither the WAL nor the main file holds: not a state a reader can see
    return View(page_size, page_size - data[20], count, data, file_digests, wal, frames,
                pages.view_digests(db, page_size, count, file_digests, frames))


class Leaf(NamedTuple):
    """A leaf page of a table's b-tree: the rowid of each of its cells, in order, and its overflow pages."""

    rowids: list[int]
    overflow: list[int]


def table_leaves(view: View, root: int, parsed: dict[tuple[bool, bytes], tuple[int, tuple[int, ...]]] | None = None,
                 seen: set[int] | None = None) -> list[int] | None:
    """The leaf pages of the rowid table whose b-tree starts at `root`, in rowid order: the pages a full scan
    of the table reads its rows from. None when a page is not a table b-tree page or one is reached twice.

    `parsed`: each page's kind and children, by (page 1 or not, its SHA-256), shared between reads, so a page
    that is the same bytes as one walked before is not parsed again. `seen`: filled with every page walked
    (interior and leaf)."""
    leaves: list[int] = []
    seen = seen if seen is not None else set()
    stack = [root]
    while stack:
        pgno = stack.pop()
        if pgno in seen or not 1 <= pgno <= view.count:
            return None
        seen.add(pgno)
        kind, children = btree_page(view, pgno, parsed)
        if kind == _LEAF_TABLE:
            leaves.append(pgno)
        elif kind == _INTERIOR_TABLE:
            stack.extend(reversed(children))
        else:
            return None
    return leaves


def btree_page(view: View, pgno: int, parsed: dict[tuple[bool, bytes], tuple[int, tuple[int, ...]]] | None = None
               ) -> tuple[int, tuple[int, ...]]:
    """(page `pgno`'s kind, its child pages in key order when it is an interior table page), parsed once per
    distinct page content when `parsed` is given (see `table_leaves`)."""
    key = (pgno == 1, view.page_digest(pgno))
    known = parsed.get(key) if parsed is not None else None
    if known is not None:
        return known
    kind, children = _btree_page(view.page(pgno), pgno)
    if parsed is not None:
        if len(parsed) >= _MAX_PARSED:
            parsed.clear()
        parsed[key] = (kind, children)
    return kind, children


def is_table_leaf(view: View, pgno: int) -> bool:
    """Whether page `pgno` is a table b-tree leaf page."""
    return view.page(pgno)[100 if pgno == 1 else 0] == _LEAF_TABLE


_MAX_PARSED = 20_000  # pages whose parse `btree_page` keeps
_MAX_WALS = 64  # WAL files whose parsed frames `_published_frames` keeps
_MAX_FILES = 64  # database files whose last settled stat and last view's digests `PageDigests` keeps


def _btree_page(page: memoryview, pgno: int) -> tuple[int, tuple[int, ...]]:
    """(the page's kind, its child pages in key order when it is an interior table page)."""
    at = 100 if pgno == 1 else 0
    kind, cells = page[at], int.from_bytes(page[at + 3:at + 5], "big")
    if kind != _INTERIOR_TABLE:
        return kind, ()
    children = _children(page, at, cells)
    if children is None:  # a pointer array or a cell past the page's end: what the byte slices read there
        pointers = page[at + 12:at + 12 + 2 * cells]
        children = [int.from_bytes(page[o:o + 4], "big")
                    for o in (int.from_bytes(pointers[2 * i:2 * i + 2], "big") for i in range(cells))]
    children.append(int.from_bytes(page[at + 8:at + 12], "big"))  # the right-most child: the largest keys
    # a tuple of ints, which the garbage collector stops tracking: the parses are kept (`PageDigests.btree`), a
    # long case's interior pages hold hundreds of children and its last one changes with most appends
    return kind, tuple(children)


def _children(page: memoryview, at: int, cells: int) -> list[int] | None:
    """Each cell's left child (the first 4 bytes of the cell each pointer points to, big-endian), read at C speed
    (an interior page of a long case's table holds hundreds of cells, and its last one changes with most
    appends); None when a pointer or a cell is not wholly on the page."""
    if at + 12 + 2 * cells > len(page):
        return None
    data = np.frombuffer(page, np.uint8)
    offsets = np.frombuffer(page, ">u2", cells, at + 12).astype(np.int64)
    if cells and int(offsets.max()) + 4 > len(page):
        return None
    cell = data[offsets[:, None] + np.arange(4)].astype(np.int64)
    return ((cell[:, 0] << 24) | (cell[:, 1] << 16) | (cell[:, 2] << 8) | cell[:, 3]).tolist()


def leaf_cells(view: View, pgno: int) -> Leaf:
    """The rowids and overflow pages of a table leaf page (https://sqlite.org/fileformat2.html#b_tree_pages)."""
    page = view.page(pgno)
    at = 100 if pgno == 1 else 0
    cells = int.from_bytes(page[at + 3:at + 5], "big")
    usable = view.usable
    most, least = usable - 35, (usable - 12) * 32 // 255 - 23  # the largest and smallest local payloads
    rowids, overflow = [], []
    for i in range(cells):
        cell = int.from_bytes(page[at + 8 + 2 * i:at + 10 + 2 * i], "big")
        size, cell = _varint(page, cell)
        rowid, cell = _varint(page, cell)
        rowids.append(rowid - (1 << 64) if rowid >= 1 << 63 else rowid)
        if size > most:
            local = least + (size - least) % (usable - 4)
            local = local if local <= most else least
            chain = int.from_bytes(page[cell + local:cell + local + 4], "big")
            for _ in range(-(-(size - local) // (usable - 4))):
                overflow.append(chain)
                chain = int.from_bytes(view.page(chain)[:4], "big")
    return Leaf(rowids, overflow)


def _varint(page: memoryview, at: int) -> tuple[int, int]:
    """SQLite's big-endian varint at `at`: (value, the offset after it)."""
    value = 0
    for i in range(8):
        byte = page[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    return (value << 8) | page[at + 8], at + 9


def changed_pages(before: bytes, after: bytes) -> set[int]:
    """The pages (numbers from 1) whose SHA-256 differs between two views' `digests`, with every page that
    only one of them has: compared at C speed, so a read finds what changed since the last one in O(changed)
    Python work."""
    if len(before) % 32 or len(after) % 32:
        raise ValueError("page digests are 32 bytes each")
    old, new = len(before) // 32, len(after) // 32
    shared = min(old, new)
    was = np.frombuffer(before, np.uint8, shared * 32).reshape(shared, 32)
    now = np.frombuffer(after, np.uint8, shared * 32).reshape(shared, 32)
    changed = set((np.flatnonzero((was != now).any(axis=1)) + 1).tolist())
    changed.update(range(shared + 1, max(old, new) + 1))
    return changed


def view_digest(db_path: str | Path, pages: PageDigests | None = None) -> bytes | None:
    """The digest of `read_view`, or None."""
    view = read_view(db_path, pages)
    return view.digest if view is not None else None


def _page_size(raw: int) -> int:
    return 65536 if raw == 1 else raw


def _published_frames(wal_path: str, shm_path: str, page_size: int, pages: PageDigests
                      ) -> tuple[bytes, dict[int, tuple[int, bytes]], int] | None:
    """(the WAL's bytes to the end of its published frames, page number -> (offset, digest) of its newest
    published frame, the database's size in pages; 0: the main file's).

    The published frames are those up to `mxFrame` of the wal-index header: what a reader starting now uses.
    The frame right after them, if it belongs to this WAL (its salts), is either a rolled-back spill or a commit
    a crashed writer never published, which a reader's recovery would replay: None, as the caller cannot tell
    which. The frames after that one are never replayed: recovery reads from the first frame and stops at the
    first whose salts or running checksum do not match (https://sqlite.org/fileformat2.html#wal_file_format), and
    SQLite writes frames in order. So only the published frames and that one header are read: a WAL restarted
    after a checkpoint keeps its old frames past the new ones, and reading them (the whole file, ~4 MB at
    SQLite's default checkpoint size) was most of a state read's cost.
    """
    try:
        with open(shm_path, "rb") as f:
            shm = f.read(2 * _SHM_HEADER.size)
        if len(shm) < 2 * _SHM_HEADER.size or shm[:_SHM_HEADER.size] != shm[_SHM_HEADER.size:]:
            return None  # a header being written, or no index: SQLite would recover; the caller reads rows
        version, _, _, is_init, _, raw_size, mx_frame, n_page, _, salts, _ = _SHM_HEADER.unpack(
            shm[:_SHM_HEADER.size])
        if version != _WAL_VERSION or not is_init:
            return None
        frame_size = _FRAME_HEADER + page_size
        with open(wal_path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            published = _WAL_HEADER + mx_frame * frame_size
            wal = f.read(published)
            has_next = size >= published + frame_size  # a whole frame after the published ones
            after = f.read(16) if has_next else b""  # its header, up to its salts
    except OSError:
        return None
    if size < _WAL_HEADER + frame_size:  # no whole frame in the file
        return (wal, {}, 0) if mx_frame == 0 else None
    if len(wal) < _WAL_HEADER:
        return None  # the file shrank while read
    magic, _, wal_page_size = struct.unpack(">III", wal[:12])
    if magic not in _WAL_MAGICS or wal_page_size != page_size:
        return None
    if mx_frame and (_page_size(raw_size) != page_size or n_page == 0 or wal[16:24] != salts
                     or len(wal) < published):
        return None
    if has_next and (len(after) < 16 or after[8:16] == wal[16:24]):  # this WAL's, or the file shrank while read
        return None
    key = (str(wal_path), frame_size)
    known = pages.frames.pop(key, None)  # put back below only when this read parses the frames whole
    digests = pages.of_pages(str(wal_path), wal, _WAL_HEADER, frame_size, _FRAME_HEADER, mx_frame)
    newest: dict[int, tuple[int, bytes]] = {}
    first = 0
    if known is not None and known[0] == salts and known[1] <= min(mx_frame, pages.same_prefix):
        # the frames the last read parsed are the same bytes (headers too) under the same salts: the same pages
        newest, first = dict(known[2]), known[1]
    for frame in range(first, mx_frame):  # in order: a page's newest frame is the one a reader uses
        at = _WAL_HEADER + frame * frame_size
        if wal[at + 8:at + 16] != salts:  # a frame of an earlier WAL generation below mxFrame: not expected
            return None
        newest[int.from_bytes(wal[at:at + 4], "big")] = (at + _FRAME_HEADER, digests[frame])
    if len(pages.frames) >= _MAX_WALS:
        pages.frames.clear()
    pages.frames[key] = (salts, mx_frame, newest)
    return wal, newest, n_page


__all__ = ["INTERIOR_TABLE", "LEAF_TABLE", "Leaf", "PageDigests", "View", "btree_page", "changed_pages", "is_table_leaf", "leaf_cells", "read_view", "table_leaves", "view_digest"]
