"""A rate-limit budget shared by many processes through Redis.

The same buckets as :class:`MemoryBudget` (paced refill, debt-based booking, header sync,
429 shifts), kept in one Redis hash and changed only by Lua scripts, so every change is
atomic and all processes read one clock (Redis ``TIME``). If Redis cannot be reached the
budget degrades, with one warning, to a local budget at a conservative share of the limits
it has learned (or fails requests, by policy) and tries Redis again a little later; it
never sends without a budget.

The sync redis client runs in worker threads: ``redis.asyncio`` binds its connections to
one asyncio loop, which would exclude trio and the sync API's fresh loops.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.to_thread

from .._exceptions import BudgetError
from .._headers import parse_count, parse_duration
from .._policy import Limits, SharedBudget, redacted_url
from ._bucket import HEADROOM, RESERVE
from ._memory import MemoryBudget
from ._protocol import Kind, Reservation, WaitHook
from ._snapshot import BudgetSnapshot

__all__ = ["RedisBudget"]

_RETRY_REDIS_AFTER = 5.0  # seconds on the local budget before Redis is tried again

# ARGV[1..3] of every script: headroom, burst, ttl (seconds). State fields are
# "<kind>:<field>"; "shift" is the total seconds 429s have moved bookings back.
_PRELUDE = """
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local HEAD, BURST, TTL = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local ROUNDING = 0.0005
local function get(k, f) return tonumber(redis.call('HGET', key, k .. ':' .. f)) end
local function set(k, f, v) redis.call('HSET', key, k .. ':' .. f, tostring(v)) end
local function known(k) return get(k, 'limit') ~= nil and get(k, 'rate') ~= nil end
local function capacity(k) return math.max(1, get(k, 'limit') * BURST) end
local function pace(k) return get(k, 'rate') * HEAD end
local function level_at(k)
  local level, at = get(k, 'level') or capacity(k), get(k, 'at') or now
  return math.min(capacity(k), level + math.max(0, now - at) * pace(k))
end
local function wait(k, amount)
  if not known(k) then return 0 end
  local blocked = math.max(0, (get(k, 'blocked') or 0) - now)
  local short = math.min(amount, capacity(k)) - level_at(k)
  if short > 0 then return math.max(blocked, short / pace(k)) end
  return blocked
end
local function move(k, amount)
  if known(k) then
    set(k, 'level', math.min(capacity(k), level_at(k) + amount)); set(k, 'at', now)
  end
end
local function touch() redis.call('PEXPIRE', key, math.floor(TTL * 1000)) end
"""

# ARGV[4]: tokens; ARGV[5], ARGV[6]: rpm, tpm from the policy ("" when unknown).
_ACQUIRE = (
    _PRELUDE
    + """
for i, k in ipairs({'requests', 'tokens'}) do
  local given = tonumber(ARGV[4 + i])
  if given and get(k, 'limit') == nil then set(k, 'limit', given); set(k, 'rate', given / 60) end
end
local tokens = tonumber(ARGV[4])
local request_wait, token_wait = wait('requests', 1), wait('tokens', tokens)
local short = 'requests'
if token_wait > request_wait then short = 'tokens' end
move('requests', -1); move('tokens', -tokens)
touch()
return {tostring(math.max(request_wait, token_wait)), tostring(get('all', 'shift') or 0), short}
"""
)

_STATE = (
    _PRELUDE
    + """
local blocked = 0
for _, k in ipairs({'requests', 'tokens'}) do
  blocked = math.max(blocked, (get(k, 'blocked') or 0) - now)
end
return {tostring(get('all', 'shift') or 0), tostring(blocked)}
"""
)

# ARGV[4]: kind, ARGV[5]: amount to give back.
_GIVE = (
    _PRELUDE
    + """
move(ARGV[4], tonumber(ARGV[5])); touch()
return 1
"""
)

# ARGV[4..9]: limit, remaining, reset for requests then tokens ("" when absent).
_SYNC = (
    _PRELUDE
    + """
