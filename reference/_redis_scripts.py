"""The Lua scripts that make every state change of a Redis rollout one atomic server step.

Each script touches only the three keys of one rollout (:func:`rollout_keys`), which share a
hash tag, so on a Redis Cluster each runs whole on the primary serving that slot. Keys:
``KEYS[1]`` the meta hash (``epoch``, ``version``, ``frozen``, ``incomplete``, the counts
``acked`` and ``announced``, the last change's ``op`` and ``reply``, or a tombstone's
``retired``), ``KEYS[2]`` the entries hash (call id -> canonical payload bytes), ``KEYS[3]``
the set of announced call ids.

``version`` counts state changes (a new entry, an intent, a mark); a freeze does not change
it. A snapshot is named ``<epoch>-<version>``; the epoch is minted once per incarnation of a
rollout, so an id reused after ``delete`` never matches an old snapshot.

Resending is safe. A client that lost a reply resends the same command, and every
state-changing script takes a fresh operation id as ``ARGV[1]``: the meta hash keeps the id
and reply of the last change, so a resend of that change answers as the first copy did and
changes nothing. An identical re-put is a no-op anyway.

Loss is detected. The meta hash counts the entries and intents ever stored (``acked``,
``announced``) from the moment its epoch is minted (``counted``). A freeze that finds fewer
(an evicting server deleted a key) marks the rollout incomplete. On a server whose policy may
evict (the client says so in the last argument of every script), a meta hash minted after the
server evicted any key starts incomplete: a rollout that lost every key cannot be told apart
from one never written. A freeze of a rollout already frozen, with nothing lost, only reads,
so it works on a server that is out of memory.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "BEGIN_CALL",
    "DELETE",
    "DROP",
    "FREEZE",
    "MARK_INCOMPLETE",
    "PEEK",
    "PUT",
    "RETIRE",
    "Script",
    "rollout_keys",
    "validate_namespace",
]


@dataclass(frozen=True)
class Script:
    """One Lua script and the SHA1 that ``EVALSHA`` names it by."""

    name: str
    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())


def validate_namespace(namespace: object) -> str:
    """Return ``namespace`` if it can prefix keys without breaking their hash tag."""
    if not isinstance(namespace, str):
        raise TypeError(f"namespace must be a str, got {type(namespace).__name__}")
    if not namespace or len(namespace) > 100 or "{" in namespace or "}" in namespace:
        raise ValueError(
            "namespace must be 1 to 100 characters without '{' or '}', got "
            f"{namespace[:80]!r} ({len(namespace)} characters)"
        )
    return namespace


def rollout_keys(namespace: str, rollout_id: str) -> tuple[str, str, str]:
    """Return the meta, entries and intents keys of one rollout, all in one hash slot."""
    tag = f"{namespace}:{{{rollout_id}}}"
    return f"{tag}:meta", f"{tag}:entries", f"{tag}:intents"


_PRELUDE = """
local meta, entries, intents = KEYS[1], KEYS[2], KEYS[3]
local function retired() return redis.call('HGET', meta, 'retired') == '1' end
local function frozen() return redis.call('HGET', meta, 'frozen') == '1' end
-- The last argument is '1' when the server's policy may evict keys. A rollout without a meta
-- hash on a server that has evicted keys may have lost every key, so it starts incomplete.
local function suspect()
  if ARGV[#ARGV] ~= '1' then return false end
  local evicted = string.match(redis.call('INFO', 'stats'), 'evicted_keys:(%d+)')
  return evicted ~= nil and tonumber(evicted) > 0
end
local function mint(epoch)
  if redis.call('HSETNX', meta, 'epoch', epoch) == 1 then
    redis.call('HSET', meta, 'counted', '1')
    if suspect() then redis.call('HSET', meta, 'incomplete', '1') end
  end
end
local function bump(epoch)
  mint(epoch)
  redis.call('HINCRBY', meta, 'version', 1)
end
local function replayed()
  if redis.call('HGET', meta, 'op') == ARGV[1] then return redis.call('HGET', meta, 'reply') end
  return false
end
local function done(reply)
  redis.call('HSET', meta, 'op', ARGV[1], 'reply', reply)
  return reply
end
local function tombstone(how, at, ttl)
  redis.call('DEL', meta, entries, intents)
  redis.call('HSET', meta, 'retired', '1', 'retired_by', how, 'retired_at', at)
  if ttl ~= '' then redis.call('EXPIRE', meta, ttl) end
end
"""

PUT: Final = Script(
    "put",
    _PRELUDE
    + """
-- ARGV: operation id, model_call_id, payload, epoch candidate
local again = replayed()
if again then return again end
if retired() then return 'retired' end
local known = redis.call('HGET', entries, ARGV[2])
if known then
  if known == ARGV[3] then return 'same' end
  redis.call('HSET', meta, 'incomplete', '1')
  bump(ARGV[4])
  return done('conflict')
end
if frozen() then return 'frozen' end
redis.call('HSET', entries, ARGV[2], ARGV[3])
bump(ARGV[4])
redis.call('HINCRBY', meta, 'acked', 1)
return done('stored')
""",
)

MARK_INCOMPLETE: Final = Script(
    "mark_incomplete",
    _PRELUDE
    + """
-- ARGV: operation id, epoch candidate
local again = replayed()
if again then return again end
if retired() then return 'retired' end
redis.call('HSET', meta, 'incomplete', '1')
bump(ARGV[2])
return done('marked')
""",
)

BEGIN_CALL: Final = Script(
    "begin_call",
    _PRELUDE
    + """
-- ARGV: operation id, model_call_id, epoch candidate
local again = replayed()
if again then return again end
if retired() then return 'retired' end
if redis.call('SISMEMBER', intents, ARGV[2]) == 1 then return 'known' end
if redis.call('HEXISTS', entries, ARGV[2]) == 1 then return 'known' end
if frozen() then return 'frozen' end
redis.call('SADD', intents, ARGV[2])
bump(ARGV[3])
redis.call('HINCRBY', meta, 'announced', 1)
return done('announced')
""",
)

PEEK: Final = Script(
    "peek",
    _PRELUDE
    + """
-- Reads only: the payloads a rollout holds now, none once retired. No fence, no epoch.
if retired() then return {} end
return redis.call('HVALS', entries)
""",
)

FREEZE: Final = Script(
    "freeze",
    _PRELUDE
    + """
-- ARGV: epoch candidate
-- Returns {'retired'} or {'frozen', epoch, version, incomplete, payload...}.
if retired() then return {'retired'} end
local state = redis.call('HMGET', meta, 'epoch', 'frozen', 'incomplete', 'counted', 'acked',
  'announced')
local stored, announced = redis.call('HLEN', entries), redis.call('SCARD', intents)
-- A rollout with entries but no epoch lost its meta hash; one counted from its start must hold
-- exactly as many entries and intents as were acknowledged.
local lost = (state[4] == '1' or not state[1]) and
  (stored ~= tonumber(state[5] or '0') or announced ~= tonumber(state[6] or '0'))
if not state[1] or state[2] ~= '1' or (lost and state[3] ~= '1') then
  mint(ARGV[1])
  redis.call('HSET', meta, 'frozen', '1')
  if lost and state[3] ~= '1' then
    redis.call('HSET', meta, 'incomplete', '1')
    redis.call('HINCRBY', meta, 'version', 1)
  end
end
state = redis.call('HMGET', meta, 'epoch', 'version', 'incomplete')
local incomplete = state[3] == '1'
if not incomplete then
  for _, call in ipairs(redis.call('SMEMBERS', intents)) do
    if redis.call('HEXISTS', entries, call) == 0 then
      incomplete = true
      break
    end
  end
end
local out = {'frozen', state[1], state[2] or '0', incomplete and '1' or '0'}
for _, payload in ipairs(redis.call('HVALS', entries)) do out[#out + 1] = payload end
return out
""",
)

DROP: Final = Script(
    "drop",
    _PRELUDE
    + """
-- ARGV: operation id, snapshot_id, version, now, tombstone ttl ('' for none)
local again = replayed()
if again then return again end
if retired() or not frozen() then return 'kept' end
local state = redis.call('HMGET', meta, 'epoch', 'version')
local version = state[2] or '0'
if version ~= ARGV[3] or not state[1] or state[1] .. '-' .. version ~= ARGV[2] then
  return 'kept'
end
tombstone('drop', ARGV[4], ARGV[5])
return done('dropped')
""",
)

RETIRE: Final = Script(
    "retire",
    _PRELUDE
    + """
-- ARGV: operation id, now, tombstone ttl ('' for none)
if retired() then return 'kept' end
tombstone('retire', ARGV[2], ARGV[3])
return done('retired')
""",
)

DELETE: Final = Script(
    "delete",
    _PRELUDE
    + """
redis.call('DEL', meta, entries, intents)
return 1
""",
)
