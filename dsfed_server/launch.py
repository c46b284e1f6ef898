"""Start site servers as separate processes on free loopback ports, and stop them cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable

from dsfed_server.provision import ProvisionedSite


_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# sets the address-space limit in the child, then executes the site: a ``preexec_fn`` would run Python
# between fork and exec, where a lock another thread of the parent held at the fork deadlocks it
_LIMITED = ("import os, resource, sys; limit = int(sys.argv[1]); "
            "resource.setrlimit(resource.RLIMIT_AS, (limit, limit)); os.execv(sys.argv[2], sys.argv[2:])")


class SiteProcess:
    """One site server process; ``address_space``: a limit on its virtual memory in bytes
    (``RLIMIT_AS``: allocations beyond it fail), None for none."""

    def __init__(self, site: ProvisionedSite, run_dir: Path, address_space: int | None = None) -> None:
        self.site = site
        self.address_space = address_space
        self.ready_file = run_dir / f"{site.name}.ready.json"
        self.log_file = run_dir / f"{site.name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self._spawned_wall = 0.0
        self.ready_after: float | None = None  # seconds from spawn until the site answered (its ready file)

    def start(self) -> None:
        self.ready_file.unlink(missing_ok=True)
        log = open(self.log_file, "wb")
        # One BLAS thread per site process: several sites on one machine would otherwise
        # oversubscribe the cores (each numpy matrix product spawning a thread per core).
        env = {**os.environ, **{k: os.environ.get(k, "1") for k in _BLAS_THREADS}}
        command = [sys.executable, "-m", "dsfed_server.cli", "run", str(self.site.config),
                   "--ready-file", str(self.ready_file)]
        if self.address_space is not None:
            command = [sys.executable, "-c", _LIMITED, str(self.address_space), *command]
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True, env=env)
        self._spawned_wall = time.time()
        log.close()

    def wait_ready(self, deadline: float) -> None:
        assert self.process is not None
        while time.monotonic() < deadline:
            if self.ready_file.exists():
                self.url = json.loads(self.ready_file.read_text())["url"]
                self.ready_after = self.ready_file.stat().st_mtime - self._spawned_wall
                return
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"site {self.site.name} exited with code {self.process.returncode} while starting:\n"
                    + self.log_tail()
                )
            time.sleep(0.05)
        raise RuntimeError(f"site {self.site.name} did not start in time:\n{self.log_tail()}")

    def peak_rss(self) -> int:
        """The process's peak resident set size so far, in bytes (Linux: VmHWM), 0 once it has exited."""
        return self._status_bytes("VmHWM")

    def peak_address_space(self) -> int:
        """The process's peak virtual memory so far, in bytes (Linux: VmPeak), 0 once it has exited."""
        return self._status_bytes("VmPeak")

    def _status_bytes(self, field: str) -> int:
        """A ``/proc/<pid>/status`` field given in kB, in bytes (0 if absent or the process has exited)."""
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text() if self.process else ""
        except OSError:
            return 0
        line = next((l for l in status.splitlines() if l.startswith(f"{field}:")), None)
        return int(line.split()[1]) * 1024 if line else 0

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        """Kill the process at once (SIGKILL), as a crash would."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout)


class LocalSites:
    """A context manager running one server process per site; stops them all on exit."""

    def __init__(self, sites: Iterable[ProvisionedSite], run_dir: Path, *, start_timeout: float = 60.0,
                 address_space: dict[str, int] | None = None) -> None:
        self.run_dir = run_dir
        limits = address_space or {}
        self.processes = {s.name: SiteProcess(s, run_dir, limits.get(s.name)) for s in sites}
        self.start_timeout = start_timeout

    def __enter__(self) -> "LocalSites":
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            for p in self.processes.values():
                p.start()
            deadline = time.monotonic() + self.start_timeout
            for p in self.processes.values():
                p.wait_ready(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for p in self.processes.values():
            p.stop()

    @property
    def urls(self) -> dict[str, str]:
        return {name: p.url for name, p in self.processes.items()}

