#!/usr/bin/env python3
"""Every reference to a document under docs/ names a file and a section that exist.

    docs_links_test.py REPO_DIR

Scans the repository's sources, scripts, chart and documents (not build
directories, node_modules or .git) for
  - docs/NAME (a document or image): the file must exist;
  - docs/NAME.md, "Title" (the project's way of naming a section, in prose
    and comments, the title possibly wrapped over comment lines): NAME.md
    must have a heading that is Title or starts with it;
  - docs/NAME.md#anchor, and in README.md and docs/*.md every relative
    Markdown link [text](path#anchor): the file must exist and the anchor
    must be a heading's GitHub anchor.
Prints one line per broken reference (file:line: what) and a last line
"docs_links: N references, all resolve" (exit 0) or "... B broken" (exit 1).
"""
import os
import re
import sys

SKIP_DIRS = {".git", "node_modules", "corpus", "golden", "__pycache__"}
SUFFIXES = (".md", ".h", ".cc", ".py", ".sh", ".txt", ".yaml", ".yml", ".json", ".tpl",
            ".gnuplot", ".mjs", ".go", ".proto")
NAMES = {"Makefile", "Dockerfile", "CMakeLists.txt", "NOTES.txt"}

DOC_REF = re.compile(r"docs/([A-Za-z0-9_.-]+\.(?:md|png))(#[A-Za-z0-9_-]+)?")
# docs/NAME.md, "Title" or `docs/NAME.md`, "Title"; the title may wrap over
# comment lines ("// ", "# ", "* ").
SECTION_REF = re.compile(r"docs/([A-Za-z0-9_.-]+\.md)`?\)?,\s*(?:(?://|#+|\*)\s*)?\"([^\"]{1,160})\"")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")


def source_files(repo):
    for root, dirs, files in os.walk(repo):
        rel = os.path.relpath(root, repo)
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not (rel == "." and d.startswith("build"))]
        for name in files:
            if name.endswith(SUFFIXES) or name in NAMES:
                yield os.path.join(root, name)


def slug(title):
    """GitHub's anchor for a heading."""
    title = re.sub(r"[`*_]", "", title.strip().lower())
    title = re.sub(r"[^\w\- ]", "", title)
    return title.replace(" ", "-")


def headings(path, cache={}):
    if path not in cache:
        titles, in_code = [], False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("```"):
                    in_code = not in_code
                elif not in_code and re.match(r"#{1,6} ", line):
                    titles.append(line.split(" ", 1)[1].strip())
        cache[path] = titles
    return cache[path]


def anchors(path):
    seen, out = {}, set()
    for t in headings(path):
        s = slug(t)
        n = seen.get(s, 0)
        out.add(s if n == 0 else f"{s}-{n}")
        seen[s] = n + 1
    return out


def plain(title):
    return re.sub(r"[`*]", "", re.sub(r"\s+", " ", title)).strip()


def main(argv):
    if len(argv) != 2:
        print("usage: docs_links_test.py REPO_DIR", file=sys.stderr)
        return 2
    repo = os.path.abspath(argv[1])
    docs = os.path.join(repo, "docs")
    refs, broken = 0, []

    def check_anchor(where, target, anchor):
        if anchor and anchor not in anchors(target):
            broken.append(f"{where}: {os.path.relpath(target, repo)} has no heading with anchor #{anchor}")

    for path in sorted(source_files(repo)):
        try:
            text = open(path, encoding="utf-8").read()
        except UnicodeDecodeError:
            continue
        rel = os.path.relpath(path, repo)
        if rel == os.path.join("tests", "docs_links_test.py"):
            continue  # its docstring shows the forms
        line_of = lambda pos: f"{rel}:{text.count(chr(10), 0, pos) + 1}"
        for m in DOC_REF.finditer(text):
            refs += 1
            target = os.path.join(docs, m.group(1))
            if not os.path.exists(target):
                broken.append(f"{line_of(m.start())}: docs/{m.group(1)} does not exist")
            elif m.group(2):
                check_anchor(line_of(m.start()), target, m.group(2)[1:])
        for m in SECTION_REF.finditer(text):
            target = os.path.join(docs, m.group(1))
            if not os.path.exists(target):
                continue  # reported above
            # Strip the comment markers of a title wrapped over lines.
            title = plain(re.sub(r"\n\s*(?://+|#+|\*)?", " ", m.group(2)))
            if not any(plain(h).startswith(title) for h in headings(target)):
                broken.append(f'{line_of(m.start())}: docs/{m.group(1)} has no section "{title}"')
        if rel == "README.md" or (rel.startswith("docs" + os.sep) and rel.endswith(".md")):
            for m in MD_LINK.finditer(text):
                link = m.group(1)
                if re.match(r"[a-z]+:", link):
                    continue
                refs += 1
                file_part, _, anchor = link.partition("#")
                target = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                if not os.path.exists(target):
                    broken.append(f"{line_of(m.start())}: link {link} names a missing file")
                elif anchor and target.endswith(".md"):
                    check_anchor(line_of(m.start()), target, anchor)
    for b in broken:
        print(f"docs_links: {b}")
    if broken:
        print(f"docs_links: {refs} references, {len(broken)} broken")
        return 1
    print(f"docs_links: {refs} references, all resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
