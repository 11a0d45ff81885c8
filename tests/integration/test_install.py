"""attnd on a plain host: `make install`, the man page and the systemd unit.

  * `make install DESTDIR=$tmp PREFIX=/usr` installs exactly bin/attnd,
    share/man/man1/attnd.1 and lib/systemd/system/attnd.service, with the
    right modes, ExecStart pointing at the installed binary, which runs;
    the default PREFIX is /usr/local; `make uninstall` removes them all.
  * deploy/attnd.1 renders with `man -l` and groff without a warning, and
    names every flag of `attnd --help` with its default and variable, every
    /v1 field of proto/v1/json_v1.c's table (docs/api.md too), the signals and
    the exit statuses, which are checked against the binary; the README's
    table has a row for every flag; --help's texts start in their column.
  * the unit passes `systemd-analyze verify` (syntax, unknown keys, the
    ExecStart binary - the copy installed under DESTDIR - and the man page
    of Documentation=, found through MANPATH in DESTDIR), and broken copies
    fail it; `systemd-analyze security --offline` rates its hardening
    (exposure at most 2.0 of 10); its Environment= settings start the
    installed binary, and SIGTERM, the unit's KillSignal, stops it with 0
    within TimeoutStopSec.
No systemd runs here: systemd-analyze checks the unit offline.  Where groff
cannot format at all (Docker's debian:*-slim images keep groff-base's data
out of /usr/share/groff), the man page's tests skip saying so, and the unit
is verified with --man=no.
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import harness

ROOT = harness.ROOT
UNIT = os.path.join(ROOT, "deploy", "systemd", "attnd.service")
MAN = os.path.join(ROOT, "deploy", "attnd.1")


def run(cmd, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 300)
    return subprocess.run(cmd, **kw)


def groff_problem():
    """None when groff formats a man page here, else why not.  Docker's
    debian:*-slim images have a dpkg path-exclude for /usr/share/groff, so
    groff-base installs without its devices and macros."""
    p = run(["groff", "-man", "-Tutf8", "-z"], input=".TH X 1\n.SH NAME\nx\n")
    if p.returncode == 0 and not p.stderr:
        return None
    why = "groff cannot format a man page here (%s)" % " ".join(p.stderr.split()[:12])
    cfg = "/etc/dpkg/dpkg.cfg.d"
    for name in sorted(os.listdir(cfg)) if os.path.isdir(cfg) else ():
        with open(os.path.join(cfg, name)) as f:
            if re.search(r"(?m)^path-exclude\s+/usr/share/groff", f.read()):
                why += ("; %s/%s keeps /usr/share/groff out, as in debian:*-slim images: "
                        "drop that line and reinstall groff-base to check the man page"
                        % (cfg, name))
    return why


GROFF_PROBLEM = groff_problem()


def v1_fields():
    """The /v1 fields, from proto/v1/json_v1.c's field_names table."""
    with open(os.path.join(ROOT, "proto", "v1", "json_v1.c")) as f:
        src = f.read()
    table = re.search(r"field_names\[F_COUNT\] = \{(.*?)\};", src, re.S).group(1)
    return re.findall(r'"(\w+)"', table)


def files_under(d):
    out = {}
    for base, _, names in os.walk(d):
        for n in names:
            p = os.path.join(base, n)
            out[os.path.relpath(p, d)] = os.stat(p).st_mode & 0o7777
    return out


