"""Loopback ports for servers a test starts on a fixed port (multi-node clusters, restarts).

A port taken from the kernel's port-0 choice lies in the ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range), where every outgoing connection also takes its
source port: between probing such a port and the server binding it (or between a kill and the
restart of a node on the same port), a node's own connection to another node can take it, and
the server fails with "Address already in use". The ports handed out here lie below that range,
where no outgoing connection lands, and are never handed out twice by one process.
Standard library only: the fault harness and the benchmark scripts import it too.
"""

from __future__ import annotations

import random
import socket

_HANDED_OUT: set[int] = set()
_RNG = random.Random()
# The band below the ephemeral range the ports come from (above the well-known services).
_LOW = 10_000


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port free right now, outside the ephemeral range when the machine leaves
    room below it (else the kernel's port-0 choice), never one this process handed out."""
    high = _ephemeral_low() - 1
    for _ in range(1000):
        if high - _LOW >= 1000:
            port = _RNG.randint(_LOW, high)
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        if port not in _HANDED_OUT and _bindable(port):
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no free loopback port found")