local window = nil
for i, k in ipairs({'requests', 'tokens'}) do
  local limit, remaining, reset = tonumber(ARGV[i * 3 + 1]), tonumber(ARGV[i * 3 + 2]),
    tonumber(ARGV[i * 3 + 3])
  if limit and limit > 0 then
    local first = get(k, 'limit') == nil
    set(k, 'limit', limit)
    if first then set(k, 'level', capacity(k)); set(k, 'at', now) end
    if get(k, 'rate') == nil then set(k, 'rate', limit / 60) end
  end
  local have = get(k, 'limit')
  if have and remaining and reset and reset > 0 and have - remaining >= 1 then
    -- Bucket.learn_rate: intersect the bounds each reading puts on the rate; spend at the
    -- lower one. An absent 'hi' is no upper bound yet.
    local deficit = have - remaining
    local low = math.max(1, deficit - 1) / (reset + ROUNDING)
    local high = nil
    if remaining >= 1 then high = deficit / math.max(reset - ROUNDING, 1e-9) end
    local lo, hi = get(k, 'lo') or 0, get(k, 'hi')
    if (hi and low > hi) or (high and high < lo) then
      lo, hi = low, high
    else
      lo = math.max(lo, low)
      if high and (not hi or high < hi) then hi = high end
    end
    set(k, 'lo', lo)
    if hi then set(k, 'hi', hi) else redis.call('HDEL', key, k .. ':hi') end
    set(k, 'rate', lo); set(k, 'measured', math.max(get(k, 'measured') or 0, deficit))
  end
  if remaining and known(k) then
    set(k, 'level', math.min(level_at(k), remaining)); set(k, 'at', now)
  end
  if (get(k, 'measured') or 0) > 0 then window = get(k, 'limit') / get(k, 'rate') end
end
if window then
  for _, k in ipairs({'requests', 'tokens'}) do
    if get(k, 'limit') and (get(k, 'measured') or 0) == 0 then
      set(k, 'rate', get(k, 'limit') / window)
    end
  end
end
touch()
return 1
"""
)

# ARGV[4]: kind, ARGV[5]: retry-after seconds, ARGV[6]: reserve fraction.
_BLOCK = (
    _PRELUDE
    + """
local k, seconds, reserve = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
set(k, 'blocked', math.max(get(k, 'blocked') or 0, now + seconds))
if known(k) then
  local units = 1 + math.max(1, get(k, 'limit') * reserve)
  local shift = units / pace(k)
  if now >= (get(k, 'last_shift') or 0) + shift then
    set(k, 'last_shift', now)
    set(k, 'level', level_at(k) - units); set(k, 'at', now)
    set('all', 'shift', (get('all', 'shift') or 0) + shift)
  end
end
touch()
return 1
"""
)

_SNAPSHOT = (
    _PRELUDE
    + """
local out = {}
for _, k in ipairs({'requests', 'tokens'}) do
  if known(k) then
    table.insert(out, tostring(level_at(k))); table.insert(out, tostring(get(k, 'rate')))
    table.insert(out, tostring(capacity(k)))
  else
    table.insert(out, ''); table.insert(out, ''); table.insert(out, '')
  end
