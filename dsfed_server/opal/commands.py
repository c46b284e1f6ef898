"""Asynchronous DataSHIELD commands (Opal's ``?async=true``): queued per session, run in order.

A command is a function the Opal front door hands over (a call of
:class:`~dsfed_server.service.SiteService`, which does the dispatch, the
checks and the audit); this store only keeps its state for polling. Commands
of one session run one at a time in submission order, as in the R session
Opal keeps per DataSHIELD session; different sessions run in parallel on a
small shared pool of threads. No I/O, no FastAPI.
"""

from __future__ import annotations

import secrets
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from dsfed_core.errors import NotFound, SiteError
from dsfed_server.timestamps import utc_now

Status = Literal["PENDING", "IN_PROGRESS", "COMPLETED", "FAILED"]



@dataclass
class Command:
    """One asynchronous command and its outcome."""

    id: str
    session: str
    owner: str
    script: str
    with_result: bool
    status: Status = "PENDING"
    created: str = field(default_factory=utc_now)
    started: str | None = None
    ended: str | None = None
    result: Any = None
    error: SiteError | None = None
    done: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def finished(self) -> bool:
        return self.status in ("COMPLETED", "FAILED")

    def dto(self) -> dict[str, Any]:
        """Opal's ``RCommandDto``."""
        out: dict[str, Any] = {
            "id": self.id,
            "script": self.script,
            "status": self.status,
            "createDate": self.created,
            "withResult": self.with_result and self.status == "COMPLETED",
            "withError": self.status == "FAILED",
        }
        if self.started:
            out["startDate"] = self.started
        if self.ended:
            out["endDate"] = self.ended
        if self.error is not None:
            out["error"] = str(self.error)
        return out


class CommandStore:
    """Commands by id, each visible only to the user who submitted it, in its session.

    Finished commands are kept until their result is fetched (or removed), at most
    ``keep_per_session`` per session and four times that per user, the oldest
    dropped first.
    """

    def __init__(self, *, workers: int = 4, keep_per_session: int = 64) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dsfed-opal-command")
        self._keep = keep_per_session
        self._lock = threading.Lock()
        self._commands: dict[str, Command] = {}
        self._queues: dict[str, deque[tuple[Command, Callable[[], Any]]]] = {}

    def submit(self, owner: str, session: str, script: str, run: Callable[[], Any], *,
               with_result: bool) -> Command:
        """Queue ``run`` in ``session``; it starts when the session's earlier commands are done."""
        command = Command(secrets.token_hex(12), session, owner, script[:2000], with_result)
        with self._lock:
            self._prune(lambda c: c.session == session, self._keep)
            self._prune(lambda c: c.owner == owner, 4 * self._keep)
            self._commands[command.id] = command
            queue = self._queues.get(session)
            if queue is None:  # no drain running for this session: start one
                queue = self._queues[session] = deque()
                self._pool.submit(self._drain, session)
            queue.append((command, run))
        return command

    def _drain(self, session: str) -> None:
        while True:
            with self._lock:
                queue = self._queues.get(session)
                if not queue:
                    self._queues.pop(session, None)
                    return
                command, run = queue.popleft()
                command.status, command.started = "IN_PROGRESS", utc_now()
            try:
                command.result = run()
                command.status = "COMPLETED"
            except SiteError as exc:
                command.error, command.status = exc, "FAILED"
            except Exception as exc:  # the service turns its own failures into SiteError already
                command.error, command.status = SiteError(f"command failed: {type(exc).__name__}"), "FAILED"
            command.ended = utc_now()
            command.done.set()

    def _prune(self, selects: Callable[[Command], bool], keep: int) -> None:
        """Make room for one more: keep at most ``keep - 1`` of the selected finished commands (oldest go)."""
        finished = [c for c in self._commands.values() if selects(c) and c.finished]
        for command in finished[: max(0, len(finished) - keep + 1)]:
            del self._commands[command.id]

    def get(self, owner: str, session: str, rid: str) -> Command:
        with self._lock:
            command = self._commands.get(rid)
        if command is None or command.owner != owner or command.session != session:
            raise NotFound(f"no command {rid!r} in this session", hint="list the session's commands")
        return command

    def list(self, owner: str, session: str) -> list[Command]:
        with self._lock:
            return [c for c in self._commands.values() if c.owner == owner and c.session == session]

    def remove(self, owner: str, session: str, rid: str) -> None:
        command = self.get(owner, session, rid)
        with self._lock:
            self._commands.pop(command.id, None)

    def drop_session(self, session: str) -> None:
        """Forget a closed session's commands; queued ones are not run."""
        with self._lock:
            self._queues.pop(session, None)
            for rid in [rid for rid, c in self._commands.items() if c.session == session]:
                del self._commands[rid]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
