#!/usr/bin/python3
"""Run the examples of a man page and check what they print.

In the EXAMPLES section, every .EX/.EE block with "$ " lines is a transcript: a line
starting with "$ " is a command (run with bash in a scratch directory that
all the page's examples share, in order, so one may use the files an
earlier one made), and the lines after it, up to the next command or .EE,
are its exact standard output (a command line ending with a backslash or a
pipe goes on on the next line). Roff escapes are undone first (\\- \\e \\(aq \\(dq \\& \\fX).

    man_examples.py PAGE|README.md [FILE...]   (the tools under test must be on PATH;
                                      the FILEs are linked into the scratch
                                      directory, for pages that read them)

Prints "ok - ..." or "not ok - ..." per example and "N examples" last;
exits 1 when an example fails or the page has none. In a Markdown file
(README.md) the transcripts are the indented blocks' "$ " lines."""
import os
import re
import subprocess
import sys
import tempfile

ESCAPES = {"-": "-", "e": "\\", "\\": "\\", "&": "", "(aq": "'", "(dq": '"', "(ga": "`",
           "(ti": "~", "(ha": "^", "(rs": "\\"}


def unroff(line):
    def sub(m):
        s = m.group(1)
        if s.startswith("f"):
            return ""
        if s not in ESCAPES:
            raise ValueError("unknown roff escape \\%s in: %s" % (s, line))
        return ESCAPES[s]
    return re.sub(r"\\(\(..|f.|.)", sub, line)


def examples(path):
    section, inside, out = None, False, []
    for raw in open(path, encoding="utf-8").read().split("\n"):
        if raw.startswith(".SH"):
            section = raw[3:].strip().strip('"')
            continue
        if section != "EXAMPLES":
            continue
        if raw.startswith(".EX"):
            inside, cur = True, None
        elif raw.startswith(".EE"):
            inside = False
        elif inside:
            line = unroff(raw)
            if cur and not cur[1] and cur[0].endswith(("\\", "|")):
                cur[0] += "\n" + line  # the command goes on (bash joins the lines)
            elif line.startswith("$ "):
                cur = [line[2:], []]
                out.append(cur)
            elif cur:  # a block without "$ " lines is not a transcript
                cur[1].append(line)
    return out


def markdown_examples(path):
    """The "    $ command" transcripts of a Markdown file's indented blocks."""
    out, cur = [], None
    for raw in open(path, encoding="utf-8").read().split("\n"):
        if not raw.startswith("    "):
            cur = None
            continue
        line = raw[4:]
        if line.startswith("$ "):
            cur = [line[2:], []]
            out.append(cur)
        elif cur:
            cur[1].append(line)
    return out


def main():
    page = sys.argv[1]
    ex = markdown_examples(page) if page.endswith(".md") else examples(page)
    bad = 0
    scratch = tempfile.TemporaryDirectory()
    for f in sys.argv[2:]:
        os.symlink(os.path.abspath(f), os.path.join(scratch.name, os.path.basename(f)))
    for i, (cmd, want) in enumerate(ex, 1):
        p = subprocess.run(["bash", "-c", cmd], cwd=scratch.name, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)
        got = p.stdout.split("\n")
        if got and got[-1] == "":
            got.pop()
        if got == want:
            print("ok - example %d: %s" % (i, cmd))
        else:
            bad += 1
            print("not ok - example %d: %s" % (i, cmd))
            for w in want:
                print("#   want: %s" % w)
            for g in got:
                print("#   got:  %s" % g)
            for e in p.stderr.split("\n")[:5]:
                print("#   stderr: %s" % e)
    scratch.cleanup()
    print("%d examples" % len(ex))
    return 1 if bad or not ex else 0


if __name__ == "__main__":
    sys.exit(main())
