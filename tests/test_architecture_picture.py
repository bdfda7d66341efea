"""docs/architecture.svg, the picture in docs/layout.md, is what docs/architecture.py writes,
and every module or folder a box names exists in tfinit/ (the picture cannot drift)."""

import importlib.util

from conftest import REPO


def _picture_module():
    spec = importlib.util.spec_from_file_location("architecture", REPO / "docs" / "architecture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_picture_on_disk_is_the_one_the_script_writes():
    picture = _picture_module()
    assert (REPO / "docs" / "architecture.svg").read_text() == picture.render(), (
        "docs/architecture.svg is stale: run `python docs/architecture.py`")


def test_every_box_names_modules_that_exist():
    missing = [path for path in _picture_module().paths()
               if not (REPO / "tfinit" / path).exists()]
    assert not missing, f"the picture names modules that tfinit/ lacks: {missing}"


def test_the_picture_is_linked_from_the_first_pages():
    assert "architecture.svg" in (REPO / "docs" / "layout.md").read_text()
    for page in ("README.md", "docs/index.md"):
        head = "\n".join((REPO / page).read_text().splitlines()[:30])
        assert "layout.md" in head, f"{page}'s first screen does not send a newcomer to layout.md"