def unit_settings(text):
    """{(section, key): [values]} of a unit file."""
    section, out = None, {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        k, _, v = line.partition("=")
        out.setdefault((section, k.strip()), []).append(v.strip())
    return out


def size_bytes(v):
    m = re.fullmatch(r"(\d+)([KMGT]?)", v)
    assert m, v
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[m.group(2)]


class InstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnd-install-")
        cls.dest = os.path.join(cls.tmp, "root")
        p = run(["make", "-s", "--no-print-directory", "-C", ROOT, "install",
                 "DESTDIR=" + cls.dest, "PREFIX=/usr"])
        if p.returncode != 0:
            raise AssertionError("make install failed:\n" + p.stdout + p.stderr)
        cls.bin = os.path.join(cls.dest, "usr", "bin", "attnd")
        cls.unit = os.path.join(cls.dest, "usr", "lib", "systemd", "system", "attnd.service")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # ---- make install / uninstall ----

    def test_installs_exactly_the_expected_files(self):
        self.assertEqual(files_under(self.dest), {
            "usr/bin/attnd": 0o755,
            "usr/share/man/man1/attnd.1": 0o644,
            "usr/lib/systemd/system/attnd.service": 0o644})
        with open(self.bin, "rb") as a, open(os.path.join(ROOT, "build", "attnd"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        with open(MAN) as a, open(os.path.join(self.dest, "usr/share/man/man1/attnd.1")) as b:
            self.assertEqual(a.read(), b.read())
        p = run([self.bin, "--version"])
        self.assertEqual(p.returncode, 0)
        self.assertRegex(p.stdout, r"^attnd \d+\.\d+\.\d+\n"
                                   r"libmicrohttpd \d+\.\d+\.\d+, libuv \d+\.\d+\.\d+, "
                                   r"cJSON \d+\.\d+\.\d+\nOpenBLAS \d+\.\d+\.\d+.*\n"
                                   r"kernels: fp32 (avx512|blas), "
                                   r"bf16 (amx-bf16|avx512bf16|avx512|blas)\n$")

    def test_unit_execstart_is_the_installed_binary(self):
        installed = unit_settings(open(self.unit).read())
        self.assertEqual(installed[("Service", "ExecStart")], ["/usr/bin/attnd"])
        source = unit_settings(open(UNIT).read())
        source.pop(("Service", "ExecStart"))
        installed.pop(("Service", "ExecStart"))
        self.assertEqual(installed, source)

    def test_default_prefix_and_uninstall(self):
        dest = os.path.join(self.tmp, "default")
        p = run(["make", "-s", "--no-print-directory", "-C", ROOT, "install", "DESTDIR=" + dest])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sorted(files_under(dest)), [
            "usr/local/bin/attnd", "usr/local/lib/systemd/system/attnd.service",
            "usr/local/share/man/man1/attnd.1"])
        self.assertIn("ExecStart=/usr/local/bin/attnd\n",
                      open(os.path.join(dest, "usr/local/lib/systemd/system/attnd.service")).read())
        p = run(["make", "-s", "--no-print-directory", "-C", ROOT, "uninstall",
                 "DESTDIR=" + dest])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(files_under(dest), {})

    # ---- the man page ----

    def render(self):
        if GROFF_PROBLEM:
            self.skipTest(GROFF_PROBLEM)
        p = run(["man", "-l", MAN], env=dict(os.environ, MANWIDTH="200", MAN_KEEP_FORMATTING="",
                                               LC_ALL="C.UTF-8"))
        self.assertEqual(p.returncode, 0, p.stderr)
        # man -l pipes through col -b when not on a terminal: plain text;
        # words hyphenated at a line end are joined again
        return re.sub(r"\u2010\n\s*", "", p.stdout)

    def test_man_page_renders_without_warnings(self):
        text = self.render()
        for heading in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "ENVIRONMENT",
                        "SIGNALS", "EXIT STATUS", "FILES", "EXAMPLES", "SEE ALSO"):
            self.assertRegex(text, r"(?m)^%s$" % heading)
        p = run(["groff", "-man", "-ww", "-z", MAN])
        self.assertEqual((p.returncode, p.stderr), (0, ""))
        p = run(["man", "--warnings", "-l", MAN], env=dict(os.environ, LC_ALL="C.UTF-8"))
        self.assertEqual((p.returncode, p.stderr), (0, ""))

    def test_man_page_documents_every_flag_default_and_variable(self):
        text = self.render()
        help_text = run([os.path.join(ROOT, "build", "attnd"), "--help"]).stdout
        # A description may wrap onto further lines before the "default" one.
        opts = re.findall(r"^  (--[a-z-]+)(?: \S+)?\s+.*\n(?: {20,}(?!default ).*\n)*"
                          r"\s+default (.*), env (ATTND_\w+)$", help_text, re.M)
        self.assertGreaterEqual(len(opts), 15)
        self.assertEqual(len(opts), len(re.findall(r"\benv ATTND_", help_text)),
                         "an option of --help was not parsed")
        paragraphs = {}
        # Within OPTIONS alone: elsewhere a wrapped line may start with a flag
        # too (where it wraps depends on groff's release).
        options = text.split("\nOPTIONS\n")[1].split("\nENVIRONMENT\n")[0]
        for m in re.finditer(r"(?m)^ {7}(--[a-z-]+)[^\n]*\n((?: {14}[^\n]*\n|\n)+)", options):
            paragraphs[m.group(1)] = " ".join(m.group(2).split())
        for flag, default, env in opts:
            self.assertIn(flag, paragraphs, flag + " has no paragraph in OPTIONS")
            para = paragraphs[flag]
            self.assertIn("Variable " + env + ".", para, flag)
            if default == "cores":
                self.assertIn("number of online processors", para, flag)
            elif default == "none":
                self.assertTrue("empty" in para or "wins over" in para, flag)
            else:
                self.assertRegex(para, r"Default %s\b" % re.escape(default), flag)
            env_section = text.split("\nENVIRONMENT\n")[1].split("\nHTTP API\n")[0]
            self.assertIn(env, env_section)
        for flag in ("--probe", "--help", "--version"):
            self.assertIn(flag, help_text)
            self.assertIn(flag, paragraphs)
        for word in ("SIGTERM", "SIGINT", "SIGPIPE", "Retry-After", "/openapi.json",
                     "/v2/models/"):
            self.assertIn(word, text)

    def test_every_v1_field_in_the_man_page_and_api_md(self):
        """proto/v1/json_v1.c's field table, the one /v1 reads, is the source:
        each field is named in the man page's POST /v1/attention and in
        docs/api.md's POST /v1/attention section."""
        fields = v1_fields()
        self.assertGreaterEqual(len(fields), 24)
        text = self.render()
        v1 = text.split("\nHTTP API\n")[1].split("GET /v2,")[0]
        with open(os.path.join(ROOT, "docs", "api.md")) as f:
            api = f.read().split("\n## POST /v1/attention\n")[1].split("\n## ")[0]
        for name in fields:
            self.assertRegex(v1, r"\b%s\b" % name, name + " is missing from attnd(1)")
            self.assertIn("`%s`" % name, api, name + " is missing from docs/api.md")

    def test_every_flag_in_the_readme_table(self):
        """Each flag of --help has its row in the README's table, with its
        variable."""
        help_text = run([os.path.join(ROOT, "build", "attnd"), "--help"]).stdout
        opts = re.findall(r"^  (--[a-z-]+)(?: \S+)?\s+.*\n(?: {20,}(?!default ).*\n)*"
                          r"\s+default (.*), env (ATTND_\w+)$", help_text, re.M)
        self.assertGreaterEqual(len(opts), 30)
        with open(os.path.join(ROOT, "README.md")) as f:
            rows = {flag: m.group(2) for m in
                    re.finditer(r"(?m)^\| (`--[^|]*) \|(.*)$", f.read())
                    for flag in re.findall(r"`(--[a-z-]+)`", m.group(1))}
        for flag, default, env in opts:
            self.assertIn(flag, rows, flag + " has no row in the README's table")
            self.assertIn("`%s`" % env, rows[flag], flag)

    def test_help_text_starts_in_its_column(self):
        """Every option's text starts at column 25, a long name's on the
        next line: no name runs into its description."""
        help_text = run([os.path.join(ROOT, "build", "attnd"), "--help"]).stdout
        lines = help_text.splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"^  (--[a-z-]+(?: [A-Z]+)?)( *)(.*)$", line)
            if not m:
                continue
            if m.group(3):
                self.assertEqual(len(line) - len(m.group(3)), 25, line)
            else:
                self.assertRegex(lines[i + 1], r"^ {25}\S", line)

    def test_exit_statuses(self):
        exe = os.path.join(ROOT, "build", "attnd")
        self.assertEqual(run([exe, "--help"]).returncode, 0)
        self.assertEqual(run([exe, "--no-such-flag"]).returncode, 2)
        self.assertEqual(run([exe, "--port", "70000"]).returncode, 2)
        self.assertEqual(run([exe], env=dict(os.environ, ATTND_WORKERS="0")).returncode, 2)
        self.assertEqual(run([exe, "--token-file", "/nonexistent"]).returncode, 2)
        self.assertEqual(run([exe, "stray"]).returncode, 2)
        # nothing listens on a port that was just free
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        self.assertEqual(run([exe, "--probe", "--port", str(port)]).returncode, 1)
        # the port is taken: cannot start
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        try:
            p = run([exe, "--port", str(s.getsockname()[1]), "--workers", "1"], timeout=30)
            self.assertEqual(p.returncode, 1, p.stderr)
        finally:
            s.close()
        with harness.Attnd(["--workers", "1"]) as srv:
            self.assertEqual(run([exe, "--probe", "--port", str(srv.port)]).returncode, 0)
            self.assertEqual(srv.stop(), 0)

    def test_the_release_binary_has_no_test_hooks(self):
        # Failure injection is built into build/attnd-test alone: the
        # release binary neither knows the variable nor fails a request.
        with open(os.path.join(ROOT, "build", "attnd"), "rb") as f:
            self.assertNotIn(b"ATTND_FAIL_ALLOC_AT", f.read())
        with open(harness.TEST_BINARY, "rb") as f:
            self.assertIn(b"ATTND_FAIL_ALLOC_AT", f.read())
        with harness.Attnd(["--workers", "1"], env={"ATTND_FAIL_ALLOC_AT": "1+"}) as srv:
            for _ in range(3):
                status, _, body = srv.request("POST", "/v1/attention",
                                              b'{"query": [[[1]]], "key": [[[1]]], '
                                              b'"value": [[[2]]]}')
                self.assertEqual((status, body), (200, b'{"output":[[[2]]],"weights":[[[1]]]}'))
            self.assertNotIn("ATTND_FAIL_ALLOC_AT", "".join(srv.log))
            self.assertEqual(srv.stop(), 0)

    def test_man_page_documents_the_exit_statuses(self):
        """EXIT STATUS lists 0, 1 and 2: the statuses test_exit_statuses sees."""
        statuses = self.render().split("\nEXIT STATUS\n")[1].split("\nFILES\n")[0]
        self.assertEqual(re.findall(r"(?m)^ {7}(\d+) ", statuses), ["0", "1", "2"])

    # ---- the systemd unit ----

    def verify(self, unit_text, name="attnd.service", manpath=None):
        d = tempfile.mkdtemp(dir=self.tmp)
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(unit_text)
        env = dict(os.environ, MANPATH=manpath or os.path.join(self.dest, "usr", "share", "man"),
                   SYSTEMD_LOG_COLOR="0", SYSTEMD_PAGER="")
        man = ["--man=no"] if GROFF_PROBLEM else []
        return run(["systemd-analyze", "verify"] + man + [path], env=env)

    def staged_unit(self):
        """The installed unit with ExecStart at the DESTDIR copy of the binary."""
        text = open(self.unit).read()
        self.assertIn("\nExecStart=/usr/bin/attnd\n", text)
        return text.replace("\nExecStart=/usr/bin/attnd\n", "\nExecStart=%s\n" % self.bin)

    def test_systemd_analyze_verify(self):
        p = self.verify(self.staged_unit())
        self.assertEqual((p.returncode, p.stdout, p.stderr), (0, "", ""))

    def test_verify_rejects_broken_units(self):
        good = self.staged_unit()
        broken = {
            "a missing binary": good.replace("ExecStart=" + self.bin,
                                             "ExecStart=" + self.bin + "-missing"),
            "a misspelt key": good.replace("ProtectSystem=strict", "ProtectSytem=strict"),
            "a bad Type": good.replace("Type=exec", "Type=exce"),
            "a bad MemoryMax": good.replace("MemoryMax=", "MemoryMax=lots"),
        }
        for what, text in broken.items():
            self.assertNotEqual(text, good, what)
            p = self.verify(text)
            self.assertTrue(p.returncode != 0 or p.stderr, what)

    def test_verify_checks_the_documentation_man_page(self):
        if GROFF_PROBLEM:
            self.skipTest(GROFF_PROBLEM)
        empty = tempfile.mkdtemp(dir=self.tmp)
        p = self.verify(self.staged_unit(), manpath=empty)
        self.assertNotEqual(p.returncode, 0, "the man page of Documentation= was not checked")
        self.assertIn("man attnd(1)", p.stderr)

    def test_hardening(self):
        s = unit_settings(open(UNIT).read())
        svc = lambda k: s.get(("Service", k), [None])[-1]  # noqa: E731
        self.assertIn(svc("Type"), ("simple", "exec"))
        for key, want in (("DynamicUser", "yes"), ("ProtectSystem", "strict"),
                          ("NoNewPrivileges", "yes"), ("ProtectHome", "yes"),
                          ("PrivateTmp", "yes"), ("PrivateDevices", "yes"),
                          ("CapabilityBoundingSet", ""), ("RestrictNamespaces", "yes"),
                          ("MemoryDenyWriteExecute", "yes"), ("KillSignal", "SIGTERM"),
                          ("SystemCallArchitectures", "native")):
            self.assertEqual(svc(key), want, key)
        self.assertEqual(s[("Install", "WantedBy")], ["multi-user.target"])
        p = run(["ldd", self.bin])
        self.assertNotIn("libsystemd", p.stdout)
        staged = os.path.join(tempfile.mkdtemp(dir=self.tmp), "attnd.service")
        with open(staged, "w") as f:
            f.write(self.staged_unit())
        p = run(["systemd-analyze", "security", "--offline=true", "--threshold=20", staged],
                env=dict(os.environ, SYSTEMD_LOG_COLOR="0", SYSTEMD_PAGER=""))
        self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr)
        level = re.search(r"Overall exposure level for attnd.service: ([\d.]+)", p.stdout)
        self.assertTrue(level, p.stdout[-500:])
        self.assertLessEqual(float(level.group(1)), 2.0)

    def test_unit_environment_starts_the_binary_and_sigterm_stops_it(self):
        s = unit_settings(open(self.unit).read())
        env = {}
        for line in s[("Service", "Environment")]:
            for assignment in line.split():
                k, _, v = assignment.partition("=")
                env[k] = v
        self.assertEqual(env.get("ATTND_HOST"), "127.0.0.1")
        inflight = int(env["ATTND_MAX_INFLIGHT_MB"]) << 20
        body = int(env.get("ATTND_MAX_BODY_MB", "64")) << 20
        self.assertGreaterEqual(size_bytes(s[("Service", "MemoryMax")][-1]),
                                inflight + body + (128 << 20))
        stop_s = int(s[("Service", "TimeoutStopSec")][-1])
        drain = int(env["ATTND_DRAIN_DELAY_MS"]) / 1000 + int(env["ATTND_DRAIN_S"])
        self.assertGreater(stop_s, drain)
        env["ATTND_PORT"] = "0"  # the unit's 8000 may be taken on this machine
        proc = subprocess.Popen([s[("Service", "ExecStart")][-1].replace(
            "/usr/bin/attnd", self.bin)], env=dict(os.environ, **env),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            line = proc.stderr.readline()
            self.assertRegex(line, r"listening on 127\.0\.0\.1:\d+")
            port = int(re.search(r":(\d+)", line).group(1))
            self.assertEqual(run([self.bin, "--probe", "--port", str(port)]).returncode, 0)
            t0 = time.time()
            proc.send_signal(getattr(signal, s[("Service", "KillSignal")][-1]))
            self.assertEqual(proc.wait(stop_s), 0)
            self.assertLess(time.time() - t0, stop_s)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stderr.close()


if __name__ == "__main__":
    harness.main()
