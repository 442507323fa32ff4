"""Keep secrets out of the research memory.

The memory is shared and meant to be read by anyone with the file, so a record whose text looks
like a credential is refused before it is written anywhere (spool or database). Two cheap checks:
well-known key shapes (``sk-...``, ``hf_...``, ``ghp_...``, AWS ids, bearer tokens, private keys,
JWTs, ``api_key=...``), and the literal values of environment variables whose names say they
hold a secret (``*KEY*``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ``*CREDENTIAL*``).
The error names the field, never the value.
"""

from __future__ import annotations

import os
import re
from typing import Any

_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("OpenAI/Anthropic-style key (sk-...)", re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_\-]{16,}")),
    ("Hugging Face token (hf_...)", re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}")),
    ("GitHub token", re.compile(r"(?<![A-Za-z0-9])(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    ("AWS access key id", re.compile(r"(?<![A-Z0-9])(AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])")),
    ("Slack token", re.compile(r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9\-]{10,}")),
    ("private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")),
    ("bearer token", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{20,}")),
    ("JWT", re.compile(r"\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}")),
    (
        "credential assignment",
        re.compile(
            r"(?i)(api[_-]?key|access[_-]?token|auth[_-]?token|secret|password)"
            r"[\"']?\s*[:=]\s*[\"']?[A-Za-z0-9._\-/+]{12,}"
        ),
    ),
]
_SECRET_ENV_NAME = re.compile(r"(?i)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)")
_MIN_ENV_SECRET_LEN = 8  # shorter values ("1", "true") would match everything


class SecretInRecordError(ValueError):
    """A record field looks like it holds a credential; the record was not written."""


def _secret_env_values() -> list[tuple[str, str]]:
    return [
        (name, value)
        for name, value in os.environ.items()
        if _SECRET_ENV_NAME.search(name) and len(value) >= _MIN_ENV_SECRET_LEN
    ]


def find_secret(text: str, env_values: list[tuple[str, str]] | None = None) -> str | None:
    """Return what kind of secret ``text`` seems to contain, or None."""
    for label, pattern in _PATTERNS:
        if pattern.search(text):
            return label
    for name, value in env_values if env_values is not None else _secret_env_values():
        if value in text:
            return f"the value of environment variable {name}"
    return None


def check_no_secrets(value: Any, where: str = "record") -> None:
    """Raise :class:`SecretInRecordError` naming the field if any string in ``value`` looks secret."""
    env_values = _secret_env_values()

    def walk(item: Any, path: str) -> None:
        if isinstance(item, str):
            found = find_secret(item, env_values)
            if found:
                raise SecretInRecordError(
                    f"{path} looks like it contains {found}; secrets are never stored "
                    "in the research memory (remove it from the record)"
                )
        elif isinstance(item, dict):
            for key, sub in item.items():
                walk(str(key), f"{path} (key)")
                walk(sub, f"{path}.{key}")
        elif isinstance(item, (list, tuple)):
            for index, sub in enumerate(item):
                walk(sub, f"{path}[{index}]")

    walk(value, where)
