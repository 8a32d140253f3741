"""What the fake Messages API sends: message bodies, server-sent events, errors, and the
generic answers to side requests."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from fks_testing.conversations import SIDE_TEXT, Request, Turn

DEFAULT_USAGE = {"input_tokens": 120, "output_tokens": 30}

ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_ERROR_ALIASES = {"rate_limit": 429, "overloaded": 529, "api_error": 500}

Event = tuple[str, dict[str, Any]]


def side_answer(body: Any) -> str:
    """Text for a side request; JSON that fits when it asks for a JSON schema (session titles)."""
    config = body.get("output_config") if isinstance(body, dict) else None
    output_format = config.get("format") if isinstance(config, dict) else None
    if isinstance(output_format, dict) and isinstance(output_format.get("schema"), dict):
        return json.dumps(_example(output_format["schema"]))
    return SIDE_TEXT


def _example(schema: Mapping[str, Any]) -> Any:
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: _example(sub) for name, sub in properties.items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 0
    if kind == "boolean":
        return False
    return SIDE_TEXT


def classify(request: Request, is_side: Callable[[Request], bool]) -> str:
    route = request.path.split("?", 1)[0].rstrip("/")
    if route.endswith("/count_tokens"):
        return "count_tokens"
    if not route.endswith("/v1/messages"):
        return "unknown"
    return "side" if is_side(request) else "main"


def normalize(turn: Turn) -> dict[str, Any]:
    if isinstance(turn, Mapping):
        return dict(turn)
    if isinstance(turn, str):
        return {"blocks": [{"text": turn}]}
    return {"blocks": list(turn)}


def content_blocks(
    new_id: Callable[[str], str], blocks: Sequence[str | Mapping[str, Any]]
) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    for block in blocks:
        if isinstance(block, str):
            content.append({"type": "text", "text": block})
        elif "tool" in block:
            content.append(
                {
                    "type": "tool_use",
                    "id": block.get("id") or new_id("toolu"),
                    "name": block["tool"],
                    "input": dict(block.get("input") or {}),
                }
            )
        elif "text" in block:
            content.append({"type": "text", "text": str(block["text"])})
        else:
            raise ValueError(f"fake API: block needs 'text' or 'tool': {block!r}")
    return content


def error_status(turn: Mapping[str, Any]) -> int:
    """The HTTP status of a scripted error turn (a number or an alias such as `rate_limit`)."""
    status = turn["error"]
    if isinstance(status, str) and status in _ERROR_ALIASES:
        return _ERROR_ALIASES[status]
    return int(status)


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": ERRORS.get(status, "api_error"), "message": message}}


def message_body(
    message_id: str,
    model: str,
    content: list[dict[str, Any]],
    stop_reason: str,
    usage: Mapping[str, int],
) -> dict[str, Any]:
    """A whole (non-streamed) assistant message."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage["input_tokens"],
            "output_tokens": usage["output_tokens"],
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def _chunks(text: str, size: int = 40) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]
    if not text:
        yield ""


def stream_events(
    message_id: str,
    model: str,
    content: list[dict[str, Any]],
    stop_reason: str,
    usage: Mapping[str, int],
) -> Iterator[Event]:
    """The same message as the server-sent events of a streamed answer."""
    yield (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": usage["input_tokens"],
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                    "output_tokens": 1,
                },
            },
        },
    )
    for index, block in enumerate(content):
        yield from _block_events(index, block)
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def _block_events(index: int, block: dict[str, Any]) -> Iterator[Event]:
    if block["type"] == "text":
        start: dict[str, Any] = {"type": "text", "text": ""}
        delta = "text_delta", "text", block["text"]
    else:
        start = {**block, "input": {}}
        delta = "input_json_delta", "partial_json", json.dumps(block["input"])
    yield (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": start},
    )
    kind, key, text = delta
    for piece in _chunks(text):
        yield (
            "content_block_delta",
            {"type": "content_block_delta", "index": index, "delta": {"type": kind, key: piece}},
        )
    yield "content_block_stop", {"type": "content_block_stop", "index": index}


def sse(events: Iterable[Event]) -> bytes:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()
