"""The packaging files, checked without a container engine or a running
systemd: the container image (docker/Dockerfile) copies only files that
exist and builds with CI's script and CMake preset (what it copies
configures), its final stage installs the package of every library the
binary links, and its health check passes against its own configuration;
the compose files parse and name only files that exist; every shipped
configuration passes `fencegate --check`; the systemd unit passes
`systemd-analyze verify` and agrees with its configuration; the Kubernetes
example's probes, ports and mounts agree with its configuration; the
Grafana dashboard queries only metric names fencegate has."""

import glob
import json
import os
import re
import shlex
import shutil
import subprocess

import pytest
import yaml

from fg_helpers import Fencegate, request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCKERFILE = os.path.join(ROOT, "docker", "Dockerfile")
COMPOSE_FILES = sorted(glob.glob(os.path.join(ROOT, "docker", "compose*.yaml")))
UNIT = os.path.join(ROOT, "deploy", "systemd", "fencegate.service")
UNIT_CONFIG = os.path.join(ROOT, "deploy", "systemd", "fencegate.yaml")
KUBERNETES = os.path.join(ROOT, "deploy", "kubernetes", "fencegate.yaml")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "fencegate.json")

# docs/contract.md's metric names (the product's metrics list): the names a
# dashboard may query while the binary does not serve /metrics itself.
SPEC_METRICS = {
    "fencegate_requests_total", "fencegate_shadow_violations_total",
    "fencegate_request_duration_seconds", "fencegate_upstream_duration_seconds",
    "fencegate_store_advance_duration_seconds", "fencegate_keys_waiting",
    "fencegate_connections_active",
}
# Names the dashboard queries ahead of the metrics list; to be named there
# (or renamed here) when /metrics is served.
PROPOSED_METRICS = {"fencegate_store_batch_size"}
# The standard process collector's names.
PROCESS_METRICS = {"process_resident_memory_bytes", "process_open_fds",
                   "process_cpu_seconds_total"}


def rel(path):
    return os.path.relpath(path, ROOT)


# --------------------------------------------------------------------------
# Dockerfile
# --------------------------------------------------------------------------

def dockerfile_instructions(text):
    """[(stage index, INSTRUCTION, arguments)] with continuation lines joined
    and comments dropped."""
    out, stage, joined = [], -1, ""
    for line in text.splitlines():
        if not joined and line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            joined += line.rstrip()[:-1] + " "
            continue
        joined += line
        if joined.strip():
            instr, _, args = joined.strip().partition(" ")
            if instr.upper() == "FROM":
                stage += 1
            out.append((stage, instr.upper(), args.strip()))
        joined = ""
    return out


def copy_sources(args):
    """The sources of a COPY (its options dropped, its destination too)."""
    words = [w for w in shlex.split(args) if not w.startswith("--")]
    return words[:-1]


@pytest.fixture(scope="module")
def dockerfile():
    with open(DOCKERFILE) as f:
        return dockerfile_instructions(f.read())


def test_dockerfile_copies_only_files_that_exist(dockerfile):
    copies = [(s, a) for s, i, a in dockerfile if i in ("COPY", "ADD")]
    assert copies, "no COPY in docker/Dockerfile"
    for stage, args in copies:
        if "--from=" in args:
            continue
        for src in copy_sources(args):
            assert os.path.exists(os.path.join(ROOT, src)), \
                f"docker/Dockerfile (stage {stage}) copies {src}, which is not in the repository"


