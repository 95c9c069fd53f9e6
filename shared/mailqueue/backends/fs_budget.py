"""Warm-up budget counters (mailqueue.outbound.warmup.BudgetCounters) on the filesystem.

One small JSON file per counter under ``<root>/budget/``; every change holds an
exclusive ``flock`` on the directory's lock file and replaces the file atomically
(write, fsync, rename), as the filesystem queue (fs.py) commits its own state: a crash
leaves the old count or the new, never a torn one, and two processes never pass a cap
together. Expired counters stay until `tidy` (the day is in the key: old ones are never
read again).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mailqueue.core.errors import TransientStorageError


class FsBudgetCounters:
    def __init__(self, root: Path | str) -> None:
        self.dir = Path(root) / "budget"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.requests = 0
        self._lock = threading.Lock()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            self.requests += 1
            try:
                fd = os.open(self.dir / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
            except OSError as e:
                raise TransientStorageError(f"budget lock: {e.strerror}") from e
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    def _path(self, key: str) -> Path:
        safe = key.replace("/", "_").replace("|", "~")
        return self.dir / f"{safe}.json"

    def _read(self, key: str) -> dict[str, Any]:
        try:
            return dict(json.loads(self._path(key).read_text()))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise TransientStorageError(f"budget {key}: {e}") from e

    def _write(self, key: str, doc: dict[str, Any]) -> None:
        path = self._path(key)
        tmp = path.with_suffix(".tmp")
        try:
            with open(tmp, "w") as f:
                json.dump(doc, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            raise TransientStorageError(f"budget {key}: {e.strerror}") from e

    def take(self, key: str, limit: int, ttl: float) -> bool:
        with self._locked():
            n = int(self._read(key).get("n", 0))
            if n >= limit:
                return False
            self._write(key, {"n": n + 1})
            return True

    def give_back(self, key: str) -> None:
        with self._locked():
            n = int(self._read(key).get("n", 0))
            if n > 0:
                self._write(key, {"n": n - 1})

    def add(self, key: str, n: int, ttl: float) -> None:
        with self._locked():
            self._write(key, {"n": int(self._read(key).get("n", 0)) + n})

    def get(self, keys: Sequence[str]) -> dict[str, int]:
        with self._locked():
            return {k: int(d["n"]) for k in keys if (d := self._read(k)) and "n" in d}

    def ramp(self, pool: str) -> tuple[str, int] | None:
        with self._locked():
            d = self._read(f"{pool}|ramp")
        return (str(d["day"]), int(d["step"])) if d else None

    def set_ramp(self, pool: str, day: str, step: int, expected: str | None) -> bool:
        with self._locked():
            d = self._read(f"{pool}|ramp")
            if (d.get("day") if d else None) != expected:
                return False
            self._write(f"{pool}|ramp", {"day": day, "step": step})
            return True


__all__ = ["FsBudgetCounters"]
