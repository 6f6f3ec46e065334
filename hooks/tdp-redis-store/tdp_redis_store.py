"""A triton-dist-plugin cache store in Redis: hosts without a shared disk share their picks.

``TDP_REDIS_URL`` (for example ``redis://127.0.0.1:6379/0``) names the server; unset, the store
does nothing. Each entry is one string, ``tdp:{kind}:{name}:{digest}``, holding the entry's JSON.
It is asked before the built-in file store, which still keeps its local copy:

- get: a missing or corrupt value (warned) answers None, so the file store is asked next; so
  does an unreachable server or a malformed URL, warned once per process and URL;
- put: a server that cannot take the value, or a malformed URL, raises ``OSError`` naming the
  URL; the tuning warns and keeps its pick in memory (and in the file store).

The module itself is the plugin object, registered through the ``triton_dist_plugin``
entry-point group (see ``pyproject.toml``), so installing the distribution is enough.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from typing import Any, Optional

from triton_dist_plugin import hookimpl

URL_ENV = "TDP_REDIS_URL"
TIMEOUT_S = 2.0  # a server that is down must not stall a launch
_clients: dict = {}
_malformed: dict = {}  # URL -> why redis-py cannot parse it: it stays malformed for the process
_warned: set = set()


def shown(url: str) -> str:
    """The URL as messages print it: a password in it is never shown."""
    return re.sub(r"(//[^/@]*?:)[^/@]*@", r"\1***@", url)


def redis_key(entry: Any) -> str:
    return f"tdp:{entry.kind}:{entry.name}:{entry.digest}"


class BadURL(ValueError):
    """``TDP_REDIS_URL`` cannot be parsed (``notaurl``, ``redis://:badport``, ``http://x``)."""


def _client(url: str) -> Any:
    """One client per URL, or ``BadURL`` for one redis-py cannot parse."""
    import redis  # imported only once a server is configured: unset, the plugin needs nothing

    if url not in _clients and url not in _malformed:
        try:
            _clients[url] = redis.Redis.from_url(url, socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S)
        except (ValueError, TypeError) as exc:  # what redis-py raises for a URL it cannot parse
            _malformed[url] = str(exc)
    if url in _malformed:
        raise BadURL(f"malformed {URL_ENV}={shown(url)!r} ({_malformed[url]})")
    return _clients[url]


def _warn_once(url: str, text: str) -> None:
    if url not in _warned:
        _warned.add(url)
        warnings.warn(f"tdp-redis-store: {text}; reading the local cache instead (warned once)", RuntimeWarning,
                      stacklevel=3)


@hookimpl
def tdp_cache_get(entry: Any) -> Optional[dict]:
    """The entry's JSON from Redis, or None (missing, corrupt, server unreachable, URL malformed):
    never an exception, so a lookup always falls through to the file store."""
    url = os.environ.get(URL_ENV)
    if not url:
        return None
    import redis
    key = redis_key(entry)
    try:
        raw = _client(url).get(key)
    except BadURL as exc:
        _warn_once(url, str(exc))
        return None
    except redis.RedisError as exc:
        _warn_once(url, f"cannot reach Redis at {shown(url)} ({exc})")
        return None
    except (ValueError, TypeError, OSError) as exc:  # a URL parsed, but with options the client rejects
        _warn_once(url, f"cannot use Redis at {shown(url)} ({exc})")
        return None
    if raw is None:
        return None
    try:
        record = json.loads(raw)
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
    except (ValueError, RecursionError) as exc:
        warnings.warn(f"tdp-redis-store: corrupt value {key} in Redis at {shown(url)} ({str(exc)[:200]}); ignoring it, "
                      "it will be re-tuned and replaced", RuntimeWarning, stacklevel=2)
        return None
    return record


@hookimpl
def tdp_cache_put(entry: Any, record: dict) -> None:
    """``SET`` the entry's JSON; a server that cannot take it, or a malformed URL, is an
    ``OSError`` naming the URL (the tuning warns and keeps its pick)."""
    url = os.environ.get(URL_ENV)
    if not url:
        return
    import redis
    try:
        _client(url).set(redis_key(entry), json.dumps(record, default=str))
    except BadURL as exc:
        raise OSError(f"cannot write {redis_key(entry)} to Redis: {exc}") from exc
    except (redis.RedisError, ValueError, TypeError) as exc:
        raise OSError(f"cannot write {redis_key(entry)} to Redis at {shown(url)}: {exc}") from exc
