#!/usr/bin/env python3
"""Checks README.md and docs/**/*.md of a disco checkout (Python 3 standard library only).

    python3 tests/docs/check_docs.py REPO_ROOT

(a) Links and images: every relative target exists (file or directory, relative to the page),
    and every #anchor, on the same page or in page.md#anchor, is the slug of a heading of that
    page. Slugs follow GitHub: the heading's text (links reduced to their text, backticks and
    asterisks dropped), lowercase, every character other than a letter, digit, space, '-' or '_'
    dropped, spaces turned into '-'; a repeated slug gets -1, -2, ... Links inside code (fenced
    blocks, inline code) are not links. http(s):, mailto: and other schemes are not checked.
(b) README.md has at most 250 lines.
(c) In ```bash / ```sh / ```shell blocks, every word that starts with ./launch/, launch/, tests/,
    bench/, jobs/ or examples/ names a path of the checkout. A word that starts with build/ names
    a build output: its last component must be a name that some CMakeLists.txt declares, as
    add_executable(NAME ...), add_library(NAME ...), add_custom_target(NAME ...) or OUTPUT_NAME
    NAME. Not checked: build/X where X is a directory of the checkout (build/python), a last
    component with a dot (out.csv, lib.so), the words of a VAR=value assignment, and words with
    placeholders (<, >, ..., *, $).
(d) Launcher options: in code (blocks and inline spans), each --option that follows
    launch/disco-run, disco-run or ./launch/X, up to '--', a word with a '/', or the end of the
    command (;, |, &&, #), must appear in that script's text (launch/disco-run for disco-run).

(e) Every other Markdown file of the checkout (tests/README.md, bench/sim/README.md, ...) has its
    links and anchors checked as in (a).
(f) No text file of the checkout (code comments, scripts, docs, tests) refers to a file outside
    the repository: the original design document (an upper-case DESIGN, then .md; the project's
    own is docs/design.md), or a path into the shared folder beside the checkout (a parent
    directory's shared/, or shared/ followed by findings). Binary files are skipped, and so are
    this checker and its self-test, which must name what they look for.
(g) In those text files but Markdown (whose links are (a)'s and (e)'s), a doc named by its path
    from the top of the checkout (docs/NAME.md or docs/NAME.md#anchor, as code comments cite
    them) exists, and the anchor is the slug of one of its headings.

The files of the checkout are those git tracks (git ls-files) when REPO_ROOT is a git work tree,
else every file under it but hidden directories and top-level build* directories.

Each problem is printed as FILE:LINE: what. Exit 1 if there are any, else 0 with a summary.
"""
import os
import re
import subprocess
import sys

README_MAX_LINES = 250
PATH_PREFIXES = ("./launch/", "launch/", "tests/", "bench/", "jobs/", "examples/")
SHELL_LANGS = {"bash", "sh", "shell"}

LINK_RE = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF_RE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HEADING_RE = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ID_RE = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)
FENCE_RE = re.compile(r"^\s{0,3}(```+|~~~+)\s*([A-Za-z0-9_+-]*)")
INLINE_CODE_RE = re.compile(r"(`+)(.+?)\1")
CMAKE_NAME_RE = re.compile(
    r"\b(?:add_executable|add_library|add_custom_target)\s*\(\s*([A-Za-z0-9_.+-]+)"
    r"|\bOUTPUT_NAME\s+\"?([A-Za-z0-9_.+-]+)", re.I)
# Written so that these lines do not match themselves.
OUTSIDE_RE = re.compile(r"\bDESIGN\.md\b|\.\./shared/|\bshared/findings\b")
DOC_MENTION_RE = re.compile(r"(?<![\w./-])(docs/[\w/-]+\.md)(?:#([\w-]+))?")
SELF_FILES = ("tests/docs/check_docs.py", "tests/docs/check_docs_test.py")
LAUNCH_RE = re.compile(r"(?<![\w./-])(?:\./)?(launch/[A-Za-z0-9_.-]+|disco-run)(?![\w./-])")


def slug(text):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: its text
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


