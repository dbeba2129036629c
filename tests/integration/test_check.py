"""--check validates a config: 0 when valid, 2 with file, line and field
named on stderr when not; --version answers."""

import re
import subprocess

import pytest

GOOD = """\
listen: "127.0.0.1:0"
upstream:
  url: "http://127.0.0.1:9"
routes:
  - name: objects
    path_prefix: "/objects/"
storage:
  path: "{data}"
admin:
  listen: "127.0.0.1:0"
  token: "t"
"""

# (name, text, line of the error, field name that must be mentioned)
BAD = [
    ("bad-mode", GOOD.replace('path_prefix: "/objects/"\n',
                              'path_prefix: "/objects/"\n    mode: enforcing\n'), 7, "mode"),
    ("unknown-key", GOOD.replace("storage:\n", "storage:\n  pathh: \"x\"\n"), 8, "pathh"),
    ("duration-without-unit", GOOD.replace('  url: "http://127.0.0.1:9"\n',
                                           '  url: "http://127.0.0.1:9"\n  timeout: 30\n'), 4, "timeout"),
    # A mistake inside an idempotency mapping is reported at its line.
    ("idempotency-window-too-long", GOOD.replace('path_prefix: "/objects/"\n',
                                                 'path_prefix: "/objects/"\n    idempotency:\n'
                                                 '      window: 9000h\n'), 8,
     "idempotency.window"),
    ("idempotency-hop-by-hop-header", GOOD.replace('path_prefix: "/objects/"\n',
                                                   'path_prefix: "/objects/"\n    idempotency:\n'
                                                   '      window: 24h\n      header: Connection\n'),
     9, "idempotency.header"),
]


def run_check(binary, path):
    return subprocess.run([binary, "--config", str(path), "--check"], capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL)


def test_check_accepts_a_good_config(fencegate_bin, tmp_path):
    p = tmp_path / "good.yaml"
    p.write_text(GOOD.format(data=tmp_path / "data"))
    r = run_check(fencegate_bin, p)
    assert r.returncode == 0, f"valid config: want exit 0, got {r.returncode}; stderr: {r.stderr}"


@pytest.mark.parametrize("name,text,line,field", BAD, ids=[b[0] for b in BAD])
def test_check_rejects_a_bad_config(fencegate_bin, tmp_path, name, text, line, field):
    p = tmp_path / f"{name}.yaml"
    body = text.format(data=tmp_path / "data")
    assert body.splitlines()[line - 1].strip().startswith(field.split(".")[-1]), \
        f"test bug: line {line} of {name} is {body.splitlines()[line - 1]!r}"
    p.write_text(body)
    r = run_check(fencegate_bin, p)
    assert r.returncode == 2, f"{name}: want exit 2, got {r.returncode}; stderr: {r.stderr}"
    assert str(p) in r.stderr or p.name in r.stderr, f"stderr must name the file: {r.stderr!r}"
    assert re.search(rf"(?<!\d){line}(?!\d)", r.stderr.replace(str(tmp_path), "")), \
        f"stderr must name line {line}: {r.stderr!r}"
    assert field in r.stderr, f"stderr must name the field {field!r}: {r.stderr!r}"


def test_version(fencegate_bin):
    r = subprocess.run([fencegate_bin, "--version"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r
    assert re.search(r"\d+\.\d+\.\d+", r.stdout), f"--version printed {r.stdout!r}"


def test_check_warns_of_an_in_flight_timeout_shorter_than_upstream_timeout(fencegate_bin,
                                                                          tmp_path):
    """Valid, so exit 0, but a repeat could run while the backend still
    works on a request fencegate gave up on: --check says so."""
    p = tmp_path / "short.yaml"
    p.write_text(GOOD.format(data=tmp_path / "data").replace(
        'path_prefix: "/objects/"\n',
        'path_prefix: "/objects/"\n    idempotency: {window: 1h, in_flight_timeout: 5s}\n'))
    r = run_check(fencegate_bin, p)
    assert r.returncode == 0, r.stderr
    assert re.search(r"warning: routes\[0\] \(objects\): idempotency.in_flight_timeout "
                     r"\(5000 ms\) is shorter than upstream.timeout \(30000 ms\)", r.stderr), r.stderr
    good = tmp_path / "good.yaml"
    good.write_text(GOOD.format(data=tmp_path / "data"))
    assert "warning" not in run_check(fencegate_bin, good).stderr
