"""griffe extension: tfinit's Keras-style ``Example:`` sections, as the reference shows them.

tfinit's docstrings follow Keras: ``Example:`` at the docstring's own indentation, then the
doctest (``>>>`` lines and their output; ``tests/test_docs.py`` runs them). The Google
parser knows only an indented ``Examples:`` section, so without this the examples would
render as Markdown quotes. The section, to the next section title or the end, is renamed
``Examples:`` and indented; the docstrings themselves are left as they are.
"""

import re

import griffe

_EXAMPLE = re.compile(r"^Examples?:\s*$")
_SECTION = re.compile(
    r"^(Args|Arguments|Returns|Raises|Yields|Attributes|Note|Notes|Warning|Warnings|"
    r"References|See Also|Examples?):\s*$"
)


def keras_examples_to_google(text):
    """``text`` with each unindented ``Example:`` section made a Google ``Examples:`` one."""
    out, inside = [], False
    for line in text.splitlines():
        if _EXAMPLE.match(line):
            out.append("Examples:")
            inside = True
        elif inside and _SECTION.match(line):
            out.append(line)
            inside = False
        else:
            out.append("    " + line if inside and line.strip() else line)
    return "\n".join(out)


class KerasExamples(griffe.Extension):
    """Rewrite the docstring of every object griffe loads (see the module docstring)."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = keras_examples_to_google(obj.docstring.value)