def test_dockerfile_copies_every_folder_the_build_adds(dockerfile):
    """The folders the top-level CMakeLists.txt always adds (an unindented
    add_subdirectory) are all copied into the build stage: a new library
    folder would otherwise break the image's build only."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        folders = re.findall(r"^add_subdirectory\((\w+)\)", f.read(), re.M)
    assert folders, "no add_subdirectory found in CMakeLists.txt"
    copied = {src.rstrip("/") for s, i, a in dockerfile if i == "COPY" and s == 0
              for src in copy_sources(a)}
    missing = [d for d in folders if d not in copied]
    assert not missing, f"docker/Dockerfile's build stage does not copy {missing}"


def test_dockerfile_builds_as_ci_builds(dockerfile):
    """The build stage installs with CI's script and configures with CI's
    preset; tests/run.sh (what CI runs) uses that script and that preset."""
    with open(os.path.join(ROOT, "tests", "run.sh")) as f:
        ci = f.read()
    assert "docker/install-deps.sh" in ci and "cmake --preset default" in ci, \
        "tests/run.sh no longer uses docker/install-deps.sh and the default preset"
    runs = " ".join(a for s, i, a in dockerfile if i == "RUN" and s == 0)
    assert re.search(r"install-deps\.sh --build\b", runs), runs
    assert re.search(r"cmake --preset default\b", runs), runs
    assert "-DFENCEGATE_BUILD_TESTS=OFF" in runs and "-DFENCEGATE_BUILD_BENCH=OFF" in runs, runs
    # No package list of its own: every apt-get is the script's.
    assert "apt-get install" not in " ".join(a for _, i, a in dockerfile if i == "RUN"), \
        "docker/Dockerfile installs packages itself; use docker/install-deps.sh"
    final = [a for s, i, a in dockerfile if i == "RUN" and s == 1]
    assert any(re.search(r"install-deps\.sh --runtime\b", a) for a in final), final


def install_deps_list(name):
    with open(os.path.join(ROOT, "docker", "install-deps.sh")) as f:
        text = f.read()
    m = re.search(rf"^{name}=\((.*?)^\)", text, re.M | re.S)
    assert m, f"docker/install-deps.sh has no {name}"
    return [w for line in m.group(1).splitlines() for w in line.split("#")[0].split()]


def test_install_deps_modes():
    """--build and --runtime are parts of the full list, and an unknown
    flag is refused (so a typo in the Dockerfile fails its build)."""
    script = os.path.join(ROOT, "docker", "install-deps.sh")
    r = subprocess.run(["bash", script, "--bild"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "unknown argument" in r.stderr, r
    build, runtime = install_deps_list("BUILD_PACKAGES"), install_deps_list("RUNTIME_PACKAGES")
    assert "cmake" in build and "libsystemd-dev" in build, build
    assert "curl" in runtime and not any(p.endswith("-dev") for p in runtime), runtime


def test_dockerfile_build_stage_configures(dockerfile, tmp_path):
    """What the build stage copies, configured as its RUN line configures
    it (no compiling): the preset and the options are accepted and the
    copied folders are all the build needs."""
    src = tmp_path / "src"  # the stage's WORKDIR, /src
    src.mkdir()
    for s, i, a in dockerfile:
        if i != "COPY" or s != 0:
            continue
        dest = shlex.split(a)[-1]
        dest = dest[len("/src/"):] if dest.startswith("/src/") else dest
        for name in copy_sources(a):
            path = os.path.join(ROOT, name)
            if os.path.isdir(path):
                shutil.copytree(path, src / dest)
            else:
                to = src / dest
                if dest.endswith("/") or dest == ".":
                    to = to / os.path.basename(name)
                to.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, to)
    run = next(a for s, i, a in dockerfile if i == "RUN" and s == 0 and "cmake --preset" in a)
    configure = shlex.split(run.split("&&")[0])
    r = subprocess.run(configure, cwd=src, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(configure)}: exit {r.returncode}\n{r.stderr[-3000:]}"
    assert (src / "build" / "build.ninja").is_file()


@pytest.mark.skipif(shutil.which("dpkg") is None or shutil.which("readelf") is None,
                    reason="not a Debian system with binutils (no dpkg or readelf)")
def test_runtime_packages_hold_every_shared_library(fencegate_bin):
    """Each shared library this build's binary links comes from a package
    of install-deps.sh --runtime (or a package every Debian image has), so
    the image's final stage can run it."""
    runtime = set(install_deps_list("RUNTIME_PACKAGES")) | {"libc6", "libstdc++6", "libgcc-s1"}
    # The libraries it names itself (apt brings theirs): readelf's NEEDED,
    # where ldd finds each.
    readelf = subprocess.run(["readelf", "-d", fencegate_bin], capture_output=True, text=True,
                             timeout=60)
    assert readelf.returncode == 0, readelf.stderr
    needed = re.findall(r"\(NEEDED\).*\[(.+)\]", readelf.stdout)
    ldd = subprocess.run(["ldd", fencegate_bin], capture_output=True, text=True, timeout=60)
    assert ldd.returncode == 0, ldd.stderr
    found = dict(re.findall(r"^\s*(\S+) => (/\S+)", ldd.stdout, re.M))
    libs = [found[n] for n in needed if n in found]
    assert libs, (readelf.stdout, ldd.stdout)
    missing = []
    for lib in libs:
        real = os.path.realpath(lib)
        owners = set()
        for path in {lib, real, re.sub(r"^/lib/", "/usr/lib/", real)}:
            r = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True, timeout=60)
            if r.returncode == 0:
                owners |= {o.strip().split(":")[0] for o in r.stdout.split(": ")[0].split(",")}
        if not owners & runtime:
            missing.append(f"{lib} ({', '.join(sorted(owners)) or 'no package'})")
    assert not missing, ("docker/install-deps.sh's RUNTIME_PACKAGES lacks the package of: "
                         + "; ".join(missing))


