#!/usr/bin/env python3
"""test_examples.py: every command the documentation shows with its output
still prints that output.

An example is a fenced block whose info string is `console`:

    ```console
    $ ./podsim collective --topology ring:4 --algo ring --bytes 1Ki
    #       size       time(us)  ...   wall(s)
             1Ki          6.011  ...    ~0.000
    ```

A line starting with `$ ` is a command (a line ending in a backslash
continues it on the next); the lines up to the next command or the end of
the block are what it prints, stdout and stderr as a terminal shows them.
Each block runs in a scratch directory that holds a link to every entry of
the project root (podsim, experiments/, plots/, ...) and an empty traces/,
so its commands run as from the root and the files they write (a sweep's
CSV, a trace) are the block's alone.  Commands run with `sh -c` in order
and their exit status is not checked: the output says what went wrong.

Expected output is compared line by line, runs of blanks counting as one
blank and trailing blanks ignored, except for:
  - a line `...` alone, which stands for any number of lines, none included;
  - a number written with a leading `~` (`~0.051`, `~3.48e+03`), a figure
    that depends on the machine (a wall time, events per second): it matches
    any number at that place, so the example can show a typical value.
Nothing else is ignored: a simulated time, a count, a word that changed
fails the example.

A block that must not run (too slow for `make test`, or it needs an
installed tree) is preceded by a line `<!-- example not run: REASON -->`,
the reason required.  Every other `console` block runs, so the figures of
README.md and docs/*.md cannot go stale unnoticed.

With no arguments it also checks README.md's command reference against
the program: every command `podsim --help` lists takes --help (exit 0, a
usage line), and README.md's section `### podsim COMMAND` names every long
option that command's --help lists, so the reference cannot fall behind.

Usage: test_examples.py [FILE.md...]  checks those files (default: README.md
and docs/*.md) and prints TAP, one test per example, for prove; arguments
starting with `--` (prove's --tap) are ignored.  Run with no arguments it
also checks itself on the fixtures of tests/data/examples/: good.md must
pass and stale.md, whose output is wrong, must fail.  $PODSIM names the
binary `./podsim` stands for (default: the root's podsim).

Invariant: nothing is written outside the scratch directories, which are
removed when the check ends.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOT_RUN = re.compile(r"^<!--\s*example not run:\s*(\S.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?%?"
TIMEOUT_S = 60


class Example:
    """One command of a console block: where it is, what it should print."""

    def __init__(self, path, line, block, command):
        self.path, self.line, self.block, self.command = path, line, block, command
        self.expected = []


def parse_examples(path):
    """The blocks of path as (not_run_reason or None, [Example, ...])."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, i, reason = [], 0, None
    while i < len(lines):
        m = NOT_RUN.match(lines[i])
        if m:
            reason = m.group(1)
            i += 1
            continue
        fence = FENCE.match(lines[i])
        if not fence:
            if lines[i].strip():
                reason = None
            i += 1
            continue
        info, indent, start = fence.group(2), fence.group(1), i
        i += 1
        body = []
        while i < len(lines) and not FENCE.match(lines[i]):
            body.append((i + 1, lines[i][len(indent):] if lines[i].startswith(indent) else lines[i]))
            i += 1
        i += 1
        if info == "console":
            blocks.append((reason, split_commands(path, start + 1, body)))
        reason = None
    return blocks


def split_commands(path, block_line, body):
    """The commands of a console block, each with the lines it prints."""
    examples, cur, k = [], None, 0
    while k < len(body):
        number, text = body[k]
        if text.startswith("$ "):
            command = text[2:]
            while command.endswith("\\") and k + 1 < len(body):
                k += 1  # the shell joins a line ending in a backslash to the next
                command = command + "\n" + body[k][1]
            cur = Example(path, number, block_line, command)
            examples.append(cur)
        elif cur is not None:
            cur.expected.append(text)
        k += 1
    for ex in examples:
        while ex.expected and not ex.expected[-1].strip():
            ex.expected.pop()
    return examples


def line_pattern(expected):
    """A regular expression for one expected line: blanks collapse, ~N is
    any number."""
    parts = []
    for token in expected.split():
        pieces = re.split(r"~(" + NUMBER + r")", token)
        rx = ""
        for j, piece in enumerate(pieces):
            rx += NUMBER if j % 2 else re.escape(piece)
        parts.append(rx)
    return re.compile(r"\s*" + r"\s+".join(parts) + r"\s*$")


def matches(expected, actual):
    """Whether the actual lines fit the expected ones (`...` any lines)."""
    pats = [None if e.strip() == "..." else line_pattern(e) for e in expected]
    memo = {}

    def fit(i, j):
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(pats):
            ok = j == len(actual)
        elif pats[i] is None:
            ok = any(fit(i + 1, k) for k in range(j, len(actual) + 1))
        else:
            ok = j < len(actual) and pats[i].match(actual[j]) is not None and fit(i + 1, j + 1)
        memo[(i, j)] = ok
        return ok

    sys.setrecursionlimit(max(10000, 4 * (len(pats) + len(actual))))
    return fit(0, 0)


def scratch_root(podsim):
    """A directory that looks like the project root, with its own traces/."""
    tmp = tempfile.mkdtemp(prefix="podsim-examples.")
    for name in os.listdir(ROOT):
        if name in ("traces", "podsim") or name.startswith("."):
            continue
        os.symlink(os.path.join(ROOT, name), os.path.join(tmp, name))
    os.mkdir(os.path.join(tmp, "traces"))
    os.symlink(podsim, os.path.join(tmp, "podsim"))
    return tmp


