"""The documentation holds together: every relative link in README.md and docs/ leads to a file
of the tree (and to a heading of it, where it names one), every page under docs/ is reachable
from the README through such links, no heading carries a date or a "pass", and the README stays
a product page of at most 150 lines with no dated passage."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")
MONTHS = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
DATED = re.compile(
    rf"\b(19|20)\d\d-\d\d-\d\d\b|\b\d{{1,2}} ({MONTHS})[a-z]*\b|\b({MONTHS})[a-z]* \d{{1,2}}\b"
)
PASS = re.compile(
    r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth) pass\b|\bpass\b", re.I
)


def _text(page: Path) -> list[str]:
    """The page's lines outside fenced code."""
    out, fenced = [], False
    for line in page.read_text().splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """A heading's anchor as GitHub writes it: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"`|\*|_(?=\W)|(?<=\W)_", "", heading.lstrip("#").strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _text(page):
        if line.startswith("#"):
            base = slug(line.lstrip("#"))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def _links(page: Path) -> list[str]:
    return [
        target
        for line in _text(page)
        for target in LINK.findall(line)
        if not re.match(r"[a-z]+:", target)  # http:, https:, mailto:
    ]


def test_every_relative_link_leads_somewhere() -> None:
    broken = []
    for page in PAGES:
        for target in _links(page):
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []


def test_every_page_is_reachable_from_the_readme() -> None:
    seen, todo = set(), [ROOT / "README.md"]
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        for target in _links(page):
            dest = (page.parent / target.partition("#")[0]).resolve()
            if dest.suffix == ".md" and dest.exists():
                todo.append(dest)
    assert [p.relative_to(ROOT).as_posix() for p in PAGES if p not in seen] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_heading_carries_a_date_or_a_pass(page: Path) -> None:
    headings = [line for line in _text(page) if line.startswith("#")]
    assert [h for h in headings if DATED.search(h) or PASS.search(h)] == []


def test_the_readme_is_a_product_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150
    assert [line for line in lines if DATED.search(line)] == []


def test_the_date_and_anchor_rules_read_as_meant() -> None:
    assert DATED.search("## Tenth pass (2026-11-27, evening)")
    assert DATED.search("until 27 Nov the window") and DATED.search("on Nov 26")
    assert not DATED.search("Table 10 ms, 14 novel") and not DATED.search("12 instances")
    assert PASS.search("## Second pass on issue 25") and not PASS.search("## Passing a policy")
    assert slug("## What differs from the paper, and why") == "what-differs-from-the-paper-and-why"
    assert slug("### `service.interference`: neighbours") == "serviceinterference-neighbours"
    assert slug("## Apache + php-fpm instances") == "apache--php-fpm-instances"
