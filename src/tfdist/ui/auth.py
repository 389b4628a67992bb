"""The token every dashboard request needs, as Jupyter does it.

The dashboard shows logs, and logs hold secrets; on a shared machine every local user can
reach 127.0.0.1, so the token is required on loopback too, not only with ``--host``.
``tfdist ui`` prints ``http://HOST:PORT/?token=...``; the first request with it gets an
``HttpOnly``, ``SameSite=Strict`` cookie and a redirect to the same page without the token
(so it does not stay in the address bar or reach a ``Referer``). Scripts may send
``Authorization: token ...``. A request without a valid token is refused (403) before any
route runs; only the static assets (stylesheet, scripts: nothing of the store) are served
without it.

Changes (``stop``, ``resubmit``) are POSTs whose form carries the token as well: a page elsewhere cannot
read it, and the strict cookie is not sent with a cross-site request, so a forged form is
refused twice over. Every response carries a Content-Security-Policy that allows only the
dashboard's own scripts (no inline script), so text that slipped through could not run.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

COOKIE = "tfdist_ui"
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

HEADERS = [
    (b"content-security-policy",
     b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
     b"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]
#: Pages and data are never cached (they hold logs); the static assets may be (plotly.min.js
#: is 4.6 MB: parsing it is most of a curves page's first load).
NO_STORE = (b"cache-control", b"no-store")
CACHE_STATIC = (b"cache-control", b"private, max-age=3600")


def new_token() -> str:
    return secrets.token_urlsafe(24)


def valid(given: str | None, token: str) -> bool:
    return bool(given) and secrets.compare_digest(str(given).encode(), token.encode())


def cookie_values(header: str, name: str) -> list[str]:
    """Every value of cookie ``name`` in a ``Cookie`` header, parsed as browsers send it:
    pairs split at ``;``, each at its first ``=``, a pair that does not parse skipped. (The
    standard library's parser gives up on the whole header at the first odd pair, and any
    application on the same host can set one.) A name may come more than once (cookies
    of other paths): each value is a candidate."""
    found = []
    for pair in header.split(";"):
        key, sep, value = pair.partition("=")
        if sep and key.strip() == name:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            found.append(value)
    return found


def local_location(path: str, query: str = "") -> str:
    """A ``Location`` that names a path of this server: never ``//host`` or ``/\\host``
    (which browsers follow to another host), every byte outside a path's own characters
    percent-encoded."""
    where = "/" + quote(path.lstrip("/\\"), safe="/:@!$&'()*+,;=~-._")
    return where + (f"?{query}" if query else "")


def _bad_request(reason: bytes) -> tuple[Message, Message]:
    body = b"tfdist ui: " + reason + b"\n"
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    return ({"type": "http.response.start", "status": 400, "headers": headers},
            {"type": "http.response.body", "body": body})


class TokenGate:
    """ASGI middleware: the token check and the security headers (see the module doc)."""

    def __init__(self, app: ASGIApp, token: str, open_prefixes: tuple[str, ...] = ("/static/",)) -> None:
        self.app = app
        self.token = token
        self.open_prefixes = open_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        path: str = scope.get("path", "")
        extra = [*HEADERS, CACHE_STATIC if path.startswith(self.open_prefixes) else NO_STORE]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + extra
            await send(message)

        if "\r" in path or "\n" in path:  # no page has one; refused before it nears a header
            start, end = _bad_request(b"a line break in the path of a request")
            await send_with_headers(start)
            await send(end)
            return
        if path.startswith(self.open_prefixes):
            await self.app(scope, receive, send_with_headers)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        from_query = next((v for k, v in query if k == "token"), None)
        cookies = "; ".join(v.decode("latin-1") for k, v in scope.get("headers", [])
                            if k.lower() == b"cookie")  # every Cookie header (HTTP/2 splits them)
        from_cookie = cookie_values(cookies, COOKIE)
        auth = headers.get("authorization", "")
        from_header = auth[6:].strip() if auth.lower().startswith("token ") else None
        if valid(from_query, self.token) and scope.get("method") == "GET":
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            await send_with_headers({"type": "http.response.start", "status": 303, "headers": [
                (b"location", local_location(path, rest).encode("ascii")),
                (b"set-cookie", f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode()),
            ]})
            await send({"type": "http.response.body", "body": b""})
            return
        if any(valid(c, self.token) for c in from_cookie) or valid(from_header, self.token):
            await self.app(scope, receive, send_with_headers)
            return
        body = (b"tfdist ui: this dashboard needs its token; open the URL `tfdist ui` printed "
                b"(http://HOST:PORT/?token=...)\n")
        await send_with_headers({"type": "http.response.start", "status": 403, "headers": [
            (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
