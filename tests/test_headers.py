"""Parsing retry-after headers the way servers actually send them."""

from __future__ import annotations

import pytest

from splitter._headers import parse_retry_after


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        pytest.param({"retry-after-ms": "250"}, 0.25, id="ms"),
        pytest.param({"retry-after-ms": "250", "retry-after": "9"}, 0.25, id="ms-wins"),
        pytest.param({"retry-after": "3"}, 3.0, id="seconds"),
        pytest.param({"retry-after": " 1.5 "}, 1.5, id="fractional-seconds"),
        pytest.param({"retry-after-ms": "junk", "retry-after": "2"}, 2.0, id="bad-ms-falls-back"),
        pytest.param({"retry-after": "-1"}, None, id="negative"),
        pytest.param({"retry-after": "nan"}, None, id="nan"),
        pytest.param({"retry-after": "inf"}, None, id="inf"),
        pytest.param({"retry-after": "soon"}, None, id="garbage"),
        pytest.param({}, None, id="absent"),
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    """Each header form gives the documented number of seconds, or None when unusable."""
    assert parse_retry_after(headers) == expected


def test_http_date_is_relative_to_now() -> None:
    """An HTTP-date retry-after is converted to seconds from the given now."""
    headers = {"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}
    assert parse_retry_after(headers, now=1445412480.0) == pytest.approx(10.0)
    assert parse_retry_after(headers, now=1445412500.0) == 0.0
