"""The two spellings of a Redis URL on a UNIX socket, and the conversion between them.

kombu (Celery's broker URLs) names a socket `redis+socket://PATH?virtual_host=DB`;
redis-py (the cache, rate limits, raw pipelines, metrics) names it
`unix://PATH?db=DB`. The embedded Redis is a socket, so every place that hands a
broker URL to redis-py, or a redis-py URL to kombu, converts here. TCP URLs
(`redis://`, `rediss://`) are spelled alike by both and pass through unchanged.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

KOMBU_SOCKET = "redis+socket://"
REDIS_PY_SOCKET = "unix://"
REDIS_SCHEMES = ("redis://", "rediss://", KOMBU_SOCKET, REDIS_PY_SOCKET)


def _split(url: str, scheme: str) -> tuple[str, dict[str, str]]:
    path, _, query = url.removeprefix(scheme).partition("?")
    return path, dict(parse_qsl(query))


def is_redis(url: str) -> bool:
    return url.startswith(REDIS_SCHEMES)


def redis_py_url(url: str, *, db: int | None = None) -> str:
    """redis-py's spelling of `url` (kombu's or its own), optionally on database `db`."""
    if url.startswith(KOMBU_SOCKET):
        path, query = _split(url, KOMBU_SOCKET)
        return (
            f"{REDIS_PY_SOCKET}{path}?db={db if db is not None else query.get('virtual_host', '0')}"
        )
    if url.startswith(REDIS_PY_SOCKET):
        path, query = _split(url, REDIS_PY_SOCKET)
        return f"{REDIS_PY_SOCKET}{path}?db={db if db is not None else query.get('db', '0')}"
    if db is not None and url.startswith(("redis://", "rediss://")):
        scheme, rest = url.split("://", 1)
        return f"{scheme}://{rest.split('/')[0]}/{db}"
    return url


def kombu_url(url: str) -> str:
    """kombu's spelling of `url` (a redis-py socket URL becomes `redis+socket://`)."""
    if url.startswith(REDIS_PY_SOCKET):
        path, query = _split(url, REDIS_PY_SOCKET)
        return f"{KOMBU_SOCKET}{path}?virtual_host={query.get('db', '0')}"
    return url
