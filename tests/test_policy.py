"""Config objects: frozen, strict, and errors that name the field."""

from __future__ import annotations

import pydantic
import pytest

from splitter import Limits, Policy, RetryPolicy


def test_defaults_are_valid_and_frozen() -> None:
    """Policy() works out of the box and cannot be mutated in place."""
    policy = Policy()
    with pytest.raises(pydantic.ValidationError):
        policy.timeout = 1.0  # type: ignore[misc]


def test_model_copy_tweaks_a_copy() -> None:
    """model_copy(update=...) is the way to change one setting."""
    policy = Policy()
    tight = policy.model_copy(update={"limits": Limits(max_concurrency=2)})
    assert (policy.limits.max_concurrency, tight.limits.max_concurrency) == (64, 2)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        pytest.param(
            lambda: Limits(max_concurrency=-1), "max_concurrency", id="negative-concurrency"
        ),
        pytest.param(lambda: Limits(max_concurrency=0), "max_concurrency", id="zero-concurrency"),
        pytest.param(lambda: Limits(rpm=0), "rpm", id="zero-rpm"),
        pytest.param(lambda: RetryPolicy(max_attempts=0), "max_attempts", id="no-attempts"),
        pytest.param(lambda: Policy(timeout=0), "timeout", id="zero-timeout"),
        pytest.param(lambda: Policy(deadline=-5), "deadline", id="negative-deadline"),
        pytest.param(lambda: Policy(concurrency=3), "concurrency", id="unknown-field"),
    ],
)
def test_impossible_values_name_the_field(build: object, field: str) -> None:
    """A bad value is a ValidationError whose location names the field."""
    with pytest.raises(pydantic.ValidationError) as info:
        build()  # type: ignore[operator]
    assert field in {str(part) for err in info.value.errors() for part in err["loc"]}


def test_initial_wait_above_cap_is_rejected() -> None:
    """A backoff that starts above its own cap is a configuration error, said in words."""
    with pytest.raises(pydantic.ValidationError, match="initial_wait"):
        RetryPolicy(initial_wait=10, max_wait=1)