end
return out
"""
)

_SCRIPTS = {
    "acquire": _ACQUIRE,
    "state": _STATE,
    "give": _GIVE,
    "sync": _SYNC,
    "block": _BLOCK,
    "snapshot": _SNAPSHOT,
}


class RedisBudget:
    """The budget of one endpoint and API key, shared through Redis."""

    def __init__(
        self,
        config: SharedBudget,
        *,
        fingerprint: str,
        limits: Limits,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import redis  # the ``redis`` extra, needed only when a shared budget is asked for

        self._config = config
        self.key = f"{config.namespace}:budget:{fingerprint}"
        self._limits = limits
        self._clock = clock
        self._client = redis.Redis.from_url(
            config.url, socket_timeout=config.timeout, socket_connect_timeout=config.timeout
        )
        self._scripts = {name: self._client.register_script(lua) for name, lua in _SCRIPTS.items()}
        self._outage_errors: tuple[type[BaseException], ...] = (
            redis.exceptions.ConnectionError,
            redis.exceptions.TimeoutError,
            OSError,
        )
        # Kept in step with the headers all along, so an outage starts from what was learned.
        self._local = MemoryBudget(
            rpm=limits.rpm, tpm=limits.tpm, burst=limits.burst, share=config.outage_share
        )
        self._down_until = 0.0
        self._warned = False

    # -- the Budget protocol -------------------------------------------------------------

    async def acquire(self, tokens: int, on_wait: WaitHook | None = None) -> Reservation:
        if not self._available():
            return await self._local.acquire(tokens, on_wait)
        try:
            delay_s, shift_s, short_s = await self._eval(
                "acquire", tokens, _number(self._limits.rpm), _number(self._limits.tpm)
            )
            delay, seen = float(delay_s), float(shift_s)
            short: Kind = "tokens" if short_s == "tokens" else "requests"
            while delay > 0:
                if on_wait is not None:
                    on_wait(delay, short)
                await anyio.sleep(delay)
                shift_s, blocked_s = await self._eval("state")
                delay, seen = max(float(shift_s) - seen, float(blocked_s)), float(shift_s)
        except self._outage_errors as exc:
            self._outage(exc)
            return await self._local.acquire(tokens, on_wait)
        return Reservation(tokens)

    async def refund(self, reservation: Reservation, used_tokens: int) -> None:
        unused = reservation.tokens - used_tokens
        if unused > 0:
            await self._quietly("give", "tokens", unused)

    async def sync(self, headers: Mapping[str, str]) -> None:
        await self._local.sync(headers)
        args: list[str] = []
        for kind in ("requests", "tokens"):
            reset = parse_duration(headers.get(f"x-ratelimit-reset-{kind}", ""))
            args += [
                _number(parse_count(headers.get(f"x-ratelimit-limit-{kind}"))),
                _number(parse_count(headers.get(f"x-ratelimit-remaining-{kind}"))),
                _number(reset),
            ]
        await self._quietly("sync", *args)

    async def rate_limited(self, kind: Kind, retry_after: float | None) -> None:
        await self._local.rate_limited(kind, retry_after)
        await self._quietly("block", kind, retry_after if retry_after is not None else 1.0, RESERVE)

    def snapshot(self) -> BudgetSnapshot:
        if not self._available():
            return self._local.snapshot()
        try:
            values = self._scripts["snapshot"](keys=[self.key], args=self._common())
        except self._outage_errors as exc:
            self._outage(exc)
            return self._local.snapshot()
        r_level, r_rate, _, t_level, t_rate, t_cap = (_float(v) for v in values)
        return BudgetSnapshot(r_level, t_level, r_rate, t_rate, t_cap)

    # -- plumbing ------------------------------------------------------------------------

    def _common(self) -> list[str]:
        return [str(HEADROOM), str(self._limits.burst), str(self._config.key_ttl)]

    async def _eval(self, name: str, *args: object) -> Sequence[Any]:
        call = functools.partial(
            self._scripts[name], keys=[self.key], args=[*self._common(), *map(str, args)]
        )
        result = await anyio.to_thread.run_sync(call)
        return (
            [v.decode() if isinstance(v, bytes) else v for v in result]
            if isinstance(result, list)
            else [result]
        )

    async def _quietly(self, name: str, *args: object) -> None:
        """Best effort: an update lost to an outage is corrected by the next headers."""
        if not self._available():
            return
        try:
            await self._eval(name, *args)
        except self._outage_errors as exc:
            self._outage(exc)

    def _available(self) -> bool:
        return self._clock() >= self._down_until

    def _outage(self, exc: BaseException) -> None:
        if self._config.on_outage == "stop":
            where = redacted_url(self._config.url)
            raise BudgetError(f"the shared budget at {where} is unreachable") from exc
        self._down_until = self._clock() + _RETRY_REDIS_AFTER
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"the shared budget in Redis is unreachable ({type(exc).__name__}); using a "
                f"local budget at {self._config.outage_share:.0%} of the limits until it is back",
                RuntimeWarning,
                stacklevel=2,
            )


def _number(value: float | int | None) -> str:
    return "" if value is None else repr(float(value))


def _float(value: object) -> float | None:
    text = value.decode() if isinstance(value, bytes) else str(value)
    return float(text) if text else None
