"""The framework tests skip a framework whose own openai pin excludes the installed openai."""

from __future__ import annotations

import pytest
from framework_support import excluding_pin

PYDANTIC_AI = ['openai>=3.31.0; extra == "openai"', 'openai>=3.31.0; extra == "cerebras"']


@pytest.mark.parametrize(
    ("requirements", "installed", "extra", "expected"),
    [
        pytest.param(["openai<4,>=3.0.0"], "2.54.0", "", "<4,>=3.0.0", id="agents-on-2x"),
        pytest.param(["openai<4,>=3.0.0"], "3.60.0", "", None, id="agents-on-3x"),
        pytest.param(PYDANTIC_AI, "2.54.0", "openai", ">=3.31.0", id="extra-pin-on-2x"),
        pytest.param(PYDANTIC_AI, "2.54.0", "", None, id="other-extras-ignored"),
        pytest.param(["httpx>=0.27", "openai>=2.45.0"], "2.54.0", "", None, id="met"),
        pytest.param(["httpx>=0.27"], "1.0.0", "", None, id="no-openai-pin"),
    ],
)
def test_excluding_pin(
    requirements: list[str], installed: str, extra: str, expected: str | None
) -> None:
    assert excluding_pin(requirements, installed, extra) == expected
