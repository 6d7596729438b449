"""README.md stays a short front page: at most 250 lines, its two commands first, and every link it makes
into the repository (the documentation site's pages above all) names a file that exists.

The site itself is checked by `mkdocs build --strict` (`make docs-check`, which `make test` runs): a broken
link or anchor, or a page left out of mkdocs.yml's nav, fails it.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_at_most_250_lines():
    lines = README.count("\n")
    assert lines <= 250, f"README.md has {lines} lines; move the detail into a page of docs/ and link it"


def test_the_readme_starts_with_make_dev_and_make_test():
    first_block = README.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in first_block.splitlines()]
    assert commands == ["make dev", "make test"]


def test_every_relative_link_of_the_readme_names_a_file():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    relative = [link for link in links if "://" not in link]
    assert relative, "the README links into the documentation"
    missing = [link for link in relative if not (ROOT / link).is_file()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_readme_links_the_celery_beat_tutorial():
    assert "(docs/tutorials/replacing-celery-beat.md)" in README


def test_the_sections_the_site_home_includes_are_marked():
    # docs/index.md includes these by pymdownx.snippets; a missing marker would leave the home page without them.
    home = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    for name in re.findall(r'--8<-- "README\.md:(\w+)"', home):
        assert f"<!-- --8<-- [start:{name}] -->" in README, name
        assert f"<!-- --8<-- [end:{name}] -->" in README, name
