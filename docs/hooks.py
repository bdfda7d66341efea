"""mkdocs hook: every public name is in the API reference.

For each module a page of ``docs/reference/`` documents (``::: module``), every name of
that module's ``__all__`` (read from its source, without importing it: the reference
builds without TensorFlow) must have its anchor, ``module.name``, on the built page. A
missing one is a warning, which ``mkdocs build --strict`` turns into a failed build.
"""

import ast
import logging
import re
from pathlib import Path

log = logging.getLogger("mkdocs.hooks.check_reference")
ROOT = Path(__file__).resolve().parents[1]
_DIRECTIVE = re.compile(r"^:::\s+([\w.]+)", re.M)
_ANCHOR = re.compile(r'\bid="([\w.]+)"')
_anchors = {}


def declared_names(module):
    """The string literals of ``module.__all__`` (assigned or ``+=``), from its source."""
    path = ROOT.joinpath(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    if not path.is_file():  # a directive for one object, not a module
        return []
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AugAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                names += [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    return names


def on_page_content(html, page, config, files):
    """Record the anchors of each reference page, by the modules it documents."""
    if page.file.src_uri.startswith("reference/"):
        for module in _DIRECTIVE.findall(page.file.content_string):
            _anchors.setdefault(module, set()).update(_ANCHOR.findall(html))
    return html


def on_post_build(config):
    """Warn for every name of a documented module's ``__all__`` the reference lacks."""
    if not _anchors:
        log.warning("docs/reference/ documents no module (no '::: module' directive)")
    for module, anchors in sorted(_anchors.items()):
        for name in declared_names(module):
            if f"{module}.{name}" not in anchors:
                log.warning("%s.%s is in %s.__all__ but not in the API reference",
                            module, name, module)