def run(command, cwd):
    """What command prints, stdout and stderr interleaved as on a terminal
    (both line-buffered), as lines with trailing blanks removed."""
    env = dict(os.environ, PODSIM_DATA_DIR=cwd)
    # stdbuf preloads a library; an AddressSanitizer build (check-asan) must
    # be told that its runtime need not come first
    asan = env.get("ASAN_OPTIONS", "")
    env["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "verify_asan_link_order=0"
    stdbuf = shutil.which("stdbuf")
    argv = ([stdbuf, "-oL", "-eL"] if stdbuf else []) + ["sh", "-c", command]
    try:
        out = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, timeout=TIMEOUT_S).stdout
    except subprocess.TimeoutExpired:
        return ["(timed out after %d s)" % TIMEOUT_S]
    text = out.decode("utf-8", "replace").rstrip("\n")
    return [l.rstrip() for l in text.split("\n")] if text else []


def check_files(paths, podsim, report):
    """Runs every example of paths; report(ok, name, detail) for each.
    The number of failures."""
    failed = 0
    for path in paths:
        rel = os.path.relpath(path, ROOT)
        for reason, examples in parse_examples(path):
            if reason is not None:
                for ex in examples:
                    report(True, "%s:%d $ %s" % (rel, ex.line, ex.command.split("\n")[0].rstrip(" \\")),
                           None, skip="not run: " + reason)
                continue
            cwd = scratch_root(podsim)
            try:
                for ex in examples:
                    actual = run(ex.command, cwd)
                    ok = matches(ex.expected, actual)
                    failed += not ok
                    report(ok, "%s:%d $ %s" % (rel, ex.line, ex.command.split("\n")[0].rstrip(" \\")),
                           None if ok else (ex.expected, actual))
            finally:
                shutil.rmtree(cwd, ignore_errors=True)
    return failed


class Tap:
    """TAP lines for prove, numbered as they come; the plan at the end."""

    def __init__(self):
        self.n = 0

    def __call__(self, ok, name, detail, skip=None):
        self.n += 1
        print("%s %d - %s%s" % ("ok" if ok else "not ok", self.n, name.replace("#", "\\#"),
                                " # SKIP " + skip.replace("#", "") if skip else ""))
        if detail:
            expected, actual = detail
            print("# expected:")
            for l in expected:
                print("#   " + l)
            print("# got:")
            for l in actual[:60]:
                print("#   " + l)
        sys.stdout.flush()


def self_check(podsim, tap):
    """The checker on its fixtures: good.md passes, stale.md fails."""
    fixtures = os.path.join(ROOT, "tests", "data", "examples")
    quiet = lambda ok, name, detail, skip=None: None
    good = check_files([os.path.join(fixtures, "good.md")], podsim, quiet)
    tap(good == 0, "fixture good.md: %d failures (expected 0)" % good, None)
    stale = check_files([os.path.join(fixtures, "stale.md")], podsim, quiet)
    tap(stale == 1, "fixture stale.md: %d failures (expected 1)" % stale, None)
    return (good != 0) + (stale != 1)


def help_text(podsim, args):
    """What `podsim ARGS --help` prints, and its exit status."""
    r = subprocess.run([podsim] + args + ["--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=TIMEOUT_S)
    return r.stdout.decode("utf-8", "replace"), r.returncode


def check_reference(podsim, tap):
    """Every command has --help; README.md documents each of its options."""
    top, _ = help_text(podsim, [])
    commands = re.findall(r"^  ([a-z]+) ", top.split("Commands:", 1)[-1], re.M)
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    failed = 0
    for cmd in commands:
        text, rc = help_text(podsim, [cmd])
        ok = rc == 0 and text.startswith("Usage")
        failed += not ok
        tap(ok, "podsim %s --help: exit %d, %s" % (cmd, rc, text.split("\n")[0][:60]), None)
        m = re.search(r"^### podsim %s\b.*?(?=^##)" % cmd, readme, re.M | re.S)
        section = m.group(0) if m else ""
        options = sorted(set(re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z-]*)", text, re.M)) - {"--help"})
        missing = [o for o in options if o not in section]
        failed += bool(missing) or not m
        tap(m is not None and not missing, "README.md '### podsim %s' documents %s%s"
            % (cmd, ", ".join(options) or "its usage",
               "; missing: " + ", ".join(missing) if missing else ""), None)
    ok = len(commands) >= 9 and "takes --help" in top
    failed += not ok
    tap(ok, "podsim --help lists %d commands and says every one takes --help" % len(commands), None)
    return failed


def main(argv):
    # prove passes the suites' shared options (--tap, -m thorough): only
    # Markdown paths name files to check.
    files = [a for a in argv[1:] if a.endswith(".md")]
    podsim = os.path.abspath(os.environ.get("PODSIM") or os.path.join(ROOT, "podsim"))
    if not os.access(podsim, os.X_OK):
        print("1..0 # SKIP %s is not built" % podsim)
        return 0
    tap = Tap()
    failed = 0
    if not files:
        failed += self_check(podsim, tap)
        failed += check_reference(podsim, tap)
        files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    failed += check_files([os.path.abspath(f) for f in files], podsim, tap)
    print("1..%d" % tap.n)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
