"""The SQLite schema: append-only named migrations, applied in order and each recorded by name.

A migration is never edited once shipped; a change of schema is a new `mNNN_...` function appended to
`MIGRATIONS`, so every store on disk can be brought forward by replaying the ones it lacks.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

DB_FILE = "hymem.sqlite3"

KINDS = ("fact", "experience")
OWNERS = ("user", "agent")
LIVE = "superseded_by IS NULL AND deleted_at IS NULL"  # SQL condition of a live memory row
MEMORY_COLUMNS = "id, user_id, text, subject, owner, kind, request_id, created_at, updated_at"


def m001_initial(conn: sqlite3.Connection) -> None:
    """All tables of the first version."""
    for sql in (
        """CREATE TABLE memories (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            user_id TEXT NOT NULL,
            text TEXT NOT NULL,
            subject TEXT NOT NULL,
            owner TEXT NOT NULL CHECK (owner IN ('user', 'agent')),
            kind TEXT NOT NULL CHECK (kind IN ('fact', 'experience')),
            vector BLOB NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            request_id TEXT,
            superseded_by INTEGER NULL REFERENCES memories(id),
            deleted_at REAL NULL)""",
        "CREATE INDEX memories_user ON memories(user_id)",
        """CREATE TABLE l1_raw (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            user_id TEXT NOT NULL,
            request_id TEXT,
            content TEXT NOT NULL,
            created_at REAL NOT NULL)""",
        "CREATE INDEX l1_raw_user ON l1_raw(user_id)",
        "CREATE TABLE episodes (user_id TEXT PRIMARY KEY, counter INTEGER NOT NULL)",
        "CREATE TABLE profiles (user_id TEXT PRIMARY KEY, basic_info TEXT NOT NULL, updated_at REAL NOT NULL)",
        """CREATE TABLE traces (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            user_id TEXT NOT NULL,
            request_id TEXT,
            path TEXT NOT NULL,
            payload TEXT NOT NULL,
            created_at REAL NOT NULL)""",
        "CREATE INDEX traces_user ON traces(user_id)",
        """CREATE TABLE chain_rounds (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            user_id TEXT NOT NULL,
            request_id TEXT,
            round INTEGER NOT NULL,
            stage TEXT NOT NULL,
            payload TEXT NOT NULL,
            created_at REAL NOT NULL)""",
        "CREATE INDEX chain_rounds_user ON chain_rounds(user_id)",
        """CREATE TABLE requests (
            request_id TEXT PRIMARY KEY,
            user_id TEXT NOT NULL,
            result TEXT NOT NULL,
            created_at REAL NOT NULL)""",
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ):
        conn.execute(sql)


def m002_requests_per_user(conn: sqlite3.Connection) -> None:
    """Idempotency per (user_id, request_id), with a fingerprint of the write's payload.

    A request_id is the caller's, so two users may pick the same one; the fingerprint tells a true repeat
    from another payload sent under a used id. Rows recorded before this have no fingerprint (NULL).
    """
    conn.execute("ALTER TABLE requests RENAME TO requests_m001")
    conn.execute("""CREATE TABLE requests (
        request_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        result TEXT NOT NULL,
        created_at REAL NOT NULL,
        fingerprint TEXT,
        PRIMARY KEY (user_id, request_id))""")
    conn.execute("INSERT INTO requests (request_id, user_id, result, created_at)"
                 " SELECT request_id, user_id, result, created_at FROM requests_m001")
    conn.execute("DROP TABLE requests_m001")


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [m001_initial, m002_requests_per_user]


def migrate(conn: sqlite3.Connection) -> None:
    """Apply, each in its own transaction, every migration not yet recorded in the `migrations` table.

    An up-to-date store costs one read: the table is created only when it is missing."""
    try:
        done = {row[0] for row in conn.execute("SELECT name FROM migrations")}
    except sqlite3.OperationalError:  # no such table: a new store (or one older than the table)
        conn.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
        done = {row[0] for row in conn.execute("SELECT name FROM migrations")}
    for migration in MIGRATIONS:
        if migration.__name__ in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            migration(conn)
            conn.execute("INSERT INTO migrations (name, applied_at) VALUES (?, ?)", (migration.__name__, time.time()))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
