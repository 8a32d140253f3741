"""The egress proxy's meter: a mitmproxy addon behind Squid's model API accelerators that
reads the usage of every model API response as it streams past, prices it, keeps the spend of
the iteration the host opened last, and refuses a call once that spend reached its budget.
It runs in the proxy container (`python3 meter.py PORT CONFDIR`), importing nothing but the
standard library and mitmproxy; it reads the host's config and budget files and writes one
`fks-meter {json}` line per response or refusal, which the host follows (`metering.py`)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any, TextIO

LINE_PREFIX = "fks-meter "
REFUSED_STATUS = 402
EVENT_LIMIT = 1 << 20  # bytes of an event line (or a JSON body) read; a longer one: its size
TOKEN_LIMIT = 10**9  # tokens of one count at most (a larger one is not the API's)
TURN_CHECK_S = 30.0  # a waiting call checks that the call in flight still lives this often
_FIELDS = ("input", "output", "cache_write", "cache_read")
_USAGE = b"sage"  # of usage and usageMetadata: a line without it holds no usage


def count(value: Any) -> int:
    """A token count as reported: a finite, non-negative number within reason (else 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0
    return max(0, min(int(value), TOKEN_LIMIT))


def _usage_of(kind: str, event: dict[str, Any]) -> tuple[dict[str, int], str | None, bool]:
    """Token counts, model and whether the usage is final, from one event (or body) of an API
    of `kind`."""
    if kind == "gemini":
        meta = event.get("usageMetadata")
        if not isinstance(meta, dict):
            return {}, None, False
        output = count(meta.get("candidatesTokenCount")) + count(meta.get("thoughtsTokenCount"))
        cached = count(meta.get("cachedContentTokenCount"))
        tokens = {"input": count(meta.get("promptTokenCount")) - cached, "output": output}
        candidates = event.get("candidates")
        final = isinstance(candidates, list) and any(
            isinstance(c, dict) and c.get("finishReason") for c in candidates
        )
        return tokens | {"cache_read": cached}, _text(event.get("modelVersion")), final
    if kind == "openai":
        body = _dict(event.get("response")) or event
        usage = body.get("usage")
        if not isinstance(usage, dict):
            return {}, None, False
        details = usage.get("input_tokens_details")
        cached = count(details.get("cached_tokens")) if isinstance(details, dict) else 0
        tokens = {"input": count(usage.get("input_tokens")) - cached, "cache_read": cached}
        made = {"output": count(usage.get("output_tokens"))}
        return tokens | made, _text(body.get("model")), True
    return _anthropic_usage(event)


def _anthropic_usage(event: dict[str, Any]) -> tuple[dict[str, int], str | None, bool]:
    message = _dict(event.get("message")) or event
    usage = _dict(message.get("usage")) or event.get("usage")
    if not isinstance(usage, dict):
        return {}, None, False
    tokens = {
        "input": count(usage.get("input_tokens")),
        "output": count(usage.get("output_tokens")),
        "cache_write": count(usage.get("cache_creation_input_tokens")),
        "cache_read": count(usage.get("cache_read_input_tokens")),
    }
    # A message_start's output count is a placeholder; message_delta (or a whole body) is final.
    final = event.get("type") in ("message_delta", "message")
    return tokens, _text(message.get("model")), final


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    return value[:200] if isinstance(value, str) else None


class Prices:
    """USD per million tokens by model family (the first family a model's name contains);
    a model of no family is priced as the dearest one, so no name makes a request free."""

    def __init__(self, table: list[list[Any]], cache_write: float, cache_read: float) -> None:
        self._table = [(str(f).lower(), float(i), float(o)) for f, i, o in table]
        prices = [(i, o) for _, i, o in self._table] or [(0.0, 0.0)]
        self._dearest = (max(i for i, _ in prices), max(o for _, o in prices))
        self._cache = (cache_write, cache_read)

    def of(self, model: str | None) -> tuple[float, float]:
        name = (model or "").lower()
        found = [(i, o) for family, i, o in self._table if family and family in name]
        return found[0] if found else self._dearest

    def cost(self, models: list[str | None], tokens: dict[str, int]) -> float:
        """The cost of `tokens` at the dearest price of `models` (the request's and the
        response's: the agent chooses the first)."""
        models = [m for m in models if m] or [None]  # a model not named: the dearest
        price_in = max(self.of(m)[0] for m in models)
        price_out = max(self.of(m)[1] for m in models)
        cached = sum(tokens.get(k, 0) * f for k, f in zip(_FIELDS[2:], self._cache, strict=True))
        usd = (tokens.get("input", 0) + cached) * price_in + tokens.get("output", 0) * price_out
        return usd / 1_000_000


class Reading:
    """One response read as it streams: its usage so far (each count the largest seen), its
    size, whether its usage was final."""

    def __init__(self, kind: str, sse: bool) -> None:
        self.kind, self.sse = kind, sse
        self.tokens = dict.fromkeys(_FIELDS, 0)
        self.model: str | None = None
        self.final, self.size = False, 0
        self._pending, self._overlong = bytearray(), False

    def feed(self, data: bytes) -> bytes:
        """mitmproxy's stream callable: `data` passed on as it is, read on the side."""
        self.size += len(data)
        if self.sse:
            self._lines(data)
        elif len(self._pending) + len(data) <= EVENT_LIMIT:
            self._pending += data
        else:
            self._overlong = True
        if not data and not self.sse and not self._overlong:
            self._take(bytes(self._pending))
        return data

    def _lines(self, data: bytes) -> None:
        last = data.rfind(b"\n")
        if last < 0:
            self._line(data, complete=False)
            return
        whole = 0  # where this chunk's whole lines start
        if self._pending or self._overlong:
            whole = data.find(b"\n") + 1
            self._line(data[: whole - 1])  # ends the line still open from earlier chunks
        # The whole lines: only those holding usage are read (found at C speed). A chunk of
        # whole lines, as a server writing one event at a time mostly sends, costs no more.
        at = data.find(_USAGE, whole, last)
        while at >= 0:
            start, end = data.rfind(b"\n", 0, at) + 1, data.find(b"\n", at)
            if end - start <= EVENT_LIMIT and data.startswith(b"data:", start):
                self._take(data[start + 5 : end])
            at = data.find(_USAGE, end + 1, last)
        if last + 1 < len(data):
            self._line(data[last + 1 :], complete=False)

    def _line(self, piece: bytes, *, complete: bool = True) -> None:
        if len(self._pending) + len(piece) > EVENT_LIMIT:
            self._overlong = True  # counted by its size only
        elif not self._overlong:
            self._pending += piece
        if complete:
            line, self._pending, overlong = bytes(self._pending), bytearray(), self._overlong
            self._overlong = False
            if not overlong and line.startswith(b"data:"):
                self._take(line[5:])

    def _take(self, raw: bytes) -> None:
        if _USAGE not in raw:  # most events have no usage
            return
        try:
            event = json.loads(raw)
        except (ValueError, RecursionError):  # deep nesting: not an API event
            return
        if not isinstance(event, dict):
            return
        tokens, model, final = _usage_of(self.kind, event)
        for name, value in tokens.items():
            self.tokens[name] = max(self.tokens[name], max(0, value))
        self.model = model or self.model
        self.final = self.final or final


_BILLED = re.compile(r"(/messages|/responses|:streamGenerateContent|:generateContent)(\?.*)?$")


def billed(method: str, path: str) -> bool:
    """A call that makes the model generate (listing models and counting tokens cost nothing)."""
    return method == "POST" and _BILLED.search(path) is not None


def kind_of(path: str) -> str:
    """The API a call path belongs to (Squid passed only its kinds' calls)."""
    if re.search(r":(stream)?[gG]enerateContent", path):
        return "gemini"
    if path.split("?")[0].endswith("/responses"):
        return "openai"
    return "anthropic"


class Meter:
    """The addon: routes each call to its API, meters its response, holds the budget."""

    def __init__(self, config: dict[str, Any], budget_file: str, out: TextIO = sys.stdout) -> None:
        self._routes: dict[str, list[Any]] = config.get("routes", {})
        self.prices = Prices(config.get("prices", []), *config.get("cache", [1.25, 0.1]))
        self._read = config.get("read", True) is not False
        """False: responses are passed through unread (only to measure what reading costs)."""
        self._budget_file = budget_file
        self._out = out
        self.iteration = 0
        self.left: float | None = None
        self.spent = 0.0
        self._budget_stamp: tuple[int, int] | None = None
        self._unsummed: list[Any] = []  # flows ended, summed at the loop's next turn
        self._one = asyncio.Lock()  # with a budget: the model call in flight (`_holder`)
        self._holder: Any = None

    def _budget(self) -> None:
        """The host's latest budget: a new iteration starts its spend from nothing."""
        try:
            stat = Path(self._budget_file).stat()
        except OSError:
            return
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._budget_stamp or stat.st_size > 4096:
            return
        self._budget_stamp = stamp
        try:
            number, left = json.loads(Path(self._budget_file).read_text(encoding="utf-8"))
        except (OSError, ValueError, TypeError):
            return
        if isinstance(number, int) and number != self.iteration:
            self.iteration, self.spent = number, 0.0
        self.left = float(left) if isinstance(left, int | float) and left >= 0 else None

    async def requestheaders(self, flow: Any) -> None:
        """With a budget, one call at a time: calls sent at once go one turn past it at most."""
        self._budget()
        routed = self._routes.get(flow.request.host_header or "") is not None
        if routed and self.left is not None and billed(flow.request.method, flow.request.path):
            while True:  # a call mitmproxy ended without a hook (killed) gives its turn back
                try:
                    await asyncio.wait_for(self._one.acquire(), TURN_CHECK_S)
                    break
                except TimeoutError:
                    if self._holder is not None and not self._holder.live:
                        self._release(self._holder)
            flow.metadata["fks_turn"], self._holder = True, flow

    def _release(self, flow: Any) -> None:
        if flow.metadata.pop("fks_turn", False):  # at most once per call
            self._holder = None
            self._one.release()

    def request(self, flow: Any) -> None:
        route = self._routes.get(flow.request.host_header or "")
        if route is None:
            flow.response = _make(403, "fks meter: no model API of this run answers here")
            return
        flow.request.scheme, flow.request.host, flow.request.port = route
        flow.request.headers["accept-encoding"] = "identity"  # usage read as it comes
        self._settle()  # a response ended in this turn of the loop counts
        self._budget()
        if self.left is not None and self.spent >= self.left:
            text = f"fks egress proxy: budget: spent ${self.spent:.4f} of ${self.left:.4f}"
            flow.response = _make(REFUSED_STATUS, text, kind_of(flow.request.path))
            self._line({"refused": True})
            self._release(flow)

    def responseheaders(self, flow: Any) -> None:
        if flow.response is None or flow.metadata.get("fks_reading") is not None:
            return
        refused = flow.response.status_code >= 400  # the API generated nothing: no cost
        if refused or not self._read or not billed(flow.request.method, flow.request.path):
            flow.response.stream = True
            return
        sse = "event-stream" in flow.response.headers.get("content-type", "")
        reading = Reading(kind_of(flow.request.path), sse)
        flow.metadata["fks_reading"] = reading
        flow.response.stream = reading.feed

    def response(self, flow: Any) -> None:
        self._after(flow)

    def error(self, flow: Any) -> None:
        self._after(flow)

    def _after(self, flow: Any) -> None:
        """`_done` once the agent has the response's end (the hook comes before), or at the next
        request hook, whichever is first."""
        self._unsummed.append(flow)
        try:
            asyncio.get_running_loop().call_soon(self._settle)
        except RuntimeError:  # called outside mitmproxy's loop
            self._settle()

    def _settle(self) -> None:
        while self._unsummed:
            self._done(self._unsummed.pop(0))

    def _done(self, flow: Any) -> None:
        self._release(flow)  # the next call waiting goes on once this sum is made
        reading = flow.metadata.pop("fks_reading", None)
        if not isinstance(reading, Reading):
            return
        # As sent: mitmproxy's `content` would undo the agent's Content-Encoding (a ValueError
        # when nothing can, and the sum would never be made; a bomb when gzip can).
        body = flow.request.raw_content or b""
        asked = _path_model(flow.request.path) or _asked_model(body)
        cost = self.prices.cost([asked, reading.model], reading.tokens)
        if not reading.final:
            # Usage hidden or cut short: at least every byte that came back as a token.
            sent = len(body)
            estimate = self.prices.cost(
                [asked, reading.model], {"input": sent, "output": reading.size}
            )
            cost = max(cost, estimate)
        self.spent += cost
        self._line({"cost": cost, "model": asked or reading.model, "final": reading.final})

    def _line(self, fields: dict[str, Any]) -> None:
        line = {"iteration": self.iteration, "spent": self.spent, **fields}
        self._out.write(LINE_PREFIX + json.dumps(line) + "\n")
        self._out.flush()


def _path_model(path: str) -> str | None:
    """Gemini's model, named in its call's path."""
    found = re.search(r"/models/([^/:?]{1,200}):", path)
    return found.group(1) if found else None


def _asked_model(body: bytes) -> str | None:
    if not body or len(body) > 64 * EVENT_LIMIT:
        return None
    try:
        request = json.loads(body)
    except (ValueError, RecursionError):  # the agent wrote it: any depth
        return None
    return _text(request.get("model")) if isinstance(request, dict) else None


def _error_body(kind: str, text: str) -> bytes:
    other = {"error": {"code": REFUSED_STATUS, "message": text, "status": "budget"}}
    mine = {"type": "error", "error": {"type": "budget", "message": text}}
    return json.dumps(mine if kind == "anthropic" else other).encode()


def _make(status: int, text: str, kind: str = "anthropic") -> Any:
    from mitmproxy import http  # type: ignore[import-not-found]  # in the proxy container

    return http.Response.make(status, _error_body(kind, text), {"content-type": "application/json"})


def main() -> None:
    """mitmproxy in reverse mode on 127.0.0.1:`port` with only the addons a metering hop needs
    (mitmdump's thirty, each imported, would take a second of CPU at every proxy start)."""
    import importlib.util
    import types

    # mitmproxy.addons' __init__ imports every addon: the few needed are imported alone.
    spec = importlib.util.find_spec("mitmproxy.addons")
    if spec is not None and spec.submodule_search_locations is not None:
        package = types.ModuleType(spec.name)
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        sys.modules.setdefault(spec.name, package)
    from mitmproxy import master, options
    from mitmproxy.addons import core, errorcheck, next_layer, proxyserver, termlog, tlsconfig  # type: ignore[import-not-found]

    config = json.loads(Path(os.environ["FKS_METER_CONFIG"]).read_text(encoding="utf-8"))
    meter = Meter(config, os.environ.get("FKS_METER_BUDGET", ""))

    async def serve() -> None:
        hop = master.Master(options.Options())
        hop.addons.add(termlog.TermLog(), core.Core(), proxyserver.Proxyserver())
        hop.addons.add(next_layer.NextLayer(), tlsconfig.TlsConfig(), errorcheck.ErrorCheck())
        hop.addons.add(meter)
        hop.options.update(
            termlog_verbosity="error",
            mode="reverse:http://127.0.0.1:9",
            listen_host="127.0.0.1",
            listen_port=int(sys.argv[1]),
            confdir=sys.argv[2],
            keep_host_header=True,
            connection_strategy="lazy",
            http2=False,
            ssl_verify_upstream_trusted_ca="/etc/ssl/certs/ca-certificates.crt",
        )
        await hop.run()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
