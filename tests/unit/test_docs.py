"""The README stays a front page: short, and every link it gives leads to a page of docs/."""

import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
README = REPOSITORY / "README.md"


def test_the_readme_is_short():
    assert len(README.read_text()) < 8000


def test_every_relative_link_of_the_readme_leads_to_a_file():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    relative = [link for link in links if "://" not in link]
    assert relative
    missing = [link for link in relative if not (REPOSITORY / link).is_file()]
    assert missing == []


def test_every_page_of_the_site_is_linked_from_the_readme():
    linked = set(re.findall(r"\]\((docs/[^)#]+\.md)", README.read_text()))
    pages = {str(page.relative_to(REPOSITORY)) for page in (REPOSITORY / "docs").rglob("*.md")}
    assert pages - linked <= {"docs/index.md"}
