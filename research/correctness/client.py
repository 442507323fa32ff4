"""How a correctness check talks to an engine: which evidence its adapter can give, the requests
(greedy, sampled, teacher-forced, plain text), and the tokenizer greedy text is compared under.

Apart from the judging so that the checks are pure functions of what came back; every HTTP detail
(rejected request fields, a missing route, an answer without choices) is handled here once.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import httpx

from research.correctness.thresholds import Evidence


class CorrectnessUnavailable(RuntimeError):
    """The engine does not answer the requests the check needs."""


class RouteMissing(CorrectnessUnavailable):
    """The route itself is absent (HTTP 404/405): try another one."""


def evidence_for(adapter: Any) -> Evidence:
    """The strongest evidence an engine adapter (class or instance) can give: ``logprobs`` where it
    gives token ids and logprobs, else ``greedy_text``. Asks ``can_give``, never the engine's name."""
    return "logprobs" if adapter.can_give("logprobs") and adapter.can_give("token_ids") else "greedy_text"


def tokenizer_for(adapter: Any) -> str | None:
    """The folder with the endpoint model's ``tokenizer.json`` (None when there is none at hand,
    e.g. an external endpoint whose weights are elsewhere)."""
    spec = getattr(adapter, "spec", None)
    if spec is None:
        return None
    try:
        from specs.models import tokenizer_dir

        directory = tokenizer_dir(spec.model.path)
    except Exception:  # noqa: BLE001 - no local model folder: compare characters instead
        return None
    return str(directory) if (Path(directory) / "tokenizer.json").exists() else None


def rejected_fields(adapter: Any, omit_fields: Collection[str]) -> frozenset[str]:
    """The request fields never to send: those given, and those the adapter says its engine rejects."""
    return frozenset(omit_fields) | frozenset(getattr(adapter, "rejected_request_fields", ()) or ())


class TextEncoder:
    """Text -> token ids under the model's tokenizer; code points when there is no tokenizer."""

    def __init__(self, directory: str | None):
        self.directory = directory if directory and (Path(directory) / "tokenizer.json").exists() else None
        self._tok = None
        if self.directory:
            from tokenizers import Tokenizer

            self._tok = Tokenizer.from_file(str(Path(self.directory) / "tokenizer.json"))

    @property
    def unit(self) -> str:
        return "tokens" if self._tok is not None else "characters"

    def encode(self, text: str) -> list[int]:
        if self._tok is None:
            return [ord(c) for c in text]
        return list(self._tok.encode(text, add_special_tokens=False).ids)


class CorrectnessClient:
    """The engine's OpenAI routes, as the checks ask them; a context manager that closes its connection."""

    def __init__(self, base_url: str, model: str, timeout: float, omit: Collection[str] = ()):
        self.http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)
        self.model = model
        self.omit = frozenset(omit)  # request fields the engine rejects: never sent

    def __enter__(self) -> CorrectnessClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def post(self, path: str, body: dict) -> dict:
        body = {k: v for k, v in body.items() if k not in self.omit}
        try:
            response = self.http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise CorrectnessUnavailable(f"{path} request failed: {exc!r}") from exc
        if response.status_code in (404, 405):
            raise RouteMissing(f"{path} answered {response.status_code}: {response.text[:300]}")
        if response.status_code != 200:
            raise CorrectnessUnavailable(f"{path} answered {response.status_code}: {response.text[:300]}")
        try:
            return response.json()["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise CorrectnessUnavailable(f"{path} answered without choices: {response.text[:300]}") from exc

    def complete(self, prompt: str | list[int], **extra) -> dict:
        body = {"model": self.model, "prompt": prompt, "temperature": 0.0, "seed": 0, **extra}
        return self.post("/v1/completions", body)

    def greedy(self, prompt: str, max_tokens: int) -> tuple[list[int], list[int], str]:
        return self.generate(prompt, max_tokens)

    def sample(self, prompt: str, max_tokens: int, temperature: float, seed: int) -> tuple[list[int], list[int], str]:
        return self.generate(prompt, max_tokens, temperature=temperature, top_p=1.0, seed=seed)

    def generate(self, prompt: str, max_tokens: int, **sampling) -> tuple[list[int], list[int], str]:
        """(prompt ids, output ids, text) of one completion; greedy unless ``sampling`` says otherwise."""
        choice = self.complete(prompt, max_tokens=max_tokens, return_token_ids=True, **sampling)
        prompt_ids, output_ids = choice.get("prompt_token_ids"), choice.get("token_ids")
        if prompt_ids is None or output_ids is None:
            raise CorrectnessUnavailable("the engine ignored return_token_ids (needs vLLM's OpenAI server)")
        return list(prompt_ids), list(output_ids), choice.get("text", "")

    def teacher_forced(self, ids: list[int], top_k: int) -> list[dict[int, float]]:
        choice = self.complete(ids, max_tokens=1, prompt_logprobs=top_k)
        raw = choice.get("prompt_logprobs")
        if not raw:
            raise CorrectnessUnavailable("the engine returned no prompt_logprobs (needs vLLM's OpenAI server)")
        return [{int(t): float(v["logprob"]) for t, v in pos.items()} for pos in raw[1:]]

    def greedy_text(self, prompt: str, max_tokens: int, route: str) -> str:
        """The temperature-0 output text of ``prompt`` (raw completion, or one user turn on chat)."""
        if route == "chat":
            choice = self.post(
                "/v1/chat/completions",
                {
                    "model": self.model,
                    "messages": [{"role": "user", "content": prompt}],
                    "temperature": 0.0,
                    "seed": 0,
                    "max_tokens": max_tokens,
                },
            )
            return (choice.get("message") or {}).get("content") or ""
        return self.complete(prompt, max_tokens=max_tokens).get("text") or ""

    def concurrent_texts(self, prompts: list[str], max_tokens: int, route: str) -> list[str]:
        """The greedy outputs of ``prompts`` sent all at once (the engine batches them)."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, len(prompts))) as pool:
            return list(pool.map(lambda prompt: self.greedy_text(prompt, max_tokens, route), prompts))

    def close(self) -> None:
        self.http.close()
