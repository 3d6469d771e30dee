"""Every relative link in the README and under ``docs/`` reaches a file that exists, and
every ``#anchor`` names a heading of the page it points to (GitHub's slugs), so a reader who
follows a pointer lands where it says. Fast and without services: the pages are read as text.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.support.paths import ROOT

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.DOTALL | re.MULTILINE)
INLINE_CODE = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]+(?:\([^()\s]*\))?)>?"
                  r"(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$", re.MULTILINE)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, …


def pages(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted(p for p in (root / "docs").rglob("*.md")
                                        if "node_modules" not in p.parts)]


def prose(text: str) -> str:
    """The page without its code: fenced blocks and inline code hold no links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text as shown (link text, no markup), lowercased,
    punctuation dropped (letters, digits, ``_`` and ``-`` stay), each space a ``-``."""
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings; a repeated heading gets ``-1``, ``-2``, …"""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, title in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    text = prose(page.read_text(encoding="utf-8"))
    return [*LINK.findall(text), *REFERENCE.findall(text)]


def broken(page: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of the page that leads nowhere, with why."""
    wrong: list[str] = []
    for target in links(page):
        if EXTERNAL.match(target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / unquote(path)).resolve() if path else page
        if not dest.exists():
            wrong.append(f"{target}: no file {dest.relative_to(root)}"
                         if dest.is_relative_to(root) else f"{target}: outside the repository")
        elif anchor and dest.suffix == ".md" and unquote(anchor).lower() not in anchors(dest):
            wrong.append(f"{target}: no heading #{anchor} in {dest.relative_to(root)}")
        elif anchor and dest.suffix != ".md":
            wrong.append(f"{target}: an anchor into a file that is not a page")
    return wrong


def test_the_pages_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in pages()}
    assert {"README.md", "docs/benchmarks.md", "docs/layout.md"} <= names


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert broken(page) == []


@pytest.mark.parametrize(("heading", "anchor"), [
    ("Five-minute tour", "five-minute-tour"),
    ("Lifecycle, history and provenance", "lifecycle-history-and-provenance"),
    ("How a record is written (format versions)", "how-a-record-is-written-format-versions"),
    ("Topics: the public contract", "topics-the-public-contract"),
    ("The `memstream ui` page", "the-memstream-ui-page"),
    ("Results — at a glance", "results--at-a-glance"),
    ("See [the CLI](cli.md) first", "see-the-cli-first"),
    ("Log size, 2026-11-26", "log-size-2026-11-26"),
])
def test_slugs_follow_github(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_the_check_sees_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Its part\n\n## Its part\n",
                                            encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text(
        "[fine](docs/a.md#its-part) [again](docs/a.md#its-part-1) [self](#top) [web](https://x.y/z)\n"
        "[gone](docs/b.md) [no part](docs/a.md#other) `[code](docs/c.md)`\n\n"
        "```sh\n[block](docs/d.md)\n```\n\n# Top\n", encoding="utf-8")
    assert broken(readme, tmp_path) == ["docs/b.md: no file docs/b.md",
                                        "docs/a.md#other: no heading #other in docs/a.md"]
