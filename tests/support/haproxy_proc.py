"""HAProxy on fencegate's front-end recipe (deploy/haproxy/fencegate.cfg),
as shipped, for the harnesses that put replicas behind it: the HAProxy
integration tests and the chaos run's cluster configuration."""

import os
import shutil
import socket
import subprocess
import time

from fencegate_proc import START_TIMEOUT, ProcessError, free_port

HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.access("/usr/sbin/haproxy", os.X_OK)
                                      else None)
RECIPE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "haproxy",
                      "fencegate.cfg")
IO_TIMEOUT = float(os.environ.get("FENCEGATE_TEST_IO_TIMEOUT", "20"))


class HAProxy:
    """haproxy -db on the recipe, with the replicas' addresses in its
    environment, plus a test-only global section that opens a stats socket
    (to see which servers are up). With three replicas, the recipe's
    commented third-replica lines are uncommented (in a copy in work_dir),
    as its comment tells an operator to do. Started through `procs`, so it is stopped
    by its PID. HAProxy cannot listen on port 0: a free port is picked, and
    another one if a process takes it first."""

    def __init__(self, procs, work_dir, socket_dir, replicas, attempts=5):
        self.procs = procs
        # A unix socket's path is at most 97 bytes to HAProxy: in a short
        # directory of its own, not in the test's (often long) one.
        self.socket_path = os.path.join(socket_dir, "haproxy.sock")
        extra = os.path.join(work_dir, "haproxy-stats.cfg")
        with open(extra, "w") as f:
            f.write(f"global\n    stats socket {self.socket_path} mode 600 level admin\n")
        recipe = RECIPE
        if len(replicas) > 2:
            with open(RECIPE) as f:
                text = f.read()
            third = '    # server fencegate3 "${FENCEGATE_3}"'
            if len(replicas) > 3 or third not in text:
                raise ProcessError(f"the recipe names up to 3 replicas, not {len(replicas)}")
            recipe = os.path.join(work_dir, "haproxy-fencegate.cfg")
            with open(recipe, "w") as f:
                f.write(text.replace(third, '    server fencegate3 "${FENCEGATE_3}"'))
            # The files the recipe names beside it (its errorfile).
            shutil.copy(os.path.join(os.path.dirname(RECIPE), "503.http"), work_dir)
        env = dict(os.environ)
        for i, gate in enumerate(replicas, 1):
            env[f"FENCEGATE_{i}"] = "%s:%d" % gate.proxy
            env[f"FENCEGATE_{i}_ADMIN_PORT"] = str(gate.admin[1])
        for attempt in range(1, attempts + 1):
            port = free_port()
            env["FENCEGATE_FRONT"] = f"127.0.0.1:{port}"
            self.log_path = os.path.join(work_dir, f"haproxy-{attempt}.stderr")
            with open(self.log_path, "wb") as log:
                self.proc = procs.start([HAPROXY, "-db", "-f", recipe, "-f", extra], env=env,
                                        stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            if self._wait_accepting(port):
                self.addr = ("127.0.0.1", port)
                return
            procs.stop(self.proc)
            if "Address already in use" not in self.log():
                raise ProcessError(f"haproxy did not start:\n{self.log()}")
        raise ProcessError(f"haproxy: every one of {attempts} free ports was taken")

    def _wait_accepting(self, port):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:  # a condition polled with a deadline
            if self.proc.poll() is not None:
                return False
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                time.sleep(0.02)  # polling interval of a condition with a deadline
        raise ProcessError(f"haproxy did not listen on {port} within {START_TIMEOUT}s:\n"
                           f"{self.log()}")

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def server_states(self, backend="fencegate_replicas"):
        """{server name: status} of one of the recipe's backends (the
        writes', or fencegate_reads), from `show stat` on the stats socket
        ("UP", "DOWN", "UP 1/2", ...)."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(IO_TIMEOUT)
            s.connect(self.socket_path)
            s.sendall(b"show stat\n")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        lines = out.decode().splitlines()
        header = lines[0].lstrip("# ").split(",")
        states = {}
        for line in lines[1:]:
            row = dict(zip(header, line.split(",")))
            if row.get("pxname") == backend and row.get("svname") not in (
                    "BACKEND", None):
                states[row["svname"]] = row["status"]
        return states

    def wait_states(self, want, timeout=IO_TIMEOUT, backend="fencegate_replicas"):
        deadline = time.monotonic() + timeout
        while True:  # a condition (the check's verdict) polled with a deadline
            try:
                states = self.server_states(backend)
            except OSError as e:  # the stats socket may come up after the proxy port
                states = repr(e)
            if states == want:
                return
            assert time.monotonic() < deadline, f"servers {states}, want {want}"
            time.sleep(0.05)  # polling interval of a condition with a deadline
