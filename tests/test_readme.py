"""The README is the front door: its two commands are the ones CI and a newcomer run, and
its Python examples and those of the guides in docs/ run.

The examples of one page run in order in one namespace (a later block may use what an
earlier one made), in an empty working directory. Blocks fenced as ```python run; output,
shell sessions and tables are fenced otherwise.
"""

import re

import pytest
from conftest import REPO

pytestmark = pytest.mark.backend_neutral  # runs on JAX too: CI's JAX pass selects it

#: the pages whose ```python blocks run here (docs/caffe2-ops.md and caffe2-semantics.md
#: have none)
PAGES = [
    "README.md",
    "docs/fills-and-initializers.md",
    "docs/mixed-precision.md",
    "docs/caffe2-import.md",
]


def _bash_blocks(text):
    return re.findall(r"```bash\n(.*?)\n```", text, flags=re.S)


def _python_blocks(text):
    return re.findall(r"```python\n(.*?)\n```", text, flags=re.S)


def test_readme_opens_with_the_demo_and_test_commands_and_ci_runs_the_test_one():
    blocks = _bash_blocks((REPO / "README.md").read_text())
    demo, tests = blocks[0], blocks[1]
    assert "pip install" in demo and ".venv/bin/tfinit demo" in demo
    assert 'pip install -q -e ".[test]"' in tests and "pytest" in tests
    assert tests in (REPO / ".ci" / "run").read_text()


def test_readme_is_a_front_door_that_links_every_guide():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    guides = sorted(p.name for p in (REPO / "docs").glob("*.md") if p.name != "index.md")
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)", readme))
    assert not set(guides) - linked, linked


@pytest.mark.slow  # fits small models: over 1 s on 2 cores
@pytest.mark.tensorflow_only  # the pages show the fp32-master scope and create_param
@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run(page, tmp_path, monkeypatch):
    blocks = _python_blocks((REPO / page).read_text())
    assert blocks, f"{page} has no ```python examples"
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__example__"}
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"{page}, python block {number}", "exec"), namespace)  # noqa: S102
