"""One candidate's decayed least-squares fit of the service model (``_service_model``): the
sums every observation adds to, and their ridge solution. Nothing here does I/O."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["FEATURES", "_DECAY", "_Fit", "_dot", "_solve"]

# The fit's features of a request with I uncached input and O output tokens while m run:
# (1, I, O, O * (m - 1), I * (m - 1)); the last two are how concurrency slows decode (beta)
# and prefill (the prefill share).
FEATURES = 5
Theta = tuple[float, float, float, float, float]

_DECAY = 0.98
# Sampling once the fits have settled (issue #21: learning was a third of splitter's own
# CPU per request). Every observation still adds to every fit's sums; what is sampled is
# the costly rest. The solution that picks between two readings of a response's queueing
# is reused for this many observations after the first _SETTLED.
_CHOICE_REFIT = 8
_SETTLED = 64


class _Fit:
    """Decayed least-squares sums for one candidate slot count."""

    __slots__ = ("_choice", "error", "slots", "xtx", "xty", "yy")

    def __init__(self, slots: int | None) -> None:
        self.slots = slots
        self.xtx = [[0.0] * FEATURES for _ in range(FEATURES)]
        self.xty = [0.0] * FEATURES
        self.yy = 0.0
        self.error = 0.0  # decayed squared log error of its replayed latencies
        # (observations when solved, the solution) last used to choose between readings
        self._choice: tuple[int, Theta] | None = None

    def add(self, inputs: float, outputs: float, running: float, target: float) -> None:
        """Fold in ``x = (1, inputs, outputs, outputs * (running - 1), inputs * (running -
        1))``: each sum decayed, then ``x_i * x_j`` (``x_i * target``) added. Unrolled, and
        each product of the symmetric ``xtx`` computed once (``x_i * x_j == x_j * x_i``
        exactly): one response updates every candidate's fit, ~20 of them (the same values
        as the plain double loop, bit for bit; tests/test_speed_regressions.py)."""
        x1, x2 = inputs, outputs
        extra = max(1.0, running) - 1
        x3, x4 = outputs * extra, inputs * extra
        d = _DECAY
        self.yy = self.yy * d + target * target
        y = self.xty
        y[:] = (y[0] * d + target, y[1] * d + x1 * target, y[2] * d + x2 * target,
                y[3] * d + x3 * target, y[4] * d + x4 * target)  # fmt: skip
        r0, r1, r2, r3, r4 = self.xtx
        a01, a02, a03, a04 = r0[1] * d + x1, r0[2] * d + x2, r0[3] * d + x3, r0[4] * d + x4
        a12, a13, a14 = r1[2] * d + x1 * x2, r1[3] * d + x1 * x3, r1[4] * d + x1 * x4
        a23, a24, a34 = r2[3] * d + x2 * x3, r2[4] * d + x2 * x4, r3[4] * d + x3 * x4
        r0[:] = (r0[0] * d + 1.0, a01, a02, a03, a04)
        r1[:] = (a01, r1[1] * d + x1 * x1, a12, a13, a14)
        r2[:] = (a02, a12, r2[2] * d + x2 * x2, a23, a24)
        r3[:] = (a03, a13, a23, r3[3] * d + x3 * x3, a34)
        r4[:] = (a04, a14, a24, a34, r4[4] * d + x4 * x4)

    def solve(self, theta0: tuple[float, ...], lams: tuple[float, ...]) -> Theta:
        """The ridge solution."""
        a = [row[:] for row in self.xtx]
        b = self.xty[:]
        for j in range(FEATURES):
            a[j][j] += lams[j]
            b[j] += lams[j] * theta0[j]
        return _solve(a, b)

    def choosing(
        self, observations: int, ridge: Callable[[], tuple[tuple[float, ...], tuple[float, ...]]]
    ) -> Theta:
        """The solution that chooses between readings: solved afresh until the model has
        ``_SETTLED`` observations, then reused for ``_CHOICE_REFIT`` of them."""
        cached = self._choice
        if cached is not None and observations >= _SETTLED:
            solved_at, theta = cached
            if observations - solved_at < _CHOICE_REFIT:
                return theta
        theta = self.solve(*ridge())
        self._choice = (observations, theta)
        return theta

    def dump(self) -> dict[str, object]:
        return {
            "slots": self.slots,
            "xtx": self.xtx,
            "xty": self.xty,
            "yy": self.yy,
            "error": self.error,
        }


def _dot(x: tuple[float, ...], theta: tuple[float, ...]) -> float:
    x0, x1, x2, x3, x4 = x
    t0, t1, t2, t3, t4 = theta
    return sum((x0 * t0, x1 * t1, x2 * t2, x3 * t3, x4 * t4))


def _solve(a: list[list[float]], b: list[float]) -> Theta:
    """Gaussian elimination with partial pivoting; the ridge keeps ``a`` well conditioned."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = col
        for r in range(col + 1, n):  # the first of the largest, as max() picks
            if abs(m[r][col]) > abs(m[pivot][col]):
                pivot = r
        m[col], m[pivot] = m[pivot], m[col]
        top = m[col]
        lead = top[col]
        for r in range(col + 1, n):
            row = m[r]
            factor = row[col] / lead
            for c in range(col, n + 1):
                row[c] -= factor * top[c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        row = m[r]
        x[r] = (row[n] - sum([row[c] * x[c] for c in range(r + 1, n)])) / row[r]
    return (x[0], x[1], x[2], x[3], x[4])
