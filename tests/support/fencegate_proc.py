"""Starts and stops fencegate, and the processes around it, for every Python
harness of the tree: the integration tests (tests/integration), the chaos
run (chaos/run), the GC-pause demo (locks/demo) and the load bench
(bench/load). Each adds this folder to sys.path and imports it.

- Fencegate: one fencegate process. start() runs the binary on a config
  file and waits for its first stdout line, the `listening` event, which
  names the ports it took (the configs ask for port 0); stderr goes to a
  file in the log directory; stop() signals it by its PID and waits.
- Processes: every process a harness starts, stopped by PID at the end.
- write_config: a config dict as YAML.
- free_port(s) and TempDir, for what cannot listen on port 0 itself and
  for the directories a run works in.

Waits are on a pipe becoming readable or a process exiting, each with a
deadline, never on a timer. Errors raise ProcessError (an AssertionError,
so that a pytest failure shows its message).
"""

import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

START_TIMEOUT = float(os.environ.get("FENCEGATE_TEST_START_TIMEOUT", "30"))
STOP_TIMEOUT = 20.0


class ProcessError(AssertionError):
    """A process we started did not start, or outlived its stop deadline."""


# --------------------------------------------------------------------------
# Ports and directories
# --------------------------------------------------------------------------

def free_ports(n):
    """n distinct ports the kernel just handed out on loopback, for servers
    that cannot listen on port 0 themselves (all held open until every one
    is chosen). Another process may take one before the server binds it:
    such a server must be started again on new ports when that happens."""
    held = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            held.append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def free_port():
    """One port, as free_ports."""
    return free_ports(1)[0]


class TempDir:
    """A fresh directory from mkdtemp: under `parent` (made if missing) or
    the system's temporary directory, with `mode` if given (mkdtemp makes
    it 0700). remove() deletes it with everything in it; as a context
    manager it is removed at the end unless `keep` was set."""

    def __init__(self, prefix="fencegate-", parent=None, mode=None):
        if parent:
            os.makedirs(parent, exist_ok=True)
        self.path = tempfile.mkdtemp(prefix=prefix, dir=parent)
        if mode is not None:
            os.chmod(self.path, mode)
        self.keep = False

    def remove(self):
        shutil.rmtree(self.path, ignore_errors=True)

    def __fspath__(self):
        return self.path

    def __str__(self):
        return self.path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self.keep:
            self.remove()


# --------------------------------------------------------------------------
# Configs (YAML in block style; strings JSON-quoted, which YAML accepts)
# --------------------------------------------------------------------------

def _scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    return json.dumps(str(v))


def to_yaml(obj, indent=0):
    """The lines of a dict as YAML: nested dicts as blocks, lists of dicts
    as block sequences, other lists inline."""
    pad = "  " * indent
    lines = []
    for k, v in obj.items():
        if isinstance(v, dict):
            lines.append(f"{pad}{k}:")
            lines.extend(to_yaml(v, indent + 1))
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            lines.append(f"{pad}{k}:")
            for item in v:
                sub = to_yaml(item, indent + 2)
                sub[0] = f"{pad}  - " + sub[0].lstrip()
                lines.extend(sub)
        else:
            lines.append(f"{pad}{k}: {_scalar(v)}")
    return lines


def write_config(path, cfg):
    """Writes the config dict `cfg` to `path` as YAML; returns the path."""
    with open(path, "w") as f:
        f.write("\n".join(to_yaml(cfg)) + "\n")
    return str(path)


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------

def read_first_line(proc, timeout, what):
    """Reads the first stdout line of `proc` (a binary pipe) with a
    deadline, waking on the pipe becoming readable. Returns (line, the bytes
    read after it)."""
    deadline = time.monotonic() + timeout
    buf = b""
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProcessError(f"{what}: no stdout line within {timeout}s (got {buf!r})")
            if not sel.select(left):
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
                raise ProcessError(f"{what} exited with {proc.returncode} before printing "
                                   f"its first line (got {buf!r})")
            buf += chunk
    line, _, rest = buf.partition(b"\n")
    return line.decode(), rest


