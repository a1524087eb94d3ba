"""Reading the project's Markdown (README.md and docs/*.md) the way GitHub renders it: fenced
blocks, links, heading anchors, and the shell commands the docs show. Used by `test_docs.py` and
`test_docs_commands.py`.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELL_LANGS = {"bash", "sh", "shell", "console"}
# the programs whose invocation in an inline code span is a command (the fenced bash blocks are all
# commands)
PROGRAMS = (
    "pytest",
    "behaviortrace",
    "python",
    "pip",
    "torchrun",
    "tox",
    "ruff",
    "accelerate",
    "huggingface-cli",
    ".ci/run",
    "/usr/bin/time",
    "BEHAVIORTRACE_",
)
_FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)\s*$")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_ANCHOR_TAG = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.I)
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def split_fences(text: str) -> tuple[str, list[tuple[str, list[str]]]]:
    """(the prose with every fenced block blanked out, [(language, lines) of each fenced block])."""
    prose: list[str] = []
    blocks: list[tuple[str, list[str]]] = []
    cur: list[str] | None = None
    marker, lang = "", ""
    for line in text.split("\n"):
        m = _FENCE.match(line)
        if cur is None and m:
            cur, marker, lang = [], m.group(1), m.group(2)
        elif cur is not None and line.strip() == marker:
            blocks.append((lang, cur))
            cur = None
        elif cur is not None:
            cur.append(line)
        else:
            prose.append(line)
            continue
        prose.append("")  # keep line numbers
    if cur is not None:
        raise ValueError(f"an unclosed ``` fence (language {lang!r}): close it")
    return "\n".join(prose), blocks


def _without_inline_code(prose: str) -> str:
    return re.sub(r"`[^`]*`", "", prose)


def _strip_comment(line: str) -> str:
    """The line without a trailing shell comment (a # outside quotes, at the start or after a
    space)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def fenced_commands(text: str) -> list[str]:
    """Each command of the file's shell blocks (comments dropped, continuations joined)."""
    out = []
    for lang, lines in split_fences(text)[1]:
        if lang in SHELL_LANGS:
            for line in "\n".join(lines).replace("\\\n", " ").split("\n"):
                cmd = " ".join(_strip_comment(line).split())
                if cmd:
                    out.append(cmd)
    return out


def _is_mention(words: list[str]) -> bool:
    """A program and at most one bare word (`behaviortrace check`, `pytest benchmarks`, `pip
    install`) names a command in a sentence; an option, a path or a second argument makes it a
    command."""
    return len(words) <= 2 and all(re.fullmatch(r"[a-z][\w-]*", w) for w in words[1:])


def inline_commands(text: str) -> list[str]:
    """Inline code spans that invoke one of `PROGRAMS` (see `_is_mention` for what is left out)."""
    prose = split_fences(text)[0]
    spans = (" ".join(m.group(1).split()) for m in re.finditer(r"`([^`]+)`", prose))
    return [s for s in spans if s.startswith(PROGRAMS) and " " in s and not _is_mention(s.split())]


def commands() -> dict[str, list[str]]:
    """{command: [the files that show it]} over README.md and docs/*.md."""
    found: dict[str, list[str]] = {}
    for f in doc_files():
        text = f.read_text()
        for cmd in fenced_commands(text) + inline_commands(text):
            where = found.setdefault(cmd, [])
            if f.name not in where:
                where.append(f.name)
    return found


def links(path: Path) -> list[str]:
    """Every link and image target in the file's prose (not in code)."""
    return [
        m.group(1) for m in _LINK.finditer(_without_inline_code(split_fences(path.read_text())[0]))
    ]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text lower-cased, punctuation dropped, spaces →
    '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors a link into this file may name: its headings' slugs (numbered as GitHub numbers
    repeats) and explicit `<a id="…">` tags."""
    prose = split_fences(path.read_text())[0]
    seen: dict[str, int] = {}
    out = set(_ANCHOR_TAG.findall(prose))
    for line in prose.split("\n"):
        m = _HEADING.match(line)
        if m:
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out
