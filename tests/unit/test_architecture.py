"""docs/architecture.md's table of folders names every package folder of shardcron/, and nothing else."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_map_names_every_folder_of_the_package():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = page.split("<!-- folders:", 1)[1]
    mapped = set(re.findall(r"^\| `(\w+)/` \|", table, re.M))
    packages = {p.parent.name for p in (ROOT / "shardcron").glob("*/__init__.py")}
    assert mapped == packages, (
        f"docs/architecture.md maps {sorted(mapped - packages)} that shardcron/ lacks, "
        f"and lacks {sorted(packages - mapped)}"
    )


def test_the_layer_drawing_and_the_import_contract_agree():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    drawing = page.split("```", 2)[1]
    drawn = set(re.findall(r"\b([a-z_0-9]+)\b", drawing)) & {
        p.parent.name for p in (ROOT / "shardcron").glob("*/__init__.py")
    }
    contract = (ROOT / "pyproject.toml").read_text(encoding="utf-8").split("[tool.importlinter]", 1)[1]
    layered = set(re.findall(r"shardcron\.(\w+)", contract.split("[[tool.importlinter.contracts]]")[1]))
    packages = {p.parent.name for p in (ROOT / "shardcron").glob("*/__init__.py")}
    assert drawn == packages, f"the drawing lacks {sorted(packages - drawn)}"
    assert packages <= layered, f"the import contract's layers lack {sorted(packages - layered)}"


def test_the_how_it_works_tree_names_every_folder_of_the_package():
    page = (ROOT / "docs" / "explanation" / "how-it-works.md").read_text(encoding="utf-8")
    tree = page.split("\n```\n", 1)[1].split("```", 1)[0]
    named = set(re.findall(r"\b([a-z_0-9]+)/", tree)) - {"shardcron"}
    packages = {p.parent.name for p in (ROOT / "shardcron").glob("*/__init__.py")}
    assert named == packages, (
        f"docs/explanation/how-it-works.md's tree names {sorted(named - packages)} extra "
        f"and lacks {sorted(packages - named)}"
    )
