"""The examples printed in the contributor READMEs, read back for the tests that run them."""

from __future__ import annotations

import re
from pathlib import Path


def python_block(readme: Path, heading: str) -> str:
    """The first ```python block after ``heading`` in ``readme``."""
    text = readme.read_text()
    after = text[text.index(heading) :]
    match = re.search(r"```python\n(.*?)```", after, re.S)
    assert match, f"no python block after {heading!r} in {readme}"
    return match.group(1)