def drain(stream, sink):
    """Reads a pipe to its end into the list `sink`, so that the child never
    blocks on a full pipe (a thread's target)."""
    try:
        for chunk in iter(lambda: os.read(stream.fileno(), 65536), b""):
            sink.append(chunk)
    except (OSError, ValueError):  # closed under us at the end
        pass


def stop_process(proc, sig=signal.SIGTERM, timeout=STOP_TIMEOUT):
    """Signals a process we started (by its PID, SIGCONT too in case it is
    stopped) and waits for it. Returns its exit code; if it outlives the
    deadline, kills it and raises ProcessError."""
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
            if sig not in (signal.SIGKILL, signal.SIGCONT):
                proc.send_signal(signal.SIGCONT)  # a stopped process takes no SIGTERM
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise ProcessError(f"pid {proc.pid} did not exit within {timeout}s of "
                               f"signal {signal.Signals(sig).name}; killed") from None
    return proc.returncode


def _close_pipes(proc):
    for stream in (proc.stdin, proc.stdout):
        if stream:
            try:
                stream.close()
            except OSError:
                pass


class Processes:
    """Every process a harness starts; stop_all() ends them by PID, the
    newest first."""

    def __init__(self):
        self.procs = []

    def start(self, argv, **kw):
        p = subprocess.Popen(argv, **kw)
        self.procs.append(p)
        return p

    def forget(self, p):
        if p in self.procs:
            self.procs.remove(p)

    def stop(self, p, sig=signal.SIGTERM, timeout=STOP_TIMEOUT):
        """stop_process, then closes its pipes and forgets it."""
        try:
            return stop_process(p, sig, timeout)
        finally:
            _close_pipes(p)
            self.forget(p)

    def stop_all(self, timeout=STOP_TIMEOUT):
        """Stops every process still known; returns the ProcessError
        messages of those that had to be killed."""
        errors = []
        for p in reversed(list(self.procs)):
            try:
                self.stop(p, timeout=timeout)
            except ProcessError as e:
                errors.append(str(e))
        return errors


def parse_addr(text):
    """("host", port) of "host:port" or "[v6]:port"."""
    host, _, port = text.rpartition(":")
    return (host.strip("[]"), int(port))


