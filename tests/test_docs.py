"""The README and docs/: a README a newcomer can read (under 200 lines), every doc reachable from
it, and every relative link and #anchor resolving to a file and a heading (or an `<a id>`) that
exists."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from markdown_docs import PROGRAMS, ROOT, anchors, doc_files, links, slug, split_fences

README_MAX_LINES = (
    199  # issue 24: the README stays under 200 lines; the rest of the documentation is in docs/
)
FILES = doc_files()


def test_the_readme_stays_under_200_lines():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= README_MAX_LINES, (
        f"README.md has {n} lines (at most {README_MAX_LINES}): move the detail into a file "
        "under docs/ and "
        "link it from the README's Documentation section"
    )


def test_every_doc_is_linked_from_the_readme():
    linked = {
        (ROOT / t.split("#")[0]).resolve() for t in links(ROOT / "README.md") if not _external(t)
    }
    orphans = [f.name for f in FILES[1:] if f.resolve() not in linked]
    assert not orphans, (
        f"docs not linked from README.md (add them to its Documentation section): {orphans}"
    )


def _external(target: str) -> bool:
    return target.startswith(("http://", "https://", "mailto:"))


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_every_relative_link_and_anchor_resolves(path: Path):
    broken = []
    for target in links(path):
        if _external(target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(
                f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}"
            )
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: {dest.name} has no heading or <a id> with anchor #{anchor}")
    assert not broken, f"{path.name}: broken links:\n" + "\n".join(broken)


def test_the_slugs_follow_github():
    assert (
        slug("Interruptions, parallel sessions, damaged caches")
        == "interruptions-parallel-sessions-damaged-caches"
    )
    assert slug("The paper scale (GPUs)") == "the-paper-scale-gpus"
    assert slug("What `metagrad` costs") == "what-metagrad-costs"
    assert slug("Operations: running the suite") == "operations-running-the-suite"


def test_a_broken_anchor_is_caught(tmp_path):
    (tmp_path / "a.md").write_text(
        '# Title\n\n## Two words\n\n<a id="x"></a>\n\n```\n# not a heading\n```\n'
    )
    assert anchors(tmp_path / "a.md") == {"title", "two-words", "x"}
    (tmp_path / "b.md").write_text("[ok](a.md#two-words) [bad](a.md#nope) `[code](c.md)`\n")
    assert links(tmp_path / "b.md") == ["a.md#two-words", "a.md#nope"]


def test_fences_are_closed_and_commands_are_fenced_as_bash():
    """A command shown as an indented block or a ``` block without a language escapes the command
    test (test_docs_commands.py reads the bash blocks): every code block names its language."""
    bare = []
    for f in FILES:
        for lang, lines in split_fences(f.read_text())[1]:
            if not lang:
                bare.append(f"{f.name}: a ``` block without a language, starting {lines[:1]}")
    assert not bare, "\n".join(bare)


def test_no_command_hides_in_an_indented_block():
    """An indented code block is not read as commands: a command shown that way must be fenced."""
    hidden = [
        f"{f.name}:{i}: {line.strip()}"
        for f in FILES
        for i, line in enumerate(split_fences(f.read_text())[0].split("\n"), 1)
        if line.startswith("    ") and line.strip().startswith(PROGRAMS)
    ]
    assert not hidden, "fence these commands as ```bash blocks:\n" + "\n".join(hidden)


def test_no_doc_or_link_target_is_git_ignored():
    """A doc or an image the docs link to that .gitignore matches exists here but not in a clone
    (docs/scorecard.md was: `scorecard.md` is ignored as a suite output)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    paths = {f.relative_to(ROOT) for f in FILES}
    for f in FILES:
        for target in links(f):
            part = target.partition("#")[0]
            if part and not _external(target):
                dest = (f.parent / part).resolve()
                if dest.is_relative_to(ROOT) and dest.exists():
                    paths.add(dest.relative_to(ROOT))
    res = subprocess.run(
        ["git", "check-ignore", "--no-index", *map(str, sorted(paths))],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    ignored = res.stdout.split()
    assert not ignored, (
        f"git ignores these docs or link targets (rename them or fix .gitignore): {ignored}"
    )