def test_dockerfile_runtime_stage(dockerfile):
    final = [(i, a) for s, i, a in dockerfile if s == max(s for s, _, _ in dockerfile)]
    instr = {}
    for i, a in final:
        instr.setdefault(i, []).append(a)
    user = instr["USER"][-1].split(":")[0]
    assert user not in ("0", "root"), f"the image runs as {user}"
    cmd = json.loads(instr["CMD"][-1])
    config_path = cmd[cmd.index("--config") + 1]
    copied = [copy_sources(a) + [shlex.split(a)[-1]] for a in instr["COPY"]]
    source = next(c[0] for c in copied if c[-1] == config_path)
    with open(os.path.join(ROOT, source)) as f:
        cfg = yaml.safe_load(f)
    assert cfg["listen"].startswith("0.0.0.0:") and cfg["admin"]["listen"].startswith("0.0.0.0:")
    proxy_port, admin_port = cfg["listen"].rsplit(":")[1], cfg["admin"]["listen"].rsplit(":")[1]
    exposed = " ".join(instr["EXPOSE"]).split()
    assert proxy_port in exposed and admin_port in exposed, (exposed, cfg)
    volumes = json.loads(instr["VOLUME"][-1])
    assert cfg["storage"]["path"] in volumes, (volumes, cfg["storage"])
    health = instr["HEALTHCHECK"][-1]
    assert f"http://127.0.0.1:{admin_port}/healthz" in health, health
    tool = json.loads(health.split("CMD", 1)[1])[0]
    assert tool in install_deps_list("RUNTIME_PACKAGES") or tool == "/usr/bin/fencegate", \
        f"the HEALTHCHECK runs {tool}, which the runtime stage does not install"


def test_dockerfile_healthcheck_passes_on_the_image_config(dockerfile, fencegate_bin, backend,
                                                           tmp_path):
    """The HEALTHCHECK's command, run as is against fencegate on the image's
    configuration (its addresses on loopback port 0 and its store in a
    temporary directory instead of the container's), succeeds; the same
    command on a path the admin listener does not serve fails."""
    final = max(s for s, _, _ in dockerfile)
    health = next(a for s, i, a in dockerfile if i == "HEALTHCHECK" and s == final)
    argv = json.loads(health.split("CMD", 1)[1])
    with open(os.path.join(ROOT, "docker", "fencegate.yaml")) as f:
        cfg = yaml.safe_load(f)
    cfg["listen"], cfg["admin"]["listen"] = "127.0.0.1:0", "127.0.0.1:0"
    cfg["storage"]["path"] = str(tmp_path / "data")
    cfg["upstream"]["url"] = f"http://127.0.0.1:{backend.port}"
    path = tmp_path / "image.yaml"
    path.write_text(yaml.safe_dump(cfg))
    gate = Fencegate(fencegate_bin, path, str(tmp_path), name="image").start()
    try:
        url = next(a for a in argv if a.startswith("http://"))
        admin = f"http://{gate.listening['admin']}"
        # Its own path, on the address this run's admin listener has.
        own = admin + "/" + url.split("/", 3)[3]
        ok = subprocess.run([a.replace(url, own) for a in argv],
                            capture_output=True, text=True, timeout=60)
        assert ok.returncode == 0, ok
        bad = subprocess.run([a.replace(url, admin + "/no-such-path") for a in argv],
                             capture_output=True, text=True, timeout=60)
        assert bad.returncode != 0, bad
    finally:
        assert gate.stop() == 0


# --------------------------------------------------------------------------
# Compose files
# --------------------------------------------------------------------------

