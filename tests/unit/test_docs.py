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


def test_the_settings_page_gives_every_setting_with_its_default():
    from django_workflows.foundations.conf import DEFAULTS

    page = (REPOSITORY / "docs" / "reference" / "settings.md").read_text()
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \| [^|]+ \| ([^|]+) \|", page, re.M))
    assert set(rows) == set(DEFAULTS)
    for key, default in DEFAULTS.items():
        if isinstance(default, (int, float, str)) and not isinstance(default, bool):
            assert repr(default).strip("'") in rows[key].replace('"', ""), key


def test_the_checks_page_gives_every_check_id():
    source = "".join(path.read_text() for path in (REPOSITORY / "django_workflows").rglob("*.py"))
    ids = set(re.findall(r'id="django_workflows\.([EW]\d{3})"', source))
    page = (REPOSITORY / "docs" / "reference" / "checks.md").read_text()
    assert ids and ids == set(re.findall(r"^\| `([EW]\d{3})` \|", page, re.M))


def test_the_errors_page_gives_every_error_and_api_code():
    import inspect

    import django_workflows

    page = (REPOSITORY / "docs" / "reference" / "errors-and-api-codes.md").read_text()
    errors = [getattr(django_workflows, name) for name in django_workflows.__all__
              if inspect.isclass(getattr(django_workflows, name, None))
              and issubclass(getattr(django_workflows, name), BaseException)]
    for error in errors:
        assert f"`{error.__name__}`" in page, error.__name__
        if getattr(error, "code", "invalid") != "invalid":
            assert f"`{error.code}` | {error.http_status}" in page or f"(`{error.code}`" in page, error
