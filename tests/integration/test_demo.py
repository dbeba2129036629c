"""The README's quick start: docker/demo.sh starts nginx (WebDAV) and
fencegate and prints the commands of the token 33/34 story; this test runs
those printed commands as a reader would paste them and checks each answer,
then stops the demo with Ctrl-C (SIGINT)."""

import os
import re
import signal
import subprocess

import fg_helpers

ROOT = os.path.dirname(os.path.dirname(fg_helpers.HERE))
LAST_LINE = "Ctrl-C stops fencegate and nginx."


def start_demo(fencegate_bin, demo_dir):
    env = dict(os.environ, FENCEGATE_BIN=fencegate_bin, FENCEGATE_DEMO_DIR=str(demo_dir))
    proc = subprocess.Popen(["bash", os.path.join(ROOT, "docker", "demo.sh")], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    printed = []
    for line in proc.stdout:  # ends when the demo is ready or has died
        printed.append(line.rstrip("\n"))
        if line.strip() == LAST_LINE:
            return proc, printed
    proc.wait(timeout=30)
    raise AssertionError(f"demo exited ({proc.returncode}) before it was ready:\n"
                         + "\n".join(printed))


def run(cmd):
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True,
                       timeout=fg_helpers.IO_TIMEOUT)
    assert r.returncode == 0, (cmd, r.stderr)
    return r.stdout


def status_of(out):
    return int(re.match(r"HTTP/1\.1 (\d{3})", out).group(1))


def test_demo_prints_commands_that_tell_the_story(fencegate_bin, tmp_path):
    proc, printed = start_demo(fencegate_bin, tmp_path / "demo")
    try:
        commands = [l.strip() for l in printed if l.strip().startswith("curl ")]
        assert len(commands) == 9, printed
        outs = [run(c) for c in commands]
        assert [status_of(o) for i, o in enumerate(outs) if i != 4] == \
            [201, 204, 409, 200, 409, 428, 400, 200]
        assert '"current":34' in outs[2] and '"error":"stale_token"' in outs[2]
        assert outs[3].endswith("written under token 34")
        assert outs[4].strip() == '{"key":"/objects/hello","token":34}'
        assert '"error":"nested_keys"' in outs[5] and '"path":"/objects/hello"' in outs[5]
        # The file nginx holds is what token 34 wrote, the late 33 never reached it.
        with open(tmp_path / "demo" / "www" / "objects" / "hello") as f:
            assert f.read() == "written under token 34"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # as Ctrl-C: the script stops what it started
        rest = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, rest
    assert "demo: stopped" in rest