def test_compose_files_name_only_files_that_exist():
    assert COMPOSE_FILES, "no docker/compose*.yaml"
    for path in COMPOSE_FILES:
        here = os.path.dirname(path)
        with open(path) as f:
            doc = yaml.safe_load(f)
        services = doc["services"]
        assert services, f"{rel(path)}: no services"
        for name, svc in services.items():
            where = f"{rel(path)}: service {name}"
            build = svc.get("build")
            if build:
                context = os.path.normpath(os.path.join(here, build["context"]))
                assert os.path.isdir(context), f"{where}: no build context {context}"
                if "dockerfile" in build:
                    df = os.path.join(context, build["dockerfile"])
                    assert os.path.isfile(df), f"{where}: no {rel(df)}"
                for stage, i, a in dockerfile_instructions(build.get("dockerfile_inline", "")):
                    if i == "COPY" and "--from=" not in a:
                        for src in copy_sources(a):
                            assert os.path.exists(os.path.join(context, src)), \
                                f"{where}: its inline Dockerfile copies {src}, which does not exist"
            for vol in svc.get("volumes", []):
                src = vol.split(":")[0]
                if src.startswith((".", "/")):
                    assert os.path.exists(os.path.normpath(os.path.join(here, src))), \
                        f"{where}: mounts {src}, which does not exist"
                else:
                    assert src in (doc.get("volumes") or {}), f"{where}: volume {src} not declared"
            if "extends" in svc:
                other = os.path.join(here, svc["extends"]["file"])
                with open(other) as f:
                    assert svc["extends"]["service"] in yaml.safe_load(f)["services"], where
            for dep in svc.get("depends_on", []):
                assert dep in services, f"{where}: depends on {dep}, not a service"


def test_compose_haproxy_has_every_address_the_recipe_reads():
    with open(os.path.join(ROOT, "deploy", "haproxy", "fencegate.cfg")) as f:
        wanted = set(re.findall(r'"\$\{(\w+)\}"', "\n".join(
            line for line in f if not line.lstrip().startswith("#"))))
    assert wanted, "deploy/haproxy/fencegate.cfg reads no variable"
    found = False
    for path in COMPOSE_FILES:
        with open(path) as f:
            for name, svc in yaml.safe_load(f)["services"].items():
                if any(v.startswith("../deploy/haproxy:") for v in svc.get("volumes", [])):
                    found = True
                    missing = wanted - set(svc.get("environment", {}))
                    assert not missing, f"{rel(path)}: {name} does not set {sorted(missing)}"
    assert found, "no compose file runs deploy/haproxy/fencegate.cfg"


def test_the_recipes_error_files_are_beside_it_and_answer_json():
    recipe_dir = os.path.join(ROOT, "deploy", "haproxy")
    with open(os.path.join(recipe_dir, "fencegate.cfg")) as f:
        names = re.findall(r"^\s*errorfile\s+\d+\s+(\S+)", f.read(), re.M)
    assert names, "the recipe names no errorfile"
    for name in names:
        with open(os.path.join(recipe_dir, name), "rb") as f:
            head, _, body = f.read().partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        assert lines[0].startswith("HTTP/1.1 5"), (name, lines[0])
        fields = dict(line.split(": ", 1) for line in lines[1:])
        assert fields["Content-Type"] == "application/json", name
        assert int(fields["Content-Length"]) == len(body), name
        assert set(json.loads(body)) == {"error", "message"}, name


# --------------------------------------------------------------------------
# Every shipped configuration passes --check
# --------------------------------------------------------------------------

def is_compose(doc):
    return isinstance(doc, dict) and "services" in doc


def shipped_configs():
    """(name, text) of every fencegate configuration the repository ships:
    the YAML files under deploy/, docker/ and config/examples/ that are not
    compose files or Kubernetes manifests, and each ConfigMap's fencegate.yaml."""
    out = []
    files = (glob.glob(os.path.join(ROOT, "deploy", "**", "*.yaml"), recursive=True)
             + glob.glob(os.path.join(ROOT, "docker", "**", "*.yaml"), recursive=True)
             + glob.glob(os.path.join(ROOT, "config", "examples", "*.yaml")))
    for path in sorted(files):
        with open(path) as f:
            text = f.read()
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
        if any(isinstance(d, dict) and "apiVersion" in d for d in docs):
            for d in docs:
                if d.get("kind") == "ConfigMap" and "fencegate.yaml" in d.get("data", {}):
                    out.append((f"{rel(path)} ({d['metadata']['name']})", d["data"]["fencegate.yaml"]))
        elif not any(is_compose(d) for d in docs):
            out.append((rel(path), text))
    return out


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    """A certificate and its key, a token file and log files in a writable
    directory: what a shipped configuration's file fields point at when the
    file is not on this machine (they name the host's /etc/fencegate,
    /run/secrets, /var/log/fencegate...)."""
    d = tmp_path_factory.mktemp("stand-ins")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=stand-in", "-keyout", str(d / "key.pem"),
                    "-out", str(d / "cert.pem")], check=True, capture_output=True, timeout=60)
    (d / "token").write_text("stand-in-admin-token\n")
    return {"key_file": str(d / "key.pem"), "token_file": str(d / "token"),
            "password_file": str(d / "token"), "file": str(d / "fencegate.log"),
            "access_log_file": str(d / "access.log"), "other": str(d / "cert.pem")}


