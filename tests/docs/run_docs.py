#!/usr/bin/env python3
"""The docs test: runs the commands that README.md and docs/*.md show, so
that the docs cannot drift from the product.

What it does with each Markdown file (the rules for writers are in
docs/development.md, "Runnable docs"):

- ```console blocks are transcripts. `$ cmd` lines are run (a line ending in
  a backslash continues the command); the lines after one, up to the next
  `$ `, are its expected output, stdout and stderr together. A line `...`
  matches any number of lines, `...` inside a line any text. A command must
  exit 0 unless its expected output ends with `(exit N)`. A command ending in
  ` &` starts fencegate in the background; the test waits for its
  `listening` line and stops it when the file ends.
- A ```yaml block preceded by `<!-- file: NAME -->` is written into the
  sandbox as NAME. Every yaml block with a top-level `upstream:` key is
  validated with `fencegate --check` (refused, if preceded by
  `<!-- invalid -->`).
- ```sh / ```bash / ```shell blocks are not run; each must be preceded by
  `<!-- not run: REASON -->` naming where it runs instead or why it cannot.
- Relative links must point at files that exist, and their #anchors at
  headings of those files.

Each file runs in its own sandbox directory, with nginx as a WebDAV backend.
The docs use fixed addresses (127.0.0.1:8080 proxy, :9901 admin, :9903
locks, :8000 backend); the test maps them to free ports in commands and in
files it writes, and back in the output.

  run_docs.py --fencegate BUILD/app/fencegate [FILE.md ...]
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
import fencegate_proc  # noqa: E402  (starts and stops processes)
import fg_helpers  # noqa: E402  (the integration tests' nginx backend)

COMMAND_TIMEOUT = 60
SHELL_LANGS = {"sh", "bash", "shell"}
# The documented addresses, each mapped to a port of this run.
DOC_PORTS = {"proxy": 8080, "admin": 9901, "locks": 9903, "backend": 8000}


class DocError(Exception):
    pass


class Block:
    def __init__(self, lang, lines, line_no, marker):
        self.lang = lang          # the info string's first word
        self.lines = lines        # the block's lines, without the fences
        self.line_no = line_no    # line of the opening fence (1-based)
        self.marker = marker      # the HTML comment just before it, or None


def parse_blocks(text):
    """Fenced code blocks in document order, with the `<!-- ... -->` line
    that precedes each (blank lines between are allowed)."""
    blocks, lines = [], text.split("\n")
    i, marker = 0, None
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)", line)
        if m:
            indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
            body, j = [], i + 1
            while j < len(lines) and not lines[j].strip().startswith(fence):
                body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
                j += 1
            blocks.append(Block(lang, body, i + 1, marker))
            marker, i = None, j + 1
            continue
        c = re.match(r"^\s*<!--\s*(.*?)\s*-->\s*$", line)
        if c:
            marker = c.group(1)
        elif line.strip():
            marker = None
        i += 1
    return blocks


def parse_transcript(block):
    """[(command, expected_lines)] of a console block."""
    steps, cmd, expect, cont = [], None, [], False
    for line in block.lines:
        if cont:
            cmd += "\n" + line
            cont = line.endswith("\\")
        elif line.startswith("$ "):
            if cmd is not None:
                steps.append((cmd, expect))
            cmd, expect = line[2:], []
            cont = line.endswith("\\")
        elif cmd is None:
            if line.strip():
                raise DocError(f"line {block.line_no}: console block text before the first `$ `")
        else:
            expect.append(line)
    if cmd is not None:
        steps.append((cmd, expect))
    return steps


def expected_pattern(lines):
    parts = []
    for line in lines:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*".join(re.escape(p) for p in line.rstrip().split("...")) + r"\n")
    return re.compile("".join(parts))


def normalise(output):
    lines = [l.rstrip() for l in output.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "".join(l + "\n" for l in lines)


def slug(heading):
    """The anchor a Markdown renderer gives a heading: lower case, spaces to
    hyphens, punctuation other than hyphens and underscores dropped."""
    s = heading.strip().lower()
    s = re.sub(r"[`*]", "", s)
    s = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", s)
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    out, seen = set(), {}
    in_code = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if re.match(r"^\s*(`{3,}|~{3,})", line):
                in_code = not in_code
            if in_code:
                continue
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                base = slug(m.group(1))
                n = seen.get(base, 0)
                seen[base] = n + 1
                out.add(base if n == 0 else f"{base}-{n}")
    return out


def check_links(path, text):
    errors = []
    prose = re.sub(r"^(\s*)(`{3,}|~{3,}).*?^\1\2\s*$", "", text, flags=re.S | re.M)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    for m in re.finditer(r"\]\(([^)\s]+)\)", prose):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            errors.append(f"link to {target}: {dest} does not exist")
        elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
            errors.append(f"link to {target}: no heading with anchor #{anchor}")
    return errors


class Sandbox:
    """One file's world: a directory, the demo backend, ports, processes."""

    def __init__(self, fencegate, tmp_root):
        self.fencegate = os.path.abspath(fencegate)
        self.tmp = fencegate_proc.TempDir("docs-", parent=tmp_root)
        self.dir = self.tmp.path
        # The repository's top-level folders, so that `config/examples/...`
        # and `locks/demo/...` resolve as they do from a checkout.
        for name in os.listdir(ROOT):
            if not name.startswith(".") and not name.startswith("build") and name != "docs":
                os.symlink(os.path.join(ROOT, name), os.path.join(self.dir, name))
        os.symlink(os.path.join(ROOT, "docs"), os.path.join(self.dir, "docs"))
        self.backend = fg_helpers.NginxDav(os.path.join(self.dir, ".backend"))
        self.ports = {"backend": self.backend.port}
        roles = ("proxy", "admin", "locks")
        self.ports.update(zip(roles, fencegate_proc.free_ports(len(roles))))
        self.background = []
        self.env = dict(os.environ)
        self.env["PATH"] = os.path.dirname(self.fencegate) + os.pathsep + self.env.get("PATH", "")

    def to_real(self, text):
        for role, doc_port in DOC_PORTS.items():
            real = str(self.ports[role])
            text = re.sub(rf"\b(127\.0\.0\.1|localhost):{doc_port}\b", rf"\g<1>:{real}", text)
        return text

    def to_doc(self, text):
        for role, doc_port in DOC_PORTS.items():
            text = re.sub(rf"\b(127\.0\.0\.1|localhost):{self.ports[role]}\b",
                          rf"\g<1>:{doc_port}", text)
        return text

    def write_file(self, name, lines):
        path = os.path.join(self.dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(self.to_real("\n".join(lines) + "\n"))

    def check_config(self, lines, invalid):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=self.dir, delete=False) as f:
            f.write(self.to_real("\n".join(lines) + "\n"))
        r = subprocess.run([self.fencegate, "--check", "--config", f.name], cwd=self.dir,
                           env=self.env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
        os.unlink(f.name)
        if invalid and r.returncode != 2:
            raise DocError(f"a config marked invalid passes --check (exit {r.returncode})")
        if not invalid and r.returncode != 0:
            raise DocError(f"config refused by --check (exit {r.returncode}):\n{r.stderr}")

    def start(self, cmd):
        words = cmd.split()
        if not words or words[0] != "fencegate":
            raise DocError(f"only fencegate may run in the background: {cmd!r}")
        log = open(os.path.join(self.dir, f".fencegate-{len(self.background)}.log"), "wb")
        proc = subprocess.Popen(["bash", "-c", "exec " + self.to_real(cmd)], cwd=self.dir,
                                env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=log)
        self.background.append((proc, log))
        try:
            line, _ = fencegate_proc.read_first_line(proc, fencegate_proc.START_TIMEOUT, cmd)
        except fencegate_proc.ProcessError as e:
            log.flush()
            with open(log.name, errors="replace") as f:
                raise DocError(f"{e}\n{f.read()[-3000:]}")
        if '"listening"' not in line:
            raise DocError(f"{cmd}: first line is not the listening line: {line!r}")
        threading.Thread(target=fencegate_proc.drain, args=(proc.stdout, []), daemon=True).start()

    def run(self, cmd, expect):
        want_status = 0
        if expect and re.fullmatch(r"\(exit \d+\)", expect[-1].strip()):
            want_status = int(expect[-1].strip()[6:-1])
            expect = expect[:-1]
        try:
            r = subprocess.run(["bash", "-c", self.to_real(cmd)], cwd=self.dir, env=self.env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=COMMAND_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise DocError(f"$ {cmd}\ndid not finish within {COMMAND_TIMEOUT}s")
        out = normalise(self.to_doc(r.stdout.decode("utf-8", "replace")))
        if r.returncode != want_status:
            raise DocError(f"$ {cmd}\nexit {r.returncode}, expected {want_status}; output:\n{out}")
        if expect and not expected_pattern(expect).fullmatch(out):
            raise DocError(f"$ {cmd}\nexpected:\n{normalise(chr(10).join(expect))}"
                           f"got:\n{out}")

    def close(self):
        errors = []
        for proc, log in self.background:
            try:
                fencegate_proc.stop_process(proc)
            except fencegate_proc.ProcessError as e:
                errors.append(str(e))
            log.close()
        fencegate_proc.stop_process(self.backend.proc)
        return errors


def run_file(path, fencegate, tmp_root, keep):
    """Checks one Markdown file; returns a list of error strings."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    errors = check_links(path, text)
    blocks = parse_blocks(text)
    # Static rules first, so that a file fails fast without starting anything.
    for b in blocks:
        if b.lang in SHELL_LANGS and not (b.marker and re.match(r"not run:\s*\S", b.marker)):
            errors.append(f"line {b.line_no}: ```{b.lang} block without `<!-- not run: REASON -->`"
                          " (make it a console block the test runs, or say why it cannot be)")
    runnable = [b for b in blocks if b.lang in ("console", "yaml", "yml")]
    if errors or not runnable:
        return errors
    box = Sandbox(fencegate, tmp_root)
    try:
        for b in blocks:
            try:
                if b.lang in ("yaml", "yml"):
                    m = re.match(r"file:\s*(\S+)$", b.marker or "")
                    if m:
                        box.write_file(m.group(1), b.lines)
                    if any(re.match(r"^upstream:", l) for l in b.lines):
                        box.check_config(b.lines, invalid=(b.marker or "") == "invalid")
                elif b.lang == "console":
                    for cmd, expect in parse_transcript(b):
                        if cmd.rstrip().endswith(" &"):
                            box.start(cmd.rstrip()[:-2])
                        else:
                            box.run(cmd, expect)
            except DocError as e:
                errors.append(f"line {b.line_no}: {e}")
                break  # later blocks usually depend on this one
    finally:
        errors += box.close()
        if not keep and not errors:
            box.tmp.remove()
        elif errors:
            errors.append(f"sandbox kept: {box.dir}")
    return errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fencegate", required=True, help="the built fencegate binary")
    ap.add_argument("--tmp", default=None, help="where sandboxes go (default: the system's)")
    ap.add_argument("--keep", action="store_true", help="keep every sandbox")
    ap.add_argument("files", nargs="*",
                    help="Markdown files (default: README.md and docs/*.md of the repository)")
    args = ap.parse_args()
    files = args.files or [os.path.join(ROOT, "README.md")] + sorted(
        os.path.join(ROOT, "docs", n) for n in os.listdir(os.path.join(ROOT, "docs"))
        if n.endswith(".md"))
    failed = 0
    for path in files:
        errors = run_file(path, args.fencegate, args.tmp, args.keep)
        print(f"{'FAIL' if errors else 'ok  '} {os.path.relpath(path)}")
        for e in errors:
            print("    " + e.replace("\n", "\n    "))
        failed += bool(errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
