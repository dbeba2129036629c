"""nginx and Apache httpd (mod_dav) as WebDAV backends, for the harnesses
that put a real file server behind fencegate: the integration tests (nested
resources, fence bypasses, the docs test) and the chaos run's tree
configurations. Each runs as our child process on a free loopback port (such
a server cannot listen on port 0), its config, logs and files in a directory
of its own, and is stopped by its PID."""

import os
import shutil
import signal
import socket
import subprocess
import time

from fencegate_proc import START_TIMEOUT, TempDir, free_port, stop_process


class _DavServer:
    """What NginxDav and ApacheDav share: `dir` holds the server's
    access.log, `root` the files it serves, `proc` the server's process."""

    def _start(self, command, attempts):
        """Starts the server on a free port (`_write_conf(port)`, then
        `command`), and again on another if it does not listen there: such
        a server cannot listen on port 0. False when no attempt listened."""
        self.proc = None
        for _ in range(attempts):
            port = free_port()
            self._write_conf(port)
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._wait_listening(port):
                self.port = port
                self.addr = ("127.0.0.1", port)
                return True
            stop_process(self.proc)
        return False

    def _wait_listening(self, port, timeout=START_TIMEOUT):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False  # exited: the port was taken, most likely
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                time.sleep(0.02)  # polling a condition, with a deadline
        return False

    def file(self, rel):
        """The stored bytes of a resource, None when absent."""
        try:
            with open(os.path.join(self.root, rel.lstrip("/")), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def requests(self):
        """The request lines the server received, from its access log."""
        try:
            with open(os.path.join(self.dir, "access.log"), encoding="latin-1") as f:
                return [line.split('"')[1] for line in f if '"' in line]
        except FileNotFoundError:
            return []


class NginxDav(_DavServer):
    """nginx as a WebDAV backend (PUT, DELETE, MKCOL, COPY, MOVE), as the
    README's demo runs it: files under `root`. nginx cannot listen on port
    0, so a free port is picked and tried again if another process takes
    it first.

    `extra_log` (path, format) adds a second access log beside access.log,
    in that nginx log_format, JSON-escaped (escape=json): a line per request,
    written when nginx has answered it."""

    def __init__(self, work_dir, attempts=5, extra_log=None):
        self.extra_log = extra_log
        self.dir = os.path.join(work_dir, "nginx")
        self.root = os.path.join(self.dir, "www")
        os.makedirs(os.path.join(self.dir, "tmp"), exist_ok=True)
        os.makedirs(self.root, exist_ok=True)
        if not self._start(["nginx", "-p", self.dir + "/",
                                     "-c", os.path.join(self.dir, "nginx.conf"),
                                     "-e", os.path.join(self.dir, "error.log")], attempts):
            raise AssertionError(f"nginx did not start; see {self.dir}/error.log")

    def _write_conf(self, port):
        user = ""
        if os.getuid() == 0:  # its workers would be 'nobody', who cannot write here
            import grp
            import pwd
            user = f"user {pwd.getpwuid(0).pw_name} {grp.getgrgid(0).gr_name};"
        d = self.dir
        extra = ""
        if self.extra_log:
            path, fmt = self.extra_log
            extra = f"log_format extra escape=json '{fmt}';\n  access_log {path} extra;"
        with open(os.path.join(d, "nginx.conf"), "w") as f:
            f.write(f"""{user}
daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log notice;
events {{ worker_connections 256; }}
http {{
  access_log {d}/access.log;
  {extra}
  client_body_temp_path {d}/tmp/body;
  proxy_temp_path {d}/tmp/proxy;
  fastcgi_temp_path {d}/tmp/fastcgi;
  uwsgi_temp_path {d}/tmp/uwsgi;
  scgi_temp_path {d}/tmp/scgi;
  server {{
    listen 127.0.0.1:{port};
    root {self.root};
    location / {{
      dav_methods PUT DELETE MKCOL COPY MOVE;
      create_full_put_path on;
      dav_access user:rw group:r all:r;
    }}
  }}
}}
""")

    def stop(self):
        if self.proc is not None:
            stop_process(self.proc, signal.SIGQUIT)


APACHE = shutil.which("apache2") or "/usr/sbin/apache2"
APACHE_MODULES = "/usr/lib/apache2/modules"


class ApacheDav(_DavServer):
    """Apache httpd with mod_dav as a WebDAV backend, run as NginxDav is:
    files under `root`, a free port tried again if taken, its config and logs
    under work_dir/apache. Apache will not serve as root: run as root, its
    child serves as nobody, who cannot enter the test's own directory
    (pytest makes it 0700), so `root` and the lock database live in a
    directory of their own under the system's temporary directory, which
    stop() removes. A request's line reaches requests() after its answer,
    and not always in the order the requests came."""

    def __init__(self, work_dir, attempts=5):
        if not os.access(APACHE, os.X_OK):
            raise AssertionError("apache2 is missing: bash docker/install-deps.sh installs it")
        self.dir = os.path.join(work_dir, "apache")
        os.makedirs(self.dir, exist_ok=True)
        self.data = TempDir("fg-apache-", mode=0o755)
        self.root = os.path.join(self.data.path, "www")
        self.user = None
        if os.getuid() == 0:
            import pwd
            self.user = pwd.getpwnam("nobody")
        for d in (self.root, os.path.join(self.data.path, "lock")):
            os.makedirs(d)
            if self.user:
                os.chown(d, self.user.pw_uid, self.user.pw_gid)
        if not self._start([APACHE, "-DFOREGROUND", "-d", self.dir,
                                       "-f", os.path.join(self.dir, "httpd.conf")], attempts):
            self.data.remove()
            raise AssertionError(f"apache2 did not start; see {self.dir}/error.log")

    def _write_conf(self, port):
        user = ""
        if self.user:
            user = f"User {self.user.pw_name}\nGroup #{self.user.pw_gid}"
        d, m = self.dir, APACHE_MODULES
        with open(os.path.join(d, "httpd.conf"), "w") as f:
            f.write(f"""LoadModule mpm_event_module {m}/mod_mpm_event.so
LoadModule authz_core_module {m}/mod_authz_core.so
LoadModule dav_module {m}/mod_dav.so
LoadModule dav_fs_module {m}/mod_dav_fs.so
{user}
ServerName 127.0.0.1
Listen 127.0.0.1:{port}
DefaultRuntimeDir {d}
PidFile {d}/apache2.pid
ErrorLog {d}/error.log
LogFormat "%h %t \\"%r\\" %>s %b" dav
CustomLog {d}/access.log dav
StartServers 1
ThreadsPerChild 8
MaxRequestWorkers 8
MinSpareThreads 1
MaxSpareThreads 8
DavLockDB {self.data.path}/lock/davlock
DocumentRoot {self.root}
<Directory {self.root}>
  Dav On
  Require all granted
</Directory>
""")

    def stop(self):
        if self.proc is not None:
            stop_process(self.proc)
        self.data.remove()
