"""Request preparation and Server-Sent-Events parsing for OpenAI-compatible streaming APIs.

Parsing is deliberately kept off the sending hot path: while a run is in flight the runner
only stores ``(arrival time, body bytes)`` pieces; :func:`parse_stream` turns them into token
times and usage once the run is over. JSON is decoded then, not while requests are due.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from dataclasses import dataclass, field


def prepare_body(body: str | bytes | dict, model: str | None, *, continuous_usage: bool = True) -> tuple[str, bytes]:
    """Return ``(path, json_bytes)`` for one request, forced to stream with usage reporting.

    ``model`` (when given) replaces the body's model; chat bodies (``messages``) go to
    /v1/chat/completions, completion bodies (``prompt``) to /v1/completions.
    """
    if isinstance(body, (str, bytes)):
        try:
            body = json.loads(body)
        except json.JSONDecodeError as exc:
            raise ValueError(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ValueError(f"request body must be a JSON object, got {type(body).__name__}")
    body = dict(body)
    if "messages" in body:
        path = "/v1/chat/completions"
    elif "prompt" in body:
        path = "/v1/completions"
    else:
        raise ValueError("request body has neither 'messages' (chat) nor 'prompt' (completions)")
    if model:
        body["model"] = model
    body["stream"] = True
    options = dict(body.get("stream_options") or {})
    options["include_usage"] = True
    if continuous_usage:
        options["continuous_usage_stats"] = True
    body["stream_options"] = options
    return path, json.dumps(body, separators=(",", ":")).encode()


def http_request(host: str, port: int, path: str, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    """One pre-encoded HTTP/1.1 keep-alive POST."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


@dataclass
class StreamResult:
    token_times: list[float] = field(default_factory=list)  # arrival time of each content-bearing event
    output_tokens: int = 0
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    error: str | None = None


def _has_content(obj: dict) -> bool:
    for choice in obj.get("choices") or ():
        delta = choice.get("delta")
        if delta is not None:
            if (
                delta.get("content")
                or delta.get("reasoning_content")
                or delta.get("reasoning")
                or delta.get("tool_calls")
            ):
                return True
        elif choice.get("text"):
            return True
    return False


def parse_stream(pieces: list[tuple[float, bytes]]) -> StreamResult:
    """Token arrival times and usage from an SSE body received as timed pieces.

    An event counts as a token event when it carries content (chat ``delta.content``, reasoning
    or tool calls, completions ``text``); its time is the arrival of the piece that completed it.
    Output tokens come from the last ``usage`` seen (exact with speculative decoding, where one
    event may carry several tokens); without usage, the number of token events.
    """
    out = StreamResult()
    if not pieces:
        return out
    ends, times, parts, total = [], [], [], 0
    for t, data in pieces:
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        total += len(data)
        ends.append(total)
        times.append(t)
        parts.append(data)
    body = b"".join(parts)
    usage = None
    pos = 0
    while True:
        sep = body.find(b"\n\n", pos)
        if sep < 0:
            break
        event = body[pos:sep]
        event_end = sep + 2
        pos = event_end
        payload = b"".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))
        if not payload or payload == b"[DONE]":
            continue
        try:
            obj = json.loads(payload)
        except ValueError:
            out.error = f"malformed SSE event: {payload[:200]!r}"
            continue
        if not isinstance(obj, dict):
            continue
        if obj.get("error"):
            err = obj["error"]
            out.error = str(err.get("message", err) if isinstance(err, dict) else err)[:500]
            continue
        if obj.get("usage"):
            usage = obj["usage"]
        if _has_content(obj):
            out.token_times.append(times[min(bisect_left(ends, event_end), len(times) - 1)])
    if usage:
        out.output_tokens = int(usage.get("completion_tokens") or 0)
        out.prompt_tokens = usage.get("prompt_tokens")
        details = usage.get("prompt_tokens_details") or {}
        out.cached_tokens = details.get("cached_tokens") if isinstance(details, dict) else None
    else:
        out.output_tokens = len(out.token_times)
    return out
