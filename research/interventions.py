"""Validation of interventions before anything runs.

A proposal's argument diff is applied to the current arguments and checked three ways:
every flag must be one the engine knows (``EngineAdapter.validate_flags`` / ``known_flags``),
every value must make sense for its flag (positive integers, fractions, JSON objects, choices),
and the result must be launchable as a whole (no flag set both ways, tensor parallelism within
the GPUs there are). An invalid intervention is rejected with the reasons; nothing is started.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from autoresearch.engine_args import REMOVE, apply_diff, parse_args
from research.proposals import Intervention

Check = Callable[[str | None], str | None]  # value -> reason it is wrong, or None


def _switch(value: str | None) -> str | None:
    return None if value is None else f"is a switch and takes no value (got {value!r})"


def _int(low: int = 1, high: int | None = None) -> Check:
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


def _float(low: float, high: float, low_open: bool = True) -> Check:
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


def _choice(*options: str) -> Check:
    def check(value: str | None) -> str | None:
        if value not in options:
            return f"must be one of {', '.join(options)} (got {value!r})"
        return None

    return check


def _json_object(required: tuple[str, ...] = (), allowed_methods: tuple[str, ...] = ()) -> Check:
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


def _bytes(value: str | None) -> str | None:
    if value is None or not re.fullmatch(r"\d+(\.\d+)?\s*[KMGT]?i?[Bb]?", value.strip()):
        return f"must be a byte size such as 268435456 or 512M (got {value!r})"
    return None


_SPEC_METHODS = ("ngram", "eagle", "eagle3", "medusa", "mlp_speculator", "draft_model", "mtp", "suffix", "ngram_gpu")

#: value checks per flag, for the engines this project drives (unlisted flags: only name checks).
VALUE_CHECKS: dict[str, dict[str, Check]] = {
    "vllm": {
        "--max-num-seqs": _int(1, 65536),
        "--max-num-batched-tokens": _int(16, 10**7),
        "--max-model-len": _int(16, 10**7),
        "--tensor-parallel-size": _int(1, 1024),
        "--pipeline-parallel-size": _int(1, 1024),
        "--data-parallel-size": _int(1, 1024),
        "--block-size": _choice("1", "8", "16", "32", "64", "128", "256"),
        "--gpu-memory-utilization": _float(0.0, 1.0),
        "--swap-space": _float(0.0, 1024.0, low_open=False),
        "--kv-cache-memory-bytes": _bytes,
        "--kv-cache-dtype": _choice("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"),
        "--dtype": _choice("auto", "half", "float16", "bfloat16", "float", "float32"),
        "--speculative-config": _json_object(("method",), _SPEC_METHODS),
        "--compilation-config": _json_object(),
        "--long-prefill-token-threshold": _int(0),
        "--max-num-partial-prefills": _int(1, 1024),
        "--max-long-partial-prefills": _int(1, 1024),
        "--scheduling-policy": _choice("fcfs", "priority"),
        "--enable-prefix-caching": _switch,
        "--no-enable-prefix-caching": _switch,
        "--enable-chunked-prefill": _switch,
        "--no-enable-chunked-prefill": _switch,
        "--async-scheduling": _switch,
        "--no-async-scheduling": _switch,
        "--enforce-eager": _switch,
    },
    "sglang": {
        "--max-running-requests": _int(1, 65536),
        "--chunked-prefill-size": _int(-1, 10**7),
        "--max-prefill-tokens": _int(16, 10**7),
        "--mem-fraction-static": _float(0.0, 1.0),
        "--tp-size": _int(1, 1024),
        "--dp-size": _int(1, 1024),
        "--schedule-policy": _choice("lpm", "random", "fcfs", "dfs-weight", "lof", "priority"),
        "--kv-cache-dtype": _choice("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16"),
        "--disable-radix-cache": _switch,
        "--enable-torch-compile": _switch,
    },
    "transformers": {
        "--continuous-batching": _switch,
        "--cb-use-cuda-graph": _switch,
        "--compile": _switch,
        "--cb-max-batch-tokens": _int(1, 10**7),
        "--cb-num-blocks": _int(1, 10**8),
        "--cb-block-size": _int(1, 4096),
        "--dtype": _choice("auto", "bfloat16", "float16", "float32"),
        "--attn-implementation": _choice("sdpa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention",
                                         "paged|sdpa", "paged|eager", "paged|flash_attention_2",
                                         "paged|flash_attention_3", "paged|flex_attention",
                                         "paged_attention", "sdpa_paged", "eager_paged", "flex_attention"),
    },
}

#: flags that are not performance settings: a proposal must never touch them (security, identity,
#: paths, logging, the served model itself).
NOT_TUNABLE = re.compile(r"^--(api-key|ssl-.*|host|port|uds|root-path|served-model-name|model|tokenizer.*|revision"
                         r"|code-revision|chat-template.*|download-dir|allowed-.*|allow-credentials|middleware"
                         r"|trust-remote-code|config|config-format|profiler-config|hf-token|hf-overrides"
                         r"|.*log.*|lora-.*|enable-lora|response-role|tool-.*|enable-auto-tool-choice"
                         r"|reasoning-parser.*|otlp-.*|collect-detailed-traces)$")

#: pairs that turn the same feature on and off.
_OPPOSITES = re.compile(r"^--no-(.+)$")

def adapter_class(engine_kind: str):
    """The engines package's adapter class for ``engine_kind`` (None when there is none)."""
    from engines.registry import ADAPTERS

    return ADAPTERS.get(engine_kind)


