"""The docs test's own test: each rule it enforces catches a page that
breaks it, and a page that keeps every rule passes.

  FENCEGATE=BUILD/app/fencegate python3 -m pytest tests/docs
"""

import os
import textwrap

import pytest

import run_docs

FENCEGATE = os.environ.get("FENCEGATE", "")

CONFIG = """\
<!-- file: fencegate.yaml -->
```yaml
listen: "127.0.0.1:8080"
upstream:
  url: "http://127.0.0.1:8000"
storage:
  path: data
admin:
  listen: "127.0.0.1:9901"
routes:
  - path_prefix: /objects/
```
"""

GOOD = CONFIG + """
# Title

See [the title](#title).

```console
$ fencegate --config fencegate.yaml &
$ curl -s -o /dev/null -w '%{http_code}\\n' -X PUT -H 'Fencing-Token: 34' \\
    --data 'v34' http://127.0.0.1:8080/objects/hello
201
$ curl -s -X PUT -H 'Fencing-Token: 33' --data 'v33' http://127.0.0.1:8080/objects/hello
{"current":34,"error":"stale_token",...}
$ curl -s http://127.0.0.1:8080/objects/hello
v34
$ curl -s http://127.0.0.1:9901/v1/keys/%2Fobjects%2Fhello
{"key":"/objects/hello","token":34}
$ printf 'a\\nb\\nc\\n'; exit 3
a
...
(exit 3)
```

<!-- not run: shows a command the test cannot run -->
```sh
apt-get install fencegate
```
"""


def check(tmp_path, text):
    if not FENCEGATE:
        pytest.skip("FENCEGATE (the built binary) not set")
    page = tmp_path / "page.md"
    page.write_text(text)
    return run_docs.run_file(str(page), FENCEGATE, str(tmp_path), keep=False)


def test_a_page_that_keeps_every_rule_passes(tmp_path):
    assert check(tmp_path, GOOD) == []


@pytest.mark.parametrize("old,new,message", [
    ("\nv34\n", "\nv35\n", "expected:"),                      # wrong output
    ("(exit 3)", "(exit 4)", "exit 3, expected 4"),            # wrong status
    ("#title)", "#no-such-heading)", "no heading with anchor"),
    ("(#title)", "(missing.md)", "does not exist"),
    ("<!-- not run: shows a command the test cannot run -->\n", "", "without `<!-- not run"),
    ("  - path_prefix: /objects/", "  - path_prefix: /objects/\n    mode: sometimes",
     "refused by --check"),
    ("$ fencegate --config fencegate.yaml &", "$ sleep 1 &", "only fencegate"),
])
def test_each_broken_rule_is_caught(tmp_path, old, new, message):
    assert old in GOOD
    errors = check(tmp_path, GOOD.replace(old, new, 1))
    assert any(message in e for e in errors), errors


def test_a_config_marked_invalid_must_be_refused(tmp_path):
    page = CONFIG.replace("<!-- file: fencegate.yaml -->", "<!-- invalid -->")
    errors = check(tmp_path, page)
    assert any("marked invalid passes --check" in e for e in errors), errors
    bad = page.replace("  - path_prefix: /objects/", "  - path_prefix: /objects/\n    mode: x")
    assert check(tmp_path, bad) == []


def test_transcript_parsing():
    block = run_docs.Block("console", textwrap.dedent("""\
        $ echo a \\
            b
        a b
        $ true""").split("\n"), 1, None)
    assert run_docs.parse_transcript(block) == [("echo a \\\n    b", ["a b"]), ("true", [])]
