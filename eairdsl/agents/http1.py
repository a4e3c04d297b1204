"""A small HTTP/1.1 client on asyncio streams: one POST, pooled keep-alive connections.

Why not httpx for every request: measured with py-spy on `benchmarks/llm_study.py`
(64 requests in flight), httpx and httpcore took about 1.5 ms of CPU per request on
the episodes' event loop — the connection pool scans every connection on each
request, URLs and proxies are re-parsed, anyio wraps each socket — plus 0.2 s to
import and 0.15 s to build a client (its TLS context) before the first request. The
chat-completions call needs one thing: POST a JSON body, read one JSON answer.
This does that in about a tenth of the CPU. httpx remains the carrier where a
proxy applies (`openai_http.post` decides), since it knows the proxy protocols.

What it speaks: HTTP/1.1 over TCP or TLS (certifi's CA bundle as httpx uses it, SNI,
hostname checks), `Content-Length` or chunked answers (or an answer closed by the
server), keep-alive unless the server says `Connection: close`. A connection
taken from the pool that turns out to have been closed by the server before
answering is replaced once by a fresh one (the server never saw that request);
any other failure raises `ConnectionError`, which the caller retries. A
cancelled request (a timeout) closes its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

__all__ = ["Answer", "post"]

_MAX_HEAD = 64 * 1024


@dataclass
class Answer:
    """An HTTP answer: status, headers (lower-case names), body."""

    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class _Pool:
    """The idle keep-alive connections to one origin, in one event loop."""

    host: str
    port: int
    tls: ssl.SSLContext | None
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = field(default_factory=list)


_TLS: ssl.SSLContext | None = None
#: the attribute under which an event loop keeps its pools (so they go with the loop)
_ATTRIBUTE = "_eair_http1_pools"


@dataclass
class _Pools:
    """One event loop's pools by origin, and the generator that closes them with it."""

    by_origin: dict[str, _Pool] = field(default_factory=dict)
    closer: AsyncGenerator[None, None] | None = None


async def _pools() -> _Pools:
    """This event loop's pools. The loop holds them (not a module table, which would keep
    every loop and its sockets alive), and an async generator suspended for the loop's
    lifetime closes the idle connections when `asyncio.run` shuts the loop down
    (`shutdown_asyncgens`)."""
    loop = asyncio.get_running_loop()
    pools: _Pools | None = getattr(loop, _ATTRIBUTE, None)
    if pools is None:
        pools = _Pools()
        setattr(loop, _ATTRIBUTE, pools)
        pools.closer = _closer(pools)
        await pools.closer.__anext__()
    return pools


async def _closer(pools: _Pools) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        for pool in pools.by_origin.values():
            for _, writer in pool.idle:
                writer.close()
            pool.idle.clear()


async def _pool(scheme: str, host: str, port: int) -> _Pool:
    global _TLS  # noqa: PLW0603 - one TLS context per process, made when first needed
    table = (await _pools()).by_origin
    origin = f"{scheme}://{host}:{port}"
    pool = table.get(origin)
    if pool is None:
        tls = None
        if scheme == "https":
            if _TLS is None:
                _TLS = _tls_context()
            tls = _TLS
        pool = table[origin] = _Pool(host, port, tls)
    return pool


def _tls_context() -> ssl.SSLContext:
    """Certificates as httpx (and so litellm's OpenAI client) trusts them: certifi's bundle,
    unless SSL_CERT_FILE or SSL_CERT_DIR names others (then the system's defaults, which
    read them)."""
    if not (os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR")):
        try:
            import certifi
        except ImportError:
            pass
        else:
            return ssl.create_default_context(cafile=certifi.where())
    return ssl.create_default_context()


async def post(url: str, headers: tuple[tuple[str, str], ...], body: bytes,
               keep: int) -> Answer:
    """POST `body` to `url`; at most `keep` idle connections stay open for the next."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise ConnectionError(f"not an http(s) URL: {url}")
    port = parts.port or (443 if scheme == "https" else 80)
    pool = await _pool(scheme, parts.hostname, port)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    if ":" in parts.hostname and parts.port is not None:  # an IPv6 literal
        host = f"[{parts.hostname}]:{parts.port}"
    head = [f"POST {target} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}",
            "Connection: keep-alive", *(f"{k}: {v}" for k, v in headers)]
    message = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
    while pool.idle:
        reader, writer = pool.idle.pop()
        if reader.at_eof() or writer.is_closing():
            writer.close()
            continue
        try:
            return await _exchange(pool, reader, writer, message, keep, reused=True)
        except _Stale:
            continue  # the server closed it while idle: it never saw this request
    reader, writer = await _connect(pool)
    try:
        return await _exchange(pool, reader, writer, message, keep, reused=False)
    except _Stale as exc:
        raise ConnectionError("the server closed the connection without answering") from exc


class _Stale(Exception):
    """A connection closed before a single byte of the answer came back."""


async def _connect(pool: _Pool) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    try:
        reader, writer = await asyncio.open_connection(
            pool.host, pool.port, ssl=pool.tls, limit=_MAX_HEAD,
            server_hostname=pool.host if pool.tls is not None else None)
    except (OSError, ssl.SSLError) as exc:
        raise ConnectionError(f"cannot connect to {pool.host}:{pool.port}: {exc}") from exc
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):  # a request goes out in one write anyway
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return reader, writer


async def _exchange(pool: _Pool, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    message: bytes, keep: int, reused: bool) -> Answer:
    done = False
    try:
        try:
            writer.write(message)
            await writer.drain()
            line = await reader.readline()
        except (ConnectionError, OSError) as exc:
            if reused:
                raise _Stale from exc
            raise ConnectionError(f"the connection failed: {exc}") from exc
        if not line:
            if reused:
                raise _Stale
            raise ConnectionError("the server closed the connection without answering")
        answer, reusable = await _read(reader, line)
        done = True
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError,
            ssl.SSLError, OSError) as exc:
        raise ConnectionError(f"a broken answer: {exc}") from exc
    finally:
        if not done:  # failed, cancelled (a timeout) or stale: never reused
            writer.close()
    if reusable and len(pool.idle) < keep:
        pool.idle.append((reader, writer))
    else:
        writer.close()
    return answer


async def _read(reader: asyncio.StreamReader, line: bytes) -> tuple[Answer, bool]:
    """The answer after its status line, and whether its connection may be reused."""
    version, _, rest = line.decode("latin-1").strip().partition(" ")
    status = int(rest.split(" ", 1)[0])
    headers: dict[str, str] = {}
    size = 0
    while True:
        raw = await reader.readline()
        size += len(raw)
        if size > _MAX_HEAD:
            raise ValueError("headers too long")
        if raw in (b"\r\n", b"\n", b""):
            break
        name, _, value = raw.decode("latin-1").partition(":")
        key = name.strip().lower()
        headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
    close = "close" in headers.get("connection", "").lower() or version != "HTTP/1.1"
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _chunks(reader)
    elif "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    elif status in (204, 304) or 100 <= status < 200:
        body = b""
    else:  # delimited by the end of the connection
        body = await reader.read()
        close = True
    return Answer(status, headers, body), not close


async def _chunks(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size = int((await reader.readline()).split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readexactly(2)