class Fencegate:
    """A fencegate process on `config_path`. start() waits for the first
    stdout line, which must be {"event":"listening","proxy":"H:P",...}, and
    sets `listening` (that event), `proxy`, `admin` and `locks` (("host",
    port), None for a listener that is off). Stderr goes to log_dir:
    `{name}.{n}.stderr` for the n-th start, or one file `stderr_name` for
    every start (appended).

    wrapper: argv run in front of the binary (valgrind); start_timeout
    bounds the wait for the listening line; procs: a Processes that then
    knows the process too (its stop_all stops it)."""

    SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                         "WARNING: ThreadSanitizer", "ERROR: ThreadSanitizer")

    def __init__(self, binary, config_path, log_dir, extra_args=(), name="fencegate",
                 stderr_name=None, wrapper=(), start_timeout=START_TIMEOUT, procs=None):
        self.binary = binary
        self.config_path = str(config_path)
        self.log_dir = str(log_dir)
        self.extra_args = list(extra_args)
        self.name = name
        self.stderr_name = stderr_name
        self.wrapper = list(wrapper)
        self.start_timeout = start_timeout
        self.procs = procs
        self.proc = None
        self.starts = 0
        self.listening = None
        self.proxy = self.admin = self.locks = None
        self._stderr = None
        self._drainer = None
        self.stdout_rest = []

    def _stderr_path(self, n):
        if self.stderr_name:
            return os.path.join(self.log_dir, self.stderr_name)
        return os.path.join(self.log_dir, f"{self.name}.{n}.stderr")

    @property
    def stderr_path(self):
        """The stderr file of the latest start."""
        return self._stderr_path(self.starts)

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def start(self):
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.starts += 1
        self._stderr = open(self.stderr_path, "ab")
        argv = [*self.wrapper, self.binary, "--config", self.config_path, *self.extra_args]
        popen = self.procs.start if self.procs else subprocess.Popen
        self.proc = popen(argv, stdout=subprocess.PIPE, stderr=self._stderr,
                          stdin=subprocess.DEVNULL)
        try:
            line, rest = read_first_line(self.proc, self.start_timeout, self.name)
            try:
                ev = json.loads(line)
            except ValueError:
                raise ProcessError(f"{self.name}'s first stdout line is not JSON: "
                                   f"{line!r}") from None
            if not (isinstance(ev, dict) and ev.get("event") == "listening" and "proxy" in ev):
                raise ProcessError(f"{self.name}'s first stdout line is not a listening event "
                                   f"with a proxy address: {line!r}")
        except ProcessError as e:
            self._discard()
            raise ProcessError(f"{e}\n--- {self.name} stderr ---\n{self.stderr_tail()}") from None
        self.listening = ev
        self.proxy = parse_addr(ev["proxy"])
        self.admin = parse_addr(ev["admin"]) if ev.get("admin") else None
        self.locks = parse_addr(ev["locks"]) if ev.get("locks") else None
        self.stdout_rest = [rest]
        self._drainer = threading.Thread(target=drain, args=(self.proc.stdout, self.stdout_rest),
                                         daemon=True)
        self._drainer.start()
        return self

    def _discard(self):
        """After a failed start: no process is left behind."""
        try:
            stop_process(self.proc, signal.SIGKILL, timeout=10)
        except ProcessError:
            pass
        self._finish()

    def _finish(self):
        if self._drainer is not None:
            self._drainer.join(timeout=5)
            self._drainer = None
        _close_pipes(self.proc)
        if self.procs:
            self.procs.forget(self.proc)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT):
        """Signals it by its PID and waits; returns the exit code (None if it
        never started). Kills it and raises ProcessError past the deadline."""
        if self.proc is None:
            return None
        try:
            return stop_process(self.proc, sig, timeout)
        finally:
            self._finish()

    def kill(self):
        """SIGKILL (no clean shutdown), and waits."""
        return self.stop(signal.SIGKILL)

    def restart(self):
        """SIGTERM, requires exit code 0, starts again on the same config and
        data directory (the ports are new: the config asks for port 0)."""
        rc = self.stop()
        if rc != 0:
            raise ProcessError(f"{self.name} exited with {rc} on SIGTERM, want 0\n"
                               f"{self.stderr_tail()}")
        return self.start()

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def url(self, role="proxy"):
        """http://H:P of a listener as the listening line names it."""
        return f"http://{self.listening[role]}"

    def stderr_tail(self, n=60):
        if self._stderr is not None:
            self._stderr.flush()
        try:
            with open(self.stderr_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return "(no stderr)"

    def sanitizer_reports(self):
        """Lines of any ASan/UBSan/TSan report in the stderr of every start."""
        paths = sorted({self._stderr_path(n) for n in range(1, self.starts + 1)})
        found = []
        for path in paths:
            try:
                with open(path, "rb") as f:
                    text = f.read().decode("utf-8", "replace")
            except OSError:
                continue
            found += [line for line in text.splitlines()
                      if any(m in line for m in self.SANITIZER_MARKERS)]
        return found


# --------------------------------------------------------------------------
# etcd
# --------------------------------------------------------------------------

class Etcd:
    """One etcd member (Debian's etcd-server) on loopback, for the harnesses
    that need a real one: ports from free_ports unless `ports` gives
    (client, peer), data in `data_dir`, stderr in `log_path`, started
    through `procs` (a Processes) so that it is stopped by its PID.
    `initial_cluster` is etcd's --initial-cluster ("name=peer-url,...");
    None for a cluster of this member alone. start() waits until /health
    says healthy (launch() and wait_healthy() are its two halves, for the
    members of a cluster, none healthy before a quorum runs); kill()
    SIGKILLs it; start() again brings it back on the same ports and data."""

    def __init__(self, procs, data_dir, log_path, name="fencegate-test", ports=None,
                 initial_cluster=None):
        self.procs = procs
        self.data_dir = data_dir
        self.log_path = log_path
        self.name = name
        self.client_port, self.peer_port = ports or free_ports(2)
        self.url = f"http://127.0.0.1:{self.client_port}"
        self.peer_url = f"http://127.0.0.1:{self.peer_port}"
        self.initial_cluster = initial_cluster or f"{self.name}={self.peer_url}"
        self.proc = None

    def launch(self):
        """Starts the process, without waiting for it."""
        etcd = shutil.which("etcd") or "/usr/bin/etcd"
        peer = self.peer_url
        with open(self.log_path, "ab") as log:
            self.proc = self.procs.start(
                [etcd, "--name", self.name, "--data-dir", self.data_dir,
                 "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", self.initial_cluster, "--initial-cluster-state", "new",
                 # fencegate reads no history: keep five minutes of it, as
                 # docs/operations.md tells an operator to, so that a long
                 # run at volume stays within etcd's space quota.
                 "--auto-compaction-mode=periodic", "--auto-compaction-retention=5m",
                 # A snapshot every 10,000 entries (etcd's default: 100,000)
                 # keeps the WAL a restarted member replays short.
                 "--snapshot-count=10000"],
                stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, stderr=log)
        return self

    def healthy(self):
        """Whether /health says healthy now (for a member of a cluster: it
        sees a leader)."""
        import urllib.request
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                return r.status == 200 and json.loads(r.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    def wait_healthy(self, deadline):
        """Polls /health until healthy; raises ProcessError if the process
        exits or time.monotonic() passes `deadline`."""
        while True:  # a condition (etcd healthy) polled with a deadline
            if self.proc.poll() is not None:
                raise ProcessError(f"etcd {self.name} exited with {self.proc.returncode}; "
                                   f"see {self.log_path}")
            if self.healthy():
                return self
            if time.monotonic() > deadline:
                raise ProcessError(f"etcd {self.name} did not become healthy in time; "
                                   f"see {self.log_path}")
            time.sleep(0.05)

    def start(self, timeout=START_TIMEOUT):
        self.launch()
        return self.wait_healthy(time.monotonic() + timeout)

    def kill(self):
        """SIGKILL, and waits."""
        if self.proc is not None:
            self.procs.stop(self.proc, signal.SIGKILL)
            self.proc = None


class EtcdCluster:
    """Three etcd members (Etcd) on loopback forming one cluster: each its
    own ports, data directory `{work_dir}/etcd{i}` and log
    `{work_dir}/etcd{i}.stderr`, every one named in --initial-cluster.
    start() launches all and waits until every member is healthy; kill(i)
    SIGKILLs member i; start_member(i) brings it back on the same ports and
    data and waits until it is healthy (which needs a quorum running)."""

    def __init__(self, procs, work_dir, size=3):
        ports = [free_ports(2) for _ in range(size)]
        names = [f"etcd{i}" for i in range(size)]
        initial = ",".join(f"{n}=http://127.0.0.1:{p[1]}" for n, p in zip(names, ports))
        self.members = [Etcd(procs, os.path.join(work_dir, n), os.path.join(work_dir, f"{n}.stderr"),
                             name=n, ports=p, initial_cluster=initial)
                        for n, p in zip(names, ports)]

    def endpoints(self):
        """The client URLs, member 0 first."""
        return [m.url for m in self.members]

    def start(self, timeout=START_TIMEOUT):
        for m in self.members:
            m.launch()
        deadline = time.monotonic() + timeout
        for m in self.members:
            m.wait_healthy(deadline)
        return self

    def kill(self, i):
        self.members[i].kill()

    def start_member(self, i, timeout=START_TIMEOUT):
        return self.members[i].start(timeout)

    def leader(self):
        """The index of the member that a running member names as leader
        (POST /v3/maintenance/status), or None when none answers."""
        import urllib.request
        ids, leaders = {}, set()
        for i, m in enumerate(self.members):
            if m.proc is None:
                continue
            try:
                req = urllib.request.Request(f"{m.url}/v3/maintenance/status", data=b"{}",
                                             method="POST")
                with urllib.request.urlopen(req, timeout=2) as r:
                    doc = json.loads(r.read())
            except (OSError, ValueError):
                continue
            ids[str(doc["header"]["member_id"])] = i
            leaders.add(str(doc.get("leader", "")))
        found = [ids[x] for x in leaders if x in ids]
        return found[0] if len(found) == 1 else None