class Page:
    """A Markdown file split into prose lines (code blanked out) and code blocks."""

    def __init__(self, path):
        self.path = path
        with open(path, encoding="utf-8") as f:
            self.lines = f.read().split("\n")
        if self.lines and self.lines[-1] == "":
            self.lines.pop()
        self.prose = []   # (lineno, text with inline code removed)
        self.code = []    # (lineno, lang or None for inline, text)
        self.anchors = set()
        counts = {}
        fence, lang = None, ""
        for n, line in enumerate(self.lines, 1):
            m = FENCE_RE.match(line)
            if fence is not None:
                if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                        and not m.group(2):
                    fence = None
                else:
                    self.code.append((n, lang, line))
                continue
            if m:
                fence, lang = m.group(1), m.group(2).lower()
                continue
            for span in INLINE_CODE_RE.finditer(line):
                self.code.append((n, None, span.group(2)))
            prose = INLINE_CODE_RE.sub(lambda s: " " * len(s.group(0)), line)
            self.prose.append((n, prose))
            h = HEADING_RE.match(line)
            if h:
                s = slug(h.group(2))
                k = counts.get(s, 0)
                counts[s] = k + 1
                self.anchors.add(s if k == 0 else "%s-%d" % (s, k))
            for a in HTML_ID_RE.findall(line):
                self.anchors.add(a)


