"""A network namespace joined to the host by a veth pair, and a TCP forwarder across it.

The partition test runs one worker in its own network namespace, so that cutting the
veth link cuts that worker, and only it, off the database: its open TCP connections
then hang (the packets are dropped; no RST, no error) exactly as they would when a
switch or a cable between a worker host and the database fails.

PostgreSQL listens on 127.0.0.1 only and is not reconfigured: a :class:`TcpForwarder`
in the test process listens on the veth's host address and relays each connection to
127.0.0.1:5432. PostgreSQL sees ordinary local connections.

Everything created here is named ``djpart-<pid>-...`` after the pytest process, and
removed on exit, even on failure; a namespace left behind by a pytest process that
was itself SIGKILLed is removed by the next run (its pid is gone).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

#: Prefix of every namespace this module creates; the pytest process's pid follows.
PREFIX = "djpart-"
#: Private range for the veth pairs: 10.213.<n>.0/30, a /30 per test.
SUBNET_BASE = ipaddress.IPv4Network("10.213.0.0/16")


class NamespacesUnavailable(Exception):
    """Network namespaces cannot be created here; the message says why."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def unavailable_reason() -> str | None:
    """Why namespaces cannot be used here (not root, no ``ip``), or None."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "creating network namespaces and veth pairs needs root"
    if shutil.which("ip") is None:
        return "the `ip` command (Debian package iproute2) is not installed"
    return None


def remove_stale_namespaces() -> list[str]:
    """Delete the namespaces of earlier pytest processes that died without cleaning up."""
    removed = []
    listing = _ip("netns", "list", check=False).stdout
    for line in listing.splitlines():
        name = line.split()[0] if line.strip() else ""
        match = re.fullmatch(rf"{re.escape(PREFIX)}(\d+)-\w+", name)
        if match is None:
            continue
        pid = int(match.group(1))
        if pid == os.getpid() or _alive(pid):
            continue
        for ns_pid in _ip("netns", "pids", name, check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(ns_pid), 9)
        _ip("netns", "delete", name, check=False)
        removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _subnets_in_use() -> set[ipaddress.IPv4Network]:
    """Every IPv4 network the host has an address or a route in (any table)."""
    used: set[ipaddress.IPv4Network] = set()
    text = (
        _ip("-4", "-o", "addr", "show").stdout
        + "\n"
        + _ip("-4", "route", "show", "table", "all").stdout
    )
    for token in re.findall(r"\b(\d+\.\d+\.\d+\.\d+(?:/\d+)?)\b", text):
        with contextlib.suppress(ValueError):
            used.add(ipaddress.IPv4Network(token, strict=False))
    return used


def free_subnet() -> ipaddress.IPv4Network:
    """A /30 in 10.213.0.0/16 that overlaps nothing the host has an address or route in."""
    used = _subnets_in_use()
    candidates = list(SUBNET_BASE.subnets(new_prefix=24))
    random.Random(os.getpid()).shuffle(candidates)
    for block in candidates:
        subnet = next(block.subnets(new_prefix=30))
        if not any(subnet.overlaps(other) for other in used):
            return subnet
    raise RuntimeError("no free /30 in 10.213.0.0/16")


@dataclass
class VethNamespace:
    """A namespace ``name`` whose interface ``ns_if`` (``ns_ip``) is paired with the host's
    ``host_if`` (``host_ip``)."""

    name: str
    host_if: str
    ns_if: str
    host_ip: str
    ns_ip: str

    def command(self, *argv: str) -> list[str]:
        """``argv`` run inside the namespace (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self) -> None:
        """Take the host end of the link down: the namespace's packets are dropped silently
        (its end loses carrier), so its TCP connections hang rather than fail."""
        _ip("link", "set", "dev", self.host_if, "down")

    def restore(self) -> None:
        """Bring the host end up again; the kernel re-adds the /30 route with it."""
        _ip("link", "set", "dev", self.host_if, "up")
        deadline = time.monotonic() + 10
        while self.host_ip not in _ip("-4", "route", "get", self.ns_ip, check=False).stdout:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the route to {self.ns_ip} did not come back")
            time.sleep(0.05)

    def pids(self) -> list[int]:
        return [int(p) for p in _ip("netns", "pids", self.name, check=False).stdout.split()]

    def remove(self) -> None:
        """Kill what still runs inside (only processes the test started there can be),
        then delete the namespace and the veth pair. Safe to call twice."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        _ip("netns", "delete", self.name, check=False)
        # Deleting the namespace destroys its end of the pair, and so the pair; make sure.
        if _ip("link", "show", self.host_if, check=False).returncode == 0:
            _ip("link", "delete", self.host_if, check=False)


def create_veth_namespace() -> VethNamespace:
    """Create a namespace and its veth link to the host (remove both with ``remove()``).

    Raises :class:`NamespacesUnavailable` if that is not possible here (not root, no
    ``ip``, or the kernel refuses).
    """
    reason = unavailable_reason()
    if reason:
        raise NamespacesUnavailable(reason)
    remove_stale_namespaces()
    tag = f"{random.getrandbits(24):06x}"
    # Interface names are limited to 15 characters.
    subnet = free_subnet()
    host_ip, ns_ip = (str(a) for a in list(subnet.hosts())[:2])
    link = VethNamespace(f"{PREFIX}{os.getpid()}-{tag}", f"djp{tag}h", f"djp{tag}n", host_ip, ns_ip)
    made = _ip("netns", "add", link.name, check=False)
    if made.returncode != 0:
        raise NamespacesUnavailable(f"`ip netns add` failed: {made.stderr.strip()}")
    try:
        made = _ip(
            "link", "add", link.host_if, "type", "veth", "peer", "name", link.ns_if, check=False
        )
        if made.returncode != 0:
            raise NamespacesUnavailable(f"cannot create a veth pair: {made.stderr.strip()}")
        inside = ("netns", "exec", link.name, "ip")
        _ip("link", "set", link.ns_if, "netns", link.name)
        _ip("addr", "add", f"{host_ip}/{subnet.prefixlen}", "dev", link.host_if)
        _ip("link", "set", link.host_if, "up")
        _ip(*inside, "addr", "add", f"{ns_ip}/{subnet.prefixlen}", "dev", link.ns_if)
        _ip(*inside, "link", "set", link.ns_if, "up")
        _ip(*inside, "link", "set", "lo", "up")
    except BaseException:
        link.remove()
        raise
    return link


@contextlib.contextmanager
def veth_namespace() -> Iterator[VethNamespace]:
    """:func:`create_veth_namespace`, removed on exit."""
    link = create_veth_namespace()
    try:
        yield link
    finally:
        link.remove()


class TcpForwarder:
    """Relays every connection accepted on ``listen_host`` (any free port: ``address``) to
    ``upstream``: two blocking pump threads per connection, so a stalled direction never
    holds up another one."""

    def __init__(self, listen_host: str, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._server = socket.create_server((listen_host, 0))
        self._server.settimeout(0.2)
        self.address: tuple[str, int] = self._server.getsockname()[:2]
        self._stopping = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.accepted = 0
        self.bytes = {"up": 0, "down": 0}
        self._thread = threading.Thread(target=self._accept, name="tcp-forwarder", daemon=True)

    def __enter__(self) -> TcpForwarder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)
        self._server.close()
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            # shutdown() wakes a pump blocked in recv(); close() alone does not.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            client.settimeout(None)
            server.settimeout(None)
            with self._lock:
                if self._stopping.is_set():
                    client.close()
                    server.close()
                    return
                self._sockets |= {client, server}
                self.accepted += 1
            for src, dst, direction in ((client, server, "up"), (server, client, "down")):
                threading.Thread(
                    target=self._pump, args=(src, dst, direction), name="tcp-pump", daemon=True
                ).start()

    def _pump(self, src: socket.socket, dst: socket.socket, direction: str) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
                with self._lock:
                    self.bytes[direction] += len(data)
        except OSError:
            pass
        # Pass the end of stream on (a closed database session, a closed client).
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