def known_flags_for(engine_kind: str) -> frozenset[str]:
    """Flags the engine accepts, from its adapter (empty = unknown: names are not checked)."""
    cls = adapter_class(engine_kind)
    return frozenset(cls.known_flags) if cls is not None else frozenset()


def tunable_flags_for(engine_kind: str) -> list[str]:
    """Known flags a proposal may change (what the LLM schema offers), sorted."""
    return sorted(f for f in known_flags_for(engine_kind) if not NOT_TUNABLE.match(f))


@dataclass
class ValidationResult:
    ok: bool
    reasons: list[str] = field(default_factory=list)
    args_after: list[str] = field(default_factory=list)
    lossy: bool = False
    diff: dict[str, str | None] = field(default_factory=dict)  # the normalised diff that was checked


def _normalise(flag: str) -> str:
    flag = flag.strip()
    return flag if flag.startswith("-") else f"--{flag}"


def normalise_diff(diff: dict[str, str | None], base_args: list[str]) -> dict[str, str | None]:
    """``--flag`` spelling, and turning a feature on also drops its ``--no-`` twin (and back)."""
    out = {_normalise(k): v for k, v in diff.items()}
    try:
        base = parse_args(base_args)
    except ValueError:
        return out
    for flag, value in list(out.items()):
        if value == REMOVE:
            continue
        match = _OPPOSITES.match(flag)
        twin = f"--{match.group(1)}" if match else f"--no-{flag[2:]}"
        if twin in base and twin not in out:
            out[twin] = REMOVE
    return out


def validate_intervention(
    intervention: Intervention,
    base_args: list[str],
    engine_kind: str = "vllm",
    known_flags: Iterable[str] | None = None,
    adapter=None,
    gpu_count: int | None = None,
) -> ValidationResult:
    """Check an intervention against the engine's arguments; return reasons when it must not run.

    ``adapter`` (an ``engines.base.EngineAdapter``) is asked first when given; ``known_flags``
    overrides the flag list; ``gpu_count`` (0 = CPU host) bounds the parallelism flags.
    """
    reasons: list[str] = []
    diff = normalise_diff(intervention.engine_arg_diff, base_args)
    if not diff and not (intervention.engine_patch and intervention.engine_patch.strip()):
        reasons.append("the intervention changes nothing (empty argument diff and no patch)")
    for flag in diff:
        if not re.fullmatch(r"--[a-z0-9][a-z0-9-]*(\.[a-z0-9_-]+)*", flag):
            reasons.append(f"{flag!r} is not a well-formed engine flag")
    if intervention.engine_patch is not None and intervention.engine_patch.strip():
        patch = intervention.engine_patch
        if not (("--- " in patch and "+++ " in patch and "@@" in patch) or patch.startswith("diff --git")):
            reasons.append("engine_patch is not a unified diff (needs ---/+++ headers and @@ hunks)")
    if reasons:
        return ValidationResult(False, reasons)

    flags = frozenset(known_flags) if known_flags is not None else known_flags_for(engine_kind)
    checks = VALUE_CHECKS.get(engine_kind, {})
    for flag, value in diff.items():
        if NOT_TUNABLE.match(flag):
            reasons.append(f"{flag} is not a performance setting; proposals may not change it")
            continue
        if value == REMOVE:
            continue
        if flag in checks:
            problem = checks[flag](value)
            if problem:
                reasons.append(f"{flag} {problem}")
        elif value is not None and value.startswith("--"):
            reasons.append(f"{flag} value {value!r} looks like another flag")

    try:
        after = apply_diff(base_args, diff)
        parsed = parse_args(after)
    except ValueError as exc:
        return ValidationResult(False, reasons + [f"the arguments do not parse after the change: {exc}"])
    if adapter is not None:
        flag_problems = adapter.validate_flags(after)
    else:
        from engines.vllm import RESERVED_FLAGS, validate_against

        flag_problems = validate_against(after, flags, engine_kind, RESERVED_FLAGS)
    reasons.extend(r for r in flag_problems if r not in reasons)
    for flag in parsed:
        match = _OPPOSITES.match(flag)
        if match and f"--{match.group(1)}" in parsed:
            reasons.append(f"{flag} and --{match.group(1)} are both set after the change")
    cls = adapter_class(engine_kind)
    if cls is not None:
        reasons.extend(cls.launch_problems(parsed, gpu_count))
    lossy_flags = cls.vocabulary.lossy_flags if cls is not None else frozenset()
    lossy = intervention.lossy or any(f in lossy_flags and v != REMOVE for f, v in diff.items())
    return ValidationResult(not reasons, reasons, after, lossy, diff)
