""":class:`HAProxy`: a real layer-4 load balancer (HAProxy, in TCP mode) on 127.0.0.1, in front
of servers on 127.0.0.1 (such as :class:`~.server.SimMongoServer` s of one service each, as
real deployments put a load balancer in front of mongos processes).

It runs ``haproxy -f CONFIG -db`` (foreground, no master process) as a child process, with a
configuration written to a temporary folder: a frontend on a free port of 127.0.0.1, one
backend of ``server`` lines, ``balance roundrobin`` by default, and long client and server
timeouts (a pool's idle connection is not cut during a test). ``send_proxy=True`` prefixes
each backend connection with a PROXY protocol v2 header, as mongos's ``loadBalancerPort``
requires (set ``SimMongoSettings(proxy_protocol=True)`` on the servers then).

The program is found (:func:`find_haproxy`), never installed here: tests install Debian's
package themselves (``apt-get install haproxy``) or skip.

Rules of this module
--------------------
* 127.0.0.1 only, for the frontend and for every backend: anything else is a ValueError.
* :meth:`HAProxy.start` returns once the frontend port is listening (or raises
  :class:`HAProxyError` with HAProxy's output); :meth:`HAProxy.stop` ends the process
  (SIGTERM, then SIGKILL) and removes the folder; both are safe to call twice.
* Waiting for the port reads /proc/net/tcp where there is one, so that no probe connection
  goes through to a backend (it would take a turn of the round robin).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["HAProxy", "HAProxyError", "find_haproxy"]

LOCALHOST = "127.0.0.1"


class HAProxyError(RuntimeError):
    """HAProxy did not start (the message has its output)."""


def find_haproxy() -> str | None:
    """The ``haproxy`` program: in PATH, or /usr/sbin/haproxy (Debian's), or None."""
    found = shutil.which("haproxy")
    if found is None and os.access("/usr/sbin/haproxy", os.X_OK):
        found = "/usr/sbin/haproxy"
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOCALHOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _listening(port: int) -> bool:
    """Whether something listens on 127.0.0.1:``port`` (or on any address)."""
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        try:
            socket.create_connection((LOCALHOST, port), timeout=1).close()
        except OSError:
            return False
        return True
    wanted = {f"0100007F:{port:04X}", f"00000000:{port:04X}"}
    return any(
        fields[1] in wanted and fields[3] == "0A"  # (state 0A: LISTEN)
        for fields in (line.split() for line in lines)
        if len(fields) > 3
    )


class HAProxy:
    """HAProxy balancing ``backends`` (``"127.0.0.1:PORT"`` each) by ``balance`` (an HAProxy
    algorithm: ``roundrobin``, ``leastconn``, ``first``, ...). ``with HAProxy([...]) as lb:``
    starts it; connect to ``lb.port``."""

    def __init__(
        self,
        backends: Sequence[str],
        *,
        program: str | None = None,
        balance: str = "roundrobin",
        send_proxy: bool = False,
        idle_timeout: float = 3600.0,
        start_timeout: float = 10.0,
    ) -> None:
        if not backends:
            raise ValueError("HAProxy needs at least one backend")
        for backend in backends:
            host, _, port = backend.rpartition(":")
            if host != LOCALHOST or not port.isdigit():
                raise ValueError(f"HAProxy backends are {LOCALHOST}:PORT, not {backend!r}")
        self.backends = list(backends)
        self.program = program or find_haproxy()
        self.balance = balance
        self.send_proxy = send_proxy
        self.idle_timeout = idle_timeout
        self.start_timeout = start_timeout
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._directory: Path | None = None

    @property
    def address(self) -> str:
        return f"{LOCALHOST}:{self.port}"

    @property
    def uri(self) -> str:
        """A connection string for a MongoDB driver in load-balanced mode."""
        return f"mongodb://{self.address}/?loadBalanced=true"

    def config(self) -> str:
        """The configuration HAProxy runs with (on ``self.port``)."""
        idle = f"{int(self.idle_timeout * 1000)}ms"
        proxy = " send-proxy-v2" if self.send_proxy else ""
        servers = "".join(
            f"    server service{i} {backend}{proxy}\n" for i, backend in enumerate(self.backends)
        )
        return (
            "global\n"
            "    maxconn 4096\n"
            "defaults\n"
            "    mode tcp\n"
            "    timeout connect 5s\n"
            f"    timeout client {idle}\n"
            f"    timeout server {idle}\n"
            "frontend poolkit_frontend\n"
            f"    bind {LOCALHOST}:{self.port}\n"
            "    default_backend poolkit_services\n"
            "backend poolkit_services\n"
            f"    balance {self.balance}\n"
            f"{servers}"
        )

    def output(self) -> str:
        """What HAProxy printed so far (warnings, alerts)."""
        if self._directory is None:
            return ""
        path = self._directory / "haproxy.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self) -> None:
        if self.process is not None:
            return
        if self.program is None:
            raise HAProxyError("haproxy is not installed (Debian: apt-get install haproxy)")
        self._directory = Path(tempfile.mkdtemp(prefix="poolkit-haproxy-"))
        output = ""
        for _attempt in range(3):  # (another process may take the free port first)
            self.port = _free_port()
            cfg = self._directory / "haproxy.cfg"
            cfg.write_text(self.config())
            with open(self._directory / "haproxy.log", "wb") as log:
                process = subprocess.Popen(
                    [self.program, "-f", str(cfg), "-db"],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            deadline = time.monotonic() + self.start_timeout
            while process.poll() is None and time.monotonic() < deadline:
                if _listening(self.port):
                    self.process = process
                    return
                time.sleep(0.02)
            _terminate(process)
            output = self.output()
        self.stop()
        raise HAProxyError(f"haproxy did not start; its output:\n{output}")

    def stop(self, timeout: float = 10.0) -> None:
        process, self.process = self.process, None
        if process is not None:
            _terminate(process, timeout)
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None

    def __enter__(self) -> HAProxy:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _terminate(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM (HAProxy's hard stop: its connections close), then SIGKILL."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
            return
        except subprocess.TimeoutExpired:
            process.kill()
    process.wait(timeout)
