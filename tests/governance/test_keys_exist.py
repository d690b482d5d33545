"""Whether any API key exists is asked per request; only the first answer waits for the database, later
ones are refreshed in a thread while the request path gets the last answer."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

from evolvable.governance.audit import AuditLog
from evolvable.governance.tenants import TenantDirectory


class _Rows:
    def __init__(self) -> None:
        self.exists = False
        self.callers: list[str] = []
        self.release = threading.Event()
        self.release.set()

    def any_key(self) -> bool:
        self.callers.append(threading.current_thread().name)
        assert self.release.wait(10)
        return self.exists


def _directory(rows: _Rows) -> TenantDirectory:
    directory = TenantDirectory(cast(Any, rows), audit=cast(AuditLog, object()))
    directory.keys_exist_ttl_s = 0.05
    return directory


def _eventually(check: Any) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_only_the_first_answer_waits_for_the_database() -> None:
    rows = _Rows()
    directory = _directory(rows)
    assert directory.keys_exist() is False
    assert rows.callers == [threading.current_thread().name]
    rows.exists = True
    rows.release.clear()  # the database is slow now
    time.sleep(0.06)
    started = time.monotonic()
    assert directory.keys_exist() is False  # the last answer, at once
    assert directory.keys_exist() is False  # one refresh at a time
    assert time.monotonic() - started < 1
    rows.release.set()
    _eventually(directory.keys_exist)  # the refresh landed: keys are required from now on
    assert rows.callers[1:] == ["evolvable-keys-exist"]
    rows.exists = False
    time.sleep(0.06)
    assert directory.keys_exist() is True  # once true it stays true, without asking again
    assert len(rows.callers) == 2


def test_a_failed_refresh_keeps_the_last_answer() -> None:
    rows = _Rows()
    directory = _directory(rows)
    assert directory.keys_exist() is False

    def broken() -> bool:
        raise OSError("database gone")

    rows.any_key = broken  # type: ignore[method-assign]
    time.sleep(0.06)
    assert directory.keys_exist() is False
    _eventually(lambda: not directory._keys_exist_refreshing)
    assert directory.keys_exist() is False
