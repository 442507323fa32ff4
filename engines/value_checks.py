"""Value checks for engine flags: each adapter declares which of its flags take what values
(``EngineAdapter.value_checks``), so that a proposal with ``--max-num-seqs 0`` or a malformed JSON
config is rejected before any engine starts (research.interventions)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

Check = Callable[[str | None], str | None]  # value -> reason it is wrong, or None


def switch(value: str | None) -> str | None:
    return None if value is None else f"is a switch and takes no value (got {value!r})"


def integer(low: int = 1, high: int | None = None) -> Check:
    def check(value: str | None) -> str | None:
        if value is None:
            return "needs an integer value"
        try:
            number = int(value)
        except ValueError:
            return f"must be an integer (got {value!r})"
        if number < low:
            return f"must be >= {low} (got {number})"
        if high is not None and number > high:
            return f"must be <= {high} (got {number})"
        return None

    return check


def real(low: float, high: float, low_open: bool = True) -> Check:
    def check(value: str | None) -> str | None:
        if value is None:
            return "needs a number"
        try:
            number = float(value)
        except ValueError:
            return f"must be a number (got {value!r})"
        if number != number or (number <= low if low_open else number < low) or number > high:
            return f"must be in {'(' if low_open else '['}{low}, {high}] (got {value})"
        return None

    return check


def choice(*options: str) -> Check:
    def check(value: str | None) -> str | None:
        if value not in options:
            return f"must be one of {', '.join(options)} (got {value!r})"
        return None

    return check


def json_object(required: tuple[str, ...] = (), allowed_methods: tuple[str, ...] = ()) -> Check:
    def check(value: str | None) -> str | None:
        if value is None:
            return "needs a JSON object"
        try:
            obj = json.loads(value)
        except json.JSONDecodeError as exc:
            return f"must be a JSON object ({exc.msg} at char {exc.pos})"
        if not isinstance(obj, dict):
            return "must be a JSON object"
        missing = [k for k in required if k not in obj]
        if missing:
            return f"JSON object lacks {', '.join(missing)}"
        if allowed_methods and obj.get("method") not in allowed_methods:
            return f"method must be one of {', '.join(allowed_methods)} (got {obj.get('method')!r})"
        for key in ("num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min"):
            if key in obj and (not isinstance(obj[key], int) or obj[key] < 1):
                return f"{key} must be a positive integer (got {obj[key]!r})"
        if obj.get("prompt_lookup_min", 1) > obj.get("prompt_lookup_max", 10**9):
            return "prompt_lookup_min must not exceed prompt_lookup_max"
        return None

    return check


def byte_size(value: str | None) -> str | None:
    if value is None or not re.fullmatch(r"\d+(\.\d+)?\s*[KMGT]?i?[Bb]?", value.strip()):
        return f"must be a byte size such as 268435456 or 512M (got {value!r})"
    return None
