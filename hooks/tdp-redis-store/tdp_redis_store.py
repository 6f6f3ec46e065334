"""A triton-dist-plugin cache store in Redis: hosts without a shared disk share their picks.

``TDP_REDIS_URL`` (for example ``redis://127.0.0.1:6379/0``) names the server; unset, the store
does nothing. Each entry is one string, ``tdp:{kind}:{name}:{digest}``, holding the entry's JSON.
It is asked before the built-in file store, which still keeps its local copy:

- get: a missing or corrupt value (warned) answers None, so the file store is asked next; so
  does an unreachable server, warned once per process;
- put: a server that cannot take the value raises ``OSError`` naming the URL; the tuning warns
  and keeps its pick in memory (and in the file store).

The module itself is the plugin object, registered through the ``triton_dist_plugin``
entry-point group (see ``pyproject.toml``), so installing the distribution is enough.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, Optional

from triton_dist_plugin import hookimpl

URL_ENV = "TDP_REDIS_URL"
TIMEOUT_S = 2.0  # a server that is down must not stall a launch
_clients: dict = {}
_warned: set = set()


def redis_key(entry: Any) -> str:
    return f"tdp:{entry.kind}:{entry.name}:{entry.digest}"


def _client(url: str) -> Any:
    import redis  # imported only once a server is configured: unset, the plugin needs nothing

    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S)
    return _clients[url]


@hookimpl
def tdp_cache_get(entry: Any) -> Optional[dict]:
    """The entry's JSON from Redis, or None (missing, corrupt, server unreachable)."""
    url = os.environ.get(URL_ENV)
    if not url:
        return None
    import redis
    key = redis_key(entry)
    try:
        raw = _client(url).get(key)
    except redis.RedisError as exc:
        if url not in _warned:
            _warned.add(url)
            warnings.warn(f"tdp-redis-store: cannot reach Redis at {url} ({exc}); reading the local cache "
                          "instead (warned once)", RuntimeWarning, stacklevel=2)
        return None
    if raw is None:
        return None
    try:
        record = json.loads(raw)
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
    except (ValueError, RecursionError) as exc:
        warnings.warn(f"tdp-redis-store: corrupt value {key} in Redis at {url} ({str(exc)[:200]}); ignoring it, "
                      "it will be re-tuned and replaced", RuntimeWarning, stacklevel=2)
        return None
    return record


@hookimpl
def tdp_cache_put(entry: Any, record: dict) -> None:
    """``SET`` the entry's JSON; a server that cannot take it is an ``OSError`` naming the URL."""
    url = os.environ.get(URL_ENV)
    if not url:
        return
    import redis
    try:
        _client(url).set(redis_key(entry), json.dumps(record, default=str))
    except redis.RedisError as exc:
        raise OSError(f"cannot write {redis_key(entry)} to Redis at {url}: {exc}") from exc
