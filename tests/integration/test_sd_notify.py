"""systemd's notify protocol (deploy/systemd/fencegate.service, Type=notify):
with NOTIFY_SOCKET set, fencegate sends READY=1 once its listeners accept
connections and STOPPING=1 when SIGTERM starts the drain. (Without
NOTIFY_SOCKET, as in every other test, it sends nothing.)"""

import json
import os
import select
import signal
import socket
import subprocess

import pytest

from fg_helpers import IO_TIMEOUT, default_config, parse_addr, stop_process, write_config
from fencegate_proc import TempDir


@pytest.fixture
def notify_socket():
    """A unix datagram socket bound in a short temporary directory (a
    socket's path has at most 107 bytes), as systemd binds one."""
    d = TempDir(prefix="fg-notify-")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = os.path.join(d.path, "notify")
    sock.bind(path)
    sock.settimeout(IO_TIMEOUT)
    yield sock, path
    sock.close()
    d.remove()


def receive(sock):
    """The fields of the next datagram, as a dict."""
    data = sock.recv(4096).decode()
    return dict(line.split("=", 1) for line in data.splitlines() if "=" in line)


def accepts(addr):
    with socket.create_connection(addr, timeout=IO_TIMEOUT):
        return True


def test_ready_after_listeners_bound_and_stopping_on_sigterm(fencegate_bin, backend, tmp_path,
                                                             notify_socket):
    sock, path = notify_socket
    cfg = write_config(tmp_path / "fencegate.yaml", default_config(backend.port, tmp_path / "data"))
    stderr = open(tmp_path / "fencegate.stderr", "wb")
    proc = subprocess.Popen([fencegate_bin, "--config", str(cfg)], stdout=subprocess.PIPE,
                            stderr=stderr, stdin=subprocess.DEVNULL,
                            env={**os.environ, "NOTIFY_SOCKET": path})
    try:
        first = receive(sock)
        assert first.get("READY") == "1", first
        # READY=1 follows the listening line, which follows the binds: the
        # line is already in the pipe (no wait), and both ports accept.
        ready, _, _ = select.select([proc.stdout], [], [], 0)
        assert ready, "READY=1 came before the listening line"
        ev = json.loads(proc.stdout.readline())
        assert ev["event"] == "listening", ev
        assert accepts(parse_addr(ev["proxy"])) and accepts(parse_addr(ev["admin"]))

        proc.send_signal(signal.SIGTERM)
        stopping = receive(sock)
        assert stopping.get("STOPPING") == "1", stopping
        assert proc.wait(timeout=IO_TIMEOUT) == 0
    finally:
        if proc.poll() is None:
            stop_process(proc, signal.SIGKILL, IO_TIMEOUT)
        proc.stdout.close()
        stderr.close()

