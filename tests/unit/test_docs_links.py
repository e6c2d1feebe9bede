"""The README is a front door (#40): at most 150 lines, and every link in it and in docs/ stays
inside the repository and reaches a file (and a heading, where it names one) that is there. The
repository paths the pages name in backticks exist too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
TOP = ("protocol", "coordinator", "worker", "inspector", "agent", "reports", "tests", "bench", "ansible", "examples")
PATH = re.compile(rf"`((?:{'|'.join(TOP)})/[^`\s]*)`")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, no punctuation but - and _, spaces to -."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)}


def prose(page: Path) -> str:
    """The page without its fenced blocks (code, where a link is no link)."""
    return re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)


def test_the_readme_is_at_most_150_lines() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


def test_the_readme_still_holds_set_up_command_1_where_ci_reads_it() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# 1. "))
    command = next(line for line in lines[start + 1 :] if not line.startswith("#"))
    assert command.endswith("maestro demo")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_stays_inside_the_repository_and_reaches_what_it_names(page: Path) -> None:
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z]+://", target):  # third parties' pages
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        inside = resolved.is_relative_to(ROOT) and resolved.exists()
        if not inside or (anchor and resolved.suffix == ".md" and anchor not in anchors(resolved)):
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_repository_paths_a_page_names_exist(page: Path) -> None:
    missing = [
        p for p in PATH.findall(page.read_text()) if not any(c in p for c in "*<>{}…") and not (ROOT / p).exists()
    ]
    assert not missing, f"{page.name}: {missing}"


def test_no_page_points_at_the_design_outside_the_repository() -> None:
    for page in PAGES:
        assert "../shared" not in page.read_text(), page.name