class Checker:
    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.problems = []
        self.pages = {}
        self._cmake_names = None
        self._script_text = {}

    def rel(self, path):
        return os.path.relpath(path, self.root)

    def report(self, path, line, what):
        self.problems.append("%s:%d: %s" % (self.rel(path), line, what))

    def page(self, path):
        path = os.path.normpath(path)
        if path not in self.pages:
            self.pages[path] = Page(path)
        return self.pages[path]

    def markdown_files(self):
        files = []
        readme = os.path.join(self.root, "README.md")
        if os.path.isfile(readme):
            files.append(readme)
        else:
            self.problems.append("README.md:0: missing")
        for dirpath, dirnames, filenames in os.walk(os.path.join(self.root, "docs")):
            dirnames.sort()
            files += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".md")]
        return files

    def checkout_files(self):
        """Relative paths of the checkout's files: git's tracked files, or a walk."""
        if os.path.exists(os.path.join(self.root, ".git")):
            try:
                out = subprocess.run(["git", "-C", self.root, "ls-files", "-z"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     check=True).stdout
                return sorted(p for p in out.decode("utf-8", "replace").split("\0") if p)
            except (OSError, subprocess.CalledProcessError):
                pass
        files = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")
                                 and not (dirpath == self.root and d.startswith("build")))
            files += [self.rel(os.path.join(dirpath, f)) for f in filenames]
        return sorted(files)

    # (f) references to files outside the repository
    def check_outside_refs(self, rel):
        if rel in SELF_FILES:
            return
        path = os.path.join(self.root, rel)
        if os.path.islink(path) or not os.path.isfile(path):
            return
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data[:8192]:
            return  # binary
        for n, line in enumerate(data.decode("utf-8", "replace").split("\n"), 1):
            for m in OUTSIDE_RE.finditer(line):
                self.report(path, n, "refers to %s, a file outside the repository: point it at "
                                     "docs/design.md, another doc or a header, or drop it"
                            % m.group(0))
            if not rel.endswith(".md"):  # Markdown links are (a)'s and (e)'s
                for m in DOC_MENTION_RE.finditer(line):
                    self.check_doc_mention(path, n, m.group(1), m.group(2))

    # (g) docs/NAME.md[#anchor] named from the top of the checkout
    def check_doc_mention(self, path, n, doc, anchor):
        dest = os.path.join(self.root, doc)
        if not os.path.isfile(dest):
            self.report(path, n, "names %s, which does not exist" % doc)
        elif anchor and anchor not in self.page(dest).anchors:
            self.report(path, n, "names %s#%s, but %s has no such heading" % (doc, anchor, doc))

    # (a) links, images and anchors
    def check_links(self, path):
        page = self.page(path)
        for n, text in page.prose:
            targets = [m.group(2) for m in LINK_RE.finditer(text)]
            m = REF_DEF_RE.match(text)
            if m:
                targets.append(m.group(1))
            for target in targets:
                self.check_target(path, n, target)

    def check_target(self, path, n, target):
        if not target or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith("//"):
            return
        file_part, _, anchor = target.partition("#")
        if file_part:
            if file_part.startswith("/"):
                dest = os.path.join(self.root, file_part.lstrip("/"))
            else:
                dest = os.path.join(os.path.dirname(path), file_part)
            dest = os.path.normpath(dest)
            if not os.path.exists(dest):
                self.report(path, n, "broken link: %s (no %s)" % (target, self.rel(dest)))
                return
        else:
            dest = path
        if anchor and dest.endswith(".md") and os.path.isfile(dest):
            if anchor not in self.page(dest).anchors:
                self.report(path, n, "bad anchor: %s (no such heading in %s)"
                            % (target, self.rel(dest)))

    # (c) paths of the commands in shell blocks
    def cmake_names(self):
        if self._cmake_names is None:
            names = set()
            for dirpath, dirnames, filenames in os.walk(self.root):
                dirnames[:] = [d for d in dirnames if not d.startswith(".")
                               and not (dirpath == self.root and d.startswith("build"))]
                if "CMakeLists.txt" in filenames:
                    with open(os.path.join(dirpath, "CMakeLists.txt"), encoding="utf-8",
                              errors="replace") as f:
                        for m in CMAKE_NAME_RE.finditer(f.read()):
                            names.add(m.group(1) or m.group(2))
            self._cmake_names = names
        return self._cmake_names

    def check_commands(self, path):
        page = self.page(path)
        for n, lang, line in page.code:
            if lang not in SHELL_LANGS:
                continue
            for word in shell_words(line):
                if "=" in word.split("/")[0]:
                    continue  # VAR=value
                if any(c in word for c in "<>*$") or "..." in word:
                    continue
                if word.startswith("build/"):
                    self.check_build_word(path, n, word)
                elif word.startswith(PATH_PREFIXES):
                    rel = word[2:] if word.startswith("./") else word
                    if not os.path.exists(os.path.join(self.root, rel)):
                        self.report(path, n, "command names a missing file: %s" % word)

    def check_build_word(self, path, n, word):
        parts = [p for p in word.split("/") if p]
        if len(parts) < 2:
            return
        name = parts[-1]
        if word.endswith("/") or "." in name:
            return  # a directory, or a file such as out.csv or lib.so
        if name in self.cmake_names():
            return
        if os.path.isdir(os.path.join(self.root, *parts[1:])):
            return  # build/python and the like mirror a source directory
        self.report(path, n, "command names %s, but no CMakeLists.txt declares a target or "
                             "OUTPUT_NAME '%s'" % (word, name))

    # (d) launcher options
    def script_text(self, script):
        if script not in self._script_text:
            p = os.path.join(self.root, script)
            try:
                with open(p, encoding="utf-8", errors="replace") as f:
                    self._script_text[script] = f.read()
            except OSError:
                self._script_text[script] = None
        return self._script_text[script]

    def check_options(self, path):
        page = self.page(path)
        for n, _lang, text in page.code:
            for m in LAUNCH_RE.finditer(text):
                script = "launch/disco-run" if m.group(1) == "disco-run" else m.group(1)
                body = self.script_text(script)
                if body is None:
                    continue  # a missing script is (c)'s problem
                for opt in options_after(text[m.end():]):
                    if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(opt), body):
                        self.report(path, n, "%s: option %s does not appear in %s"
                                    % (m.group(0), opt, script))

    def run(self):
        files = self.markdown_files()
        for path in files:
            self.check_links(path)
            self.check_commands(path)
            self.check_options(path)
        others = []
        for rel in self.checkout_files():
            path = os.path.normpath(os.path.join(self.root, rel))
            if rel.endswith(".md") and path not in files and os.path.isfile(path):
                self.check_links(path)  # (e)
                others.append(path)
            self.check_outside_refs(rel)
        readme = os.path.join(self.root, "README.md")
        if os.path.isfile(readme):
            count = len(self.page(readme).lines)
            if count > README_MAX_LINES:
                self.report(readme, count, "README.md has %d lines, more than %d"
                            % (count, README_MAX_LINES))
        return files + others


def shell_words(line):
    """The words of one shell line, comments dropped, quotes and brackets stripped."""
    line = re.sub(r"(^|\s)#.*$", "", line)
    words = []
    for w in re.split(r"[\s;|&()]+", line):
        w = w.strip("'\"`[]{},")
        if w:
            words.append(w)
    return words


def options_after(rest):
    """The --options right after a launcher, up to --, a path, or the end of the command."""
    opts = []
    for w in rest.split():
        if w in ("--", "#") or w[0] in ";|&#`":
            break
        w = w.strip("[]")
        if not w:
            continue
        if w.startswith("--"):
            opts.append(w.split("=", 1)[0])
        elif "/" in w:
            break
    return opts


def main(argv):
    if len(argv) != 2:
        print("usage: check_docs.py REPO_ROOT", file=sys.stderr)
        return 2
    checker = Checker(argv[1])
    files = checker.run()
    for p in checker.problems:
        print(p)
    if checker.problems:
        print("check_docs: %d problem(s) in %d file(s)" % (len(checker.problems), len(files)),
              file=sys.stderr)
        return 1
    print("check_docs: %d Markdown files OK (links, anchors, README length, command paths, "
          "launcher options); no reference to a file outside the repository or to a missing doc"
          % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
