"""The README's two commands are the ones CI and a newcomer run."""

import re

from conftest import REPO


def _bash_blocks(text):
    return re.findall(r"```bash\n(.*?)\n```", text, flags=re.S)


def test_readme_opens_with_the_demo_and_test_commands_and_ci_runs_the_test_one():
    blocks = _bash_blocks((REPO / "README.md").read_text())
    demo, tests = blocks[0], blocks[1]
    assert "pip install" in demo and ".venv/bin/tfinit" in demo
    assert 'pip install -q -e ".[test]"' in tests and "pytest" in tests
    assert tests in (REPO / ".ci" / "run").read_text()
