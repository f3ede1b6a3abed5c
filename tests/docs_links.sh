#!/usr/bin/env bash
# Every relative link of the documentation points at something that exists: for each
# Markdown file (README.md, CHANGELOG.md, docs/*.md and the READMEs of subdirectories),
# every `[text](target)` and `![alt](target)` whose target is not a URL must name an
# existing file or directory, and a `#fragment` must name a heading of the target page
# (GitHub's anchor rule). And the Grafana dashboard of docs/grafana queries only series
# the broker exports. Needs no database. Prints one cargo-style line per file and a
# result line.
#   tests/docs_links.sh
set -uo pipefail
cd "$(dirname "$0")/.."
python3 - <<'PY'
import glob, json, os, re, sys

def anchors(path, cache={}):
    """The heading anchors of a Markdown file, as GitHub derives them."""
    if path not in cache:
        seen, out, fence = {}, set(), False
        for line in open(path, encoding="utf-8"):
            if line.startswith("```"):
                fence = not fence
            m = None if fence else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
        cache[path] = out
    return cache[path]

files = ["README.md", "CHANGELOG.md"] + sorted(glob.glob("docs/*.md")) + sorted(
    p for p in glob.glob("*/**/README.md", recursive=True)
    if not p.startswith(("target/", "node_modules/")))
passed = failed = 0
for md in files:
    name = re.sub(r"\W", "_", md[:-3])
    if not os.path.exists(md):
        print(f"test docs::links_in_{name} ... FAILED\n    the file is missing")
        failed += 1
        continue
    text, bad = open(md, encoding="utf-8").read(), []
    # Code blocks and inline code hold examples, not links.
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    for target in re.findall(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # http:, https:, mailto:
        path, _, frag = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
        if not os.path.exists(dest):
            bad.append(f"{target}: no such file {dest}")
        elif frag and dest.endswith(".md") and frag not in anchors(dest):
            bad.append(f"{target}: no heading #{frag} in {dest}")
    if bad:
        failed += 1
        print(f"test docs::links_in_{name} ... FAILED")
        for b in bad:
            print(f"    {b}")
    else:
        passed += 1
        print(f"test docs::links_in_{name} ... ok")
# The Grafana dashboard (docs/grafana/queen-broker.json) queries only series the broker
# exports: every queen_* name in its expressions appears in the broker's exposition code.
exported = set()
for src in glob.glob("broker/src/ops/*.rs"):
    exported |= set(re.findall(r'"(queen_[a-z_]+)', open(src, encoding="utf-8").read()))
dash = json.load(open("docs/grafana/queen-broker.json", encoding="utf-8"))
exprs = [t["expr"] for pn in dash["panels"] for t in pn.get("targets", [])]
unknown = sorted({n for e in exprs for n in re.findall(r"queen_[a-z_]+", e)} - exported)
if unknown or not exprs:
    failed += 1
    print("test docs::grafana_dashboard_queries_exported_series ... FAILED")
    print(f"    not exported by the broker: {unknown}" if unknown else "    no query")
else:
    passed += 1
    print("test docs::grafana_dashboard_queries_exported_series ... ok")
print(f"test result: {'ok' if failed == 0 else 'FAILED'}. {passed} passed; {failed} failed")
sys.exit(1 if failed else 0)
PY
