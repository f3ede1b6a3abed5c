#!/usr/bin/env python3
"""Generate queen_ack's upgrade scripts (docs/operations.md, "Upgrading"; sql/updates/README.md).

SQL has one home: every function, view, grant and comment is written once, in sql/*.sql,
as CREATE OR REPLACE, and reaches a database through the install script pgrx generates
from those files. What cannot be replayed (tables, columns, indexes, data, drops of
changed signatures) is written once per release step, in sql/updates/A--B.sql. An
upgrade script is the concatenation of the steps it crosses followed by the replayable
statements of the target version's install script, so an upgraded database gets exactly
the definitions a fresh install gets (tests/upgrade.sh compares the two catalogs).

    upgrade-scripts.py EXTDIR CURRENT      write EXTDIR/queen_ack--V--CURRENT.sql for every
                                           frozen release V (sql/install/queen_ack--V.sql)
                                           and the released steps between frozen releases
    upgrade-scripts.py --replay FILE       print the replayable part of an install script
    upgrade-scripts.py --split FILE        print each statement's class (for debugging)

Every statement of an install script is classified; a statement of a kind not named
below stops the generation, so nothing is ever silently left out of an upgrade.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UPDATES = os.path.join(ROOT, "sql", "updates")
FROZEN = os.path.join(ROOT, "sql", "install")

# Statements an upgrade re-runs as they are (CREATE becomes CREATE OR REPLACE).
REPLAY = [
    r"CREATE\s+(OR\s+REPLACE\s+)?FUNCTION\b",
    r"CREATE\s+(OR\s+REPLACE\s+)?PROCEDURE\b",
    r"CREATE\s+(OR\s+REPLACE\s+)?VIEW\b",
    r"GRANT\b",
    r"REVOKE\b",
    r"COMMENT\s+ON\b",
    r"ALTER\s+FUNCTION\b",
    r"ALTER\s+PROCEDURE\b",
    r"DO\b",
    r"SET\s+LOCAL\b",
]
# Statements that shape tables and data: written once, in sql/updates/A--B.sql.
SCHEMA = [
    r"CREATE\s+SCHEMA\b",
    r"CREATE\s+(UNLOGGED\s+)?TABLE\b",
    r"CREATE\s+(UNIQUE\s+)?INDEX\b",
    r"CREATE\s+SEQUENCE\b",
    r"CREATE\s+TYPE\b",
    r"ALTER\s+TABLE\b",
    r"ALTER\s+SEQUENCE\b",
    r"INSERT\b",
    r"UPDATE\b",
    r"DELETE\b",
    r"DROP\b",
    r"SELECT\b",
    r"WITH\b",
]


def statements(text):
    """Split SQL text into statements at top-level semicolons, keeping each statement's
    text (with the comments before it) exactly. Knows comments, quoted strings and
    identifiers, E'' strings and dollar quoting."""
    out, start, i, n = [], 0, 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "'":
            prev2 = text[i - 2] if i > 1 else " "
            escapes = i > 0 and text[i - 1] in "eE" and not (prev2.isalnum() or prev2 == "_")
            i += 1
            while i < n:
                if escapes and text[i] == "\\":
                    i += 2
                elif text[i] == "'":
                    if text.startswith("''", i):
                        i += 2
                    else:
                        i += 1
                        break
                else:
                    i += 1
        elif c == '"':
            j = i + 1
            while True:
                j = text.index('"', j)
                if text.startswith('""', j):
                    j += 2
                else:
                    break
            i = j + 1
        elif c == "$":
            m = re.match(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$", text[i:])
            if m and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")):
                tag = m.group(0)
                j = text.find(tag, i + len(tag))
                if j < 0:
                    raise SystemExit("upgrade-scripts: unterminated dollar quote %s" % tag)
                i = j + len(tag)
            else:
                i += 1
        elif c == ";":
            out.append(text[start : i + 1])
            start = i = i + 1
        else:
            i += 1
    rest = text[start:]
    if strip_comments(rest).strip():
        raise SystemExit("upgrade-scripts: text after the last statement: %r" % rest.strip()[:80])
    return out


def strip_comments(stmt):
    """The statement without its leading comments and blank lines."""
    s = stmt
    while True:
        s = s.lstrip()
        if s.startswith("--"):
            j = s.find("\n")
            s = "" if j < 0 else s[j + 1 :]
        elif s.startswith("/*"):
            j = s.find("*/")
            s = "" if j < 0 else s[j + 2 :]
        else:
            return s


def classify(stmt):
    body = strip_comments(stmt)
    for pat in REPLAY:
        if re.match(pat, body, re.I):
            return "replay"
    for pat in SCHEMA:
        if re.match(pat, body, re.I):
            return "schema"
    raise SystemExit("upgrade-scripts: no rule for this statement (add one to scripts/upgrade-scripts.py):\n"
                     + body[:200])


def replay(install_text):
    """The replayable statements of an install script, CREATE made CREATE OR REPLACE."""
    parts = []
    for stmt in statements(install_text):
        if classify(stmt) != "replay":
            continue
        body = strip_comments(stmt)
        lead = stmt[: len(stmt) - len(body)]
        body = re.sub(r"^CREATE\s+(?!OR\s+REPLACE\b)(FUNCTION|PROCEDURE|VIEW)\b",
                      r"CREATE OR REPLACE \1", body, count=1, flags=re.I)
        parts.append(lead + body)
    return "".join(parts).strip() + "\n"


def version_key(v):
    return tuple(int(x) for x in v.split("."))


def update_steps():
    """{from: (to, path)} of sql/updates/A--B.sql."""
    steps = {}
    for name in sorted(os.listdir(UPDATES)):
        m = re.fullmatch(r"(\d+\.\d+\.\d+)--(\d+\.\d+\.\d+)\.sql", name)
        if m:
            steps[m.group(1)] = (m.group(2), os.path.join(UPDATES, name))
    return steps


def chain(frm, to, steps):
    """The update files from `frm` to `to`, in order."""
    files, v = [], frm
    while v != to:
        if v not in steps:
            raise SystemExit("upgrade-scripts: no sql/updates step from %s (towards %s)" % (v, to))
        v, path = steps[v][0], steps[v][1]
        files.append(path)
    return files


def read(path):
    with open(path) as f:
        return f.read()


def script(frm, to, install_text, steps):
    head = ("-- queen_ack %s -> %s, run by ALTER EXTENSION queen_ack UPDATE.\n"
            "-- Generated by scripts/upgrade-scripts.py: never edit. The steps of sql/updates/\n"
            "-- (tables and data), then every function, view, grant and comment of %s's\n"
            "-- install script, replayed (docs/operations.md, \"Upgrading\").\n"
            "\\echo Use \"ALTER EXTENSION queen_ack UPDATE\" to load this file. \\quit\n" % (frm, to, to))
    body = []
    for path in chain(frm, to, steps):
        body.append("\n-- ---- sql/updates/%s\n" % os.path.basename(path))
        body.append(read(path).strip() + "\n")
    body.append("\n-- ---- the definitions of %s, replayed\n" % to)
    body.append(replay(install_text))
    return head + "".join(body)


def frozen_versions():
    out = []
    for name in os.listdir(FROZEN):
        m = re.fullmatch(r"queen_ack--(\d+\.\d+\.\d+)\.sql", name)
        if m:
            out.append(m.group(1))
    return sorted(out, key=version_key)


def generate(extdir, current):
    steps = update_steps()
    install = read(os.path.join(extdir, "queen_ack--%s.sql" % current))
    frozen = [v for v in frozen_versions() if version_key(v) < version_key(current)]
    written = []
    # Every frozen release straight to the version being built.
    for v in frozen:
        written.append(("queen_ack--%s--%s.sql" % (v, current), script(v, current, install, steps)))
    # The released steps between frozen releases, as they shipped in their release.
    for a, b in zip(frozen, frozen[1:]):
        written.append(("queen_ack--%s--%s.sql" % (a, b),
                        script(a, b, read(os.path.join(FROZEN, "queen_ack--%s.sql" % b)), steps)))
    for name, text in written:
        with open(os.path.join(extdir, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(extdir, name), 0o644)
        print(name)


def main(argv):
    if len(argv) == 3 and argv[1] == "--replay":
        sys.stdout.write(replay(read(argv[2])))
    elif len(argv) == 3 and argv[1] == "--split":
        for stmt in statements(read(argv[2])):
            print(classify(stmt), strip_comments(stmt).split("\n")[0][:100])
    elif len(argv) == 3:
        generate(argv[1], argv[2])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