FILE_FIELD = re.compile(r'^(\s*)((?:\w+_)?file):(\s*)"([^"]+)"', re.M)


def with_stand_ins(text, stand_ins):
    """The configuration with each *_file that does not exist here pointed
    at a stand-in of its kind; every other line as shipped. Also the list
    of fields replaced."""
    replaced = []

    def sub(m):
        indent, field, space, path = m.groups()
        if os.path.exists(path):
            return m.group(0)
        replaced.append(f"{field}: {path}")
        return f'{indent}{field}:{space}"{stand_ins.get(field, stand_ins["other"])}"'
    return FILE_FIELD.sub(sub, text), replaced


def test_every_shipped_config_passes_check(fencegate_bin, stand_ins, tmp_path):
    configs = shipped_configs()
    names = [n for n, _ in configs]
    for must in ("docker/fencegate.yaml", "docker/fencegate-etcd.yaml",
                 "deploy/systemd/fencegate.yaml", "config/examples/full.yaml"):
        assert must in names, f"{must} is not among the configurations found: {names}"
    assert any(n.startswith("deploy/kubernetes/") for n in names), names
    failures = []
    for i, (name, text) in enumerate(configs):
        text, replaced = with_stand_ins(text, stand_ins)
        path = tmp_path / f"config{i}.yaml"
        path.write_text(text)
        r = subprocess.run([fencegate_bin, "--config", str(path), "--check"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0 or "configuration OK" not in r.stdout:
            failures.append(f"{name} (stand-ins for {replaced}): exit {r.returncode}: "
                            f"{r.stderr.strip()}")
    assert not failures, "\n".join(failures)


def test_check_of_shipped_configs_can_fail(fencegate_bin, stand_ins, tmp_path):
    """The check above refuses a broken copy of a shipped file."""
    name, text = next(c for c in shipped_configs() if c[0] == "docker/fencegate.yaml")
    path = tmp_path / "broken.yaml"
    path.write_text(text.replace("listen:", "lisen:", 1))
    r = subprocess.run([fencegate_bin, "--config", str(path), "--check"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r


# --------------------------------------------------------------------------
# systemd unit
# --------------------------------------------------------------------------

def unit_settings():
    out = {}
    with open(UNIT) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith(("#", ";", "[")) and "=" in line:
                k, _, v = line.partition("=")
                out.setdefault(k, []).append(v)
    return out


def test_systemd_unit_agrees_with_its_config():
    s = unit_settings()
    with open(UNIT_CONFIG) as f:
        cfg = yaml.safe_load(f)
    assert s["Type"] == ["notify"]
    assert s["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert cfg["storage"]["path"] == "/var/lib/" + s["StateDirectory"][0]
    max_conn = cfg["limits"]["max_connections"]
    assert int(s["LimitNOFILE"][0]) >= 2 * max_conn + 1024, (s["LimitNOFILE"], max_conn)
    drain = int(cfg["limits"]["drain_timeout"].rstrip("s"))
    assert int(s["TimeoutStopSec"][0]) > drain
    name, _, _ = s["LoadCredential"][0].partition(":")
    assert cfg["admin"]["token_file"] == f"/run/credentials/fencegate.service/{name}"
    for k in ("ProtectSystem", "ProtectHome", "NoNewPrivileges", "PrivateTmp",
              "RestrictAddressFamilies"):
        assert k in s, f"the unit does not set {k}"
    assert s["CapabilityBoundingSet"] == [""], s["CapabilityBoundingSet"]
    assert "AF_UNIX" in s["RestrictAddressFamilies"][0], "sd_notify needs AF_UNIX"
    assert any(k in s for k in ("User", "DynamicUser"))
    for cmd in s["ExecStart"] + s["ExecStartPre"]:
        assert "/etc/fencegate/fencegate.yaml" in cmd, cmd


SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


@pytest.mark.skipif(SYSTEMD_ANALYZE is None,
                    reason="systemd-analyze is not installed (Debian's systemd package has it)")
def test_systemd_unit_verifies(fencegate_bin, tmp_path):
    """systemd-analyze verify, offline: it needs the binaries ExecStart and
    ExecStartPre name to exist, so the unit's copy points them at this
    build's binary; every other line is as shipped."""
    with open(UNIT) as f:
        text = f.read()
    assert "/usr/bin/fencegate " in text
    unit = tmp_path / "fencegate.service"
    unit.write_text(text.replace("/usr/bin/fencegate ", fencegate_bin + " "))
    r = subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", str(unit)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and not r.stderr.strip(), f"exit {r.returncode}:\n{r.stderr}"
    # The same check refuses a misspelt setting.
    bad = tmp_path / "bad" / "fencegate.service"
    bad.parent.mkdir()
    bad.write_text(unit.read_text().replace("ProtectHome=", "ProtectHom="))
    r = subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", str(bad)],
                       capture_output=True, text=True, timeout=120)
    assert "ProtectHom" in r.stderr, r.stderr


# --------------------------------------------------------------------------
# Kubernetes
# --------------------------------------------------------------------------

def test_kubernetes_example_agrees_with_its_config():
    with open(KUBERNETES) as f:
        docs = {d["kind"]: d for d in yaml.safe_load_all(f) if d}
    cfg = yaml.safe_load(docs["ConfigMap"]["data"]["fencegate.yaml"])
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    fg = next(c for c in pod["containers"] if c["name"] == "fencegate")
    ports = {p["name"]: p["containerPort"] for p in fg["ports"]}
    assert ports["proxy"] == int(cfg["listen"].rsplit(":")[1])
    assert ports["admin"] == int(cfg["admin"]["listen"].rsplit(":")[1])
    assert fg["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert fg["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    assert cfg["upstream"]["url"].startswith("http://127.0.0.1:")
    assert docs["Service"]["spec"]["ports"][0]["targetPort"] == "proxy"
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in fg["volumeMounts"]}
    data = volumes[mounts[cfg["storage"]["path"]]]
    assert data["persistentVolumeClaim"]["claimName"] == docs["PersistentVolumeClaim"]["metadata"]["name"]
    token_dir = os.path.dirname(cfg["admin"]["token_file"])
    assert "secret" in volumes[mounts[token_dir]]
    assert "/etc/fencegate/fencegate.yaml" in fg["args"]
    assert "configMap" in volumes[mounts["/etc/fencegate"]]
    assert docs["Deployment"]["spec"]["replicas"] == 1 or cfg["storage"]["engine"] == "etcd"


# --------------------------------------------------------------------------
# Grafana dashboard
# --------------------------------------------------------------------------

METRIC = re.compile(r"\b((?:fencegate|process)_[a-z_]+)\b")


def dashboard_series():
    """Every series name the dashboard's queries name (`_bucket`, `_sum` and
    `_count` included)."""
    with open(DASHBOARD) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    assert exprs, "the dashboard queries nothing"
    return {m for e in exprs for m in METRIC.findall(e)}


def dashboard_metrics():
    return {re.sub(r"_(bucket|sum|count)$", "", m) for m in dashboard_series()}


def test_dashboard_queries_only_known_metrics(gate):
    """Against what the binary serves on the admin /metrics when it serves
    it; else against the product's metric names (and the few proposed
    ahead of them, listed above)."""
    names = dashboard_metrics()
    for must in SPEC_METRICS:
        assert must in names, f"the dashboard has no panel on {must}"
    r = request(gate.admin, "GET", "/metrics")
    if r.status == 200:
        # The series each family's type gives: a summary has no _bucket, a
        # counter no _sum.
        suffixes = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}
        served = {name + suffix
                  for name, kind in re.findall(r"^# TYPE (\w+) (\w+)$", r.body.decode(), re.M)
                  for suffix in suffixes.get(kind, ("",))}
        unknown = dashboard_series() - served
        assert not unknown, f"the dashboard queries {sorted(unknown)}, which /metrics lacks"
    else:
        unknown = names - SPEC_METRICS - PROPOSED_METRICS - PROCESS_METRICS
        assert not unknown, f"the dashboard queries {sorted(unknown)}, not fencegate's names"
