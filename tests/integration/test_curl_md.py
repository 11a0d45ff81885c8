"""docs/curl.md runs as pasted and answers what it shows, byte for byte.

Every ```sh block of docs/curl.md runs, in order, in one bash process in a
scratch directory, against the real build/attnd (--workers 2, as the page
assumes for the config's instance count), with A pointing at it; the first
block (which sets A for the page's reader) is replaced by that.  The lines
of a block that start with '#' are what it prints: each block's standard
output must be exactly those lines, '# ' taken off.  A block that prints
nothing shows no such lines.
"""

import os
import re
import shutil
import subprocess
import tempfile
import unittest

import harness

DOC = os.path.join(harness.ROOT, "docs", "curl.md")
BLOCK_RE = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
MARK = "@@attnd-curl-md-block@@"


def blocks():
    with open(DOC) as f:
        return BLOCK_RE.findall(f.read())


def expected(block):
    out = []
    for line in block.splitlines():
        if line.startswith("# "):
            out.append(line[2:])
        elif line == "#":
            out.append("")
    return out


class CurlMdTest(harness.ServerTestCase):
    server_args = ("--workers", "2")

    def test_every_block_answers_as_shown(self):
        if not shutil.which("curl"):
            raise AssertionError("curl is missing: make deps")
        found = blocks()
        self.assertGreater(len(found), 10, "docs/curl.md blocks")
        self.assertIn("A=http://127.0.0.1:8000", found[0])
        script = ["set -u", "A=http://%s:%d" % (self.srv.host, self.srv.port)]
        for n, b in enumerate(found[1:], 1):
            script.append("echo '%s %d'" % (MARK, n))
            script.append(b)
        work = tempfile.mkdtemp(prefix="attnd-curl-md-")
        try:
            p = subprocess.run(["bash", "-c", "\n".join(script)], cwd=work,
                               capture_output=True, text=True, timeout=300)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        got = {}
        current = None
        for line in p.stdout.split("\n"):
            if line.startswith(MARK):
                current = int(line.split()[1])
                got[current] = []
            elif current is not None:
                got[current].append(line)
        last = got.get(len(found) - 1)
        if last and last[-1] == "":
            last.pop()  # the newline that ends the output
        for n, b in enumerate(found[1:], 1):
            self.assertEqual(got.get(n), expected(b), "docs/curl.md block %d:\n%s" % (n, b))


if __name__ == "__main__":
    harness.main()
