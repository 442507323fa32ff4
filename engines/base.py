"""The one interface every inference engine adapter implements.

An adapter knows how to build its engine's launch command (an argument list, never a
shell string), which URLs answer health, metrics, prefix-cache reset and profiling, and how
to map its metric names onto :class:`MetricsSnapshot`. Process management (own process group,
captured log, crash/hang detection, clean stop) is shared in :mod:`engines.process`.
"""

from __future__ import annotations

import functools
import json
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from specs.config import EndpointSpec
from specs.engine_args import REMOVE

ArgDiff = dict[str, str | None]  # {flag: value | None (switch) | REMOVE}

#: kinds of evidence an engine can give (``EngineAdapter.evidence``)
EVIDENCE = ("metrics", "profile", "logprobs", "token_ids", "prefix_cache_reset")


class EngineError(RuntimeError):
    """The engine could not do what was asked; the message says what to do."""


class EngineCrashed(EngineError):
    """The engine process died (or stopped answering). ``log_tail`` holds the end of its log."""

    def __init__(self, message: str, log_tail: str = "", returncode: int | None = None):
        self.log_tail = log_tail
        self.returncode = returncode
        super().__init__(f"{message}\n--- engine log (tail) ---\n{log_tail}" if log_tail else message)


@dataclass
class MetricsSnapshot:
    """Engine-neutral view of one ``/metrics`` scrape. Counters are cumulative; None = not exported."""

    timestamp: float
    requests_running: float | None = None
    requests_waiting: float | None = None
    kv_cache_usage: float | None = None  # 0..1
    preemptions_total: float | None = None
    prefix_cache_queries_total: float | None = None
    prefix_cache_hits_total: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    spec_decode_draft_tokens_total: float | None = None
    spec_decode_accepted_tokens_total: float | None = None
    raw: dict[str, float] = field(default_factory=dict)  # every sample "name{labels}" -> value


@dataclass(frozen=True)
class Knob:
    """A numeric setting the rules may move: its flag and the engine's default when it is absent."""

    flag: str
    default_gpu: int
    default_cpu: int | None = None

    def default(self, cpu: bool) -> int:
        return self.default_cpu if cpu and self.default_cpu is not None else self.default_gpu


@dataclass(frozen=True)
class Vocabulary:
    """What an engine calls the things every engine has, so rules and diagnosis need no engine names.

    A ``switch`` is the argument diff that turns a feature on (``REMOVE`` drops a flag, e.g. vLLM's
    ``--enforce-eager`` to get CUDA graphs back); None = the engine has no such feature (or it is
    always on). ``lossy_flags`` change outputs (quantisation, precision): their changes are lossy.
    """

    batch_limit: Knob | None = None  # concurrent sequences per step
    token_budget: Knob | None = None  # tokens per scheduler step (prefill chunk budget)
    prefill_chunk: Knob | None = None  # smaller = long prefills split across steps
    kv_blocks: Knob | None = None  # KV cache size in blocks
    kv_memory_fraction: tuple[str, float, float] | None = None  # flag, default, highest sensible (GPU)
    kv_memory_cpu: ArgDiff | None = None  # a larger KV cache on a CPU host
    cache_block_size_gpu: int = 16
    cache_block_size_cpu: int = 16
    block_size_flag: str | None = None
    continuous_batching: ArgDiff | None = None
    prefix_cache: ArgDiff | None = None
    prefix_cache_off_flag: str | None = None  # present in args = the cache is off
    prefix_cache_default_on: bool = False
    cuda_graphs: ArgDiff | None = None  # GPU only
    compile: ArgDiff | None = None  # GPU only
    async_scheduling: ArgDiff | None = None
    partial_prefills: ArgDiff | None = None
    chunked_prefill: ArgDiff | None = None  # turns chunking on where it can be off
    speculation_flag: str | None = None  # takes a JSON config (n-gram, draft model, EAGLE)
    attention_flag: str | None = None
    attention_choices: tuple[str, ...] = ()  # fastest first
    kv_cache_dtype: tuple[str, str] | None = None  # flag, lossy low-precision value
    weight_quantization: tuple[str, str] | None = None  # flag, lossy value (GPU only)
    dtype_flag: str | None = None
    tensor_parallel_flag: str | None = None
    data_parallel_flag: str | None = None
    lossy_flags: frozenset[str] = frozenset()

    def block_size(self, args: dict[str, str | None], cpu: bool) -> int:
        """The KV-cache block size these arguments give (the flag if set, else the engine default)."""
        if self.block_size_flag and args.get(self.block_size_flag):
            try:
                return int(args[self.block_size_flag])
            except ValueError:
                pass
        return self.cache_block_size_cpu if cpu else self.cache_block_size_gpu

    def prefix_cache_on(self, args: dict[str, str | None]) -> bool:
        if self.prefix_cache is None:  # no switch: always on (prefix_cache_default_on) or absent
            return self.prefix_cache_default_on
        if self.prefix_cache_off_flag and self.prefix_cache_off_flag in args:
            return False
        return self.prefix_cache_default_on or all(
            (f in args) if v != REMOVE else (f not in args) for f, v in self.prefix_cache.items()
        )


@dataclass(frozen=True)
class EngineIdentity:
    """What exactly is being measured: recorded with every run."""

    engine: str
    engine_version: str
    model: str
    model_revision: str
    launch_config_hash: str
    launch_command: tuple[str, ...]
    overlays: tuple[tuple[str, str], ...] = ()  # (name, content hash) of each runtime overlay (engines.overlays)


class EngineAdapter(ABC):
    """Engine-specific knowledge. Subclasses are small; see engines.vllm for the reference one."""

    kind: str = ""
    #: flags the engine accepts (for validating proposals before anything runs)
    known_flags: frozenset[str] = frozenset()
    #: the engine's names for what every engine has (read by research.rules and research.diagnosis)
    vocabulary: Vocabulary = Vocabulary()
    #: what the engine can tell beyond its streamed text (subset of EVIDENCE)
    evidence: frozenset[str] = frozenset()
    #: request fields the OpenAI routes reject (HTTP 422); the load generator leaves them out
    rejected_request_fields: frozenset[str] = frozenset()
    #: what each flag's value must be (engines.value_checks); flags not listed get only name checks
    value_checks: Mapping[str, Callable[[str | None], str | None]] = MappingProxyType({})
    #: the engine honours ``ignore_eos`` (replayed outputs then keep their recorded lengths)
    honours_ignore_eos: bool = False
    #: seconds between SIGTERM and SIGKILL at stop (an engine that never honours SIGTERM gets less)
    stop_grace_s: float = 20.0
    #: an evidence overlay (engines.overlays) this adapter puts on every engine it launches: the
    #: engine's internals (step times, graph captures, padded shapes) where it exports no metrics
    evidence_overlay: str | None = None
    #: internal settings the CLI does not expose, as candidates the rules may propose
    #: (engines.internals.InternalSetting); empty = the engine has none declared
    internal_settings: tuple = ()
    #: known bugs of this engine's code with their fix as a patch overlay (engines.internals.PatchRecipe),
    #: offered by the rules where the running version and build have the bug
    patch_recipes: tuple = ()
    #: the importable packages of the engine's own code: what a patch a proposal authored may change
    #: (engines.authored); empty: the engine's code cannot be patched
    source_packages: tuple[str, ...] = ()

    def __init__(self, spec: EndpointSpec, port: int, workdir: Path):
        self.spec = spec
        self.port = port
        self.workdir = Path(workdir)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @abstractmethod
    def launch_command(self, model_dir: Path) -> list[str]:
        """The full argument list that starts the engine serving ``model_dir``."""

    def launch_env(self) -> dict[str, str]:
        """Extra environment for the engine process (on top of the endpoint's engine.env)."""
        if self.evidence_overlay:
            return {"AUTORESEARCH_PROBE_FILE": str(self.internals_file)}
        return {}

    @property
    def internals_file(self) -> Path:
        """Where the evidence overlay writes the engine's internals (in this engine's workdir)."""
        return self.workdir / "engine_internals.json"

    def internals(self) -> dict | None:
        """The engine's internals as its evidence overlay last wrote them (cumulative since the start);
        None when the adapter has no such overlay or it wrote nothing (unmeasured, never zeros)."""
        if not self.evidence_overlay:
            return None
        try:
            return json.loads(self.internals_file.read_text())
        except (OSError, ValueError):
            return None

    health_path: str = "/health"
    metrics_path: str = "/metrics"
    reset_prefix_cache_path: str | None = None
    start_profile_path: str | None = None
    stop_profile_path: str | None = None

    @abstractmethod
    def parse_metrics(self, text: str, timestamp: float) -> MetricsSnapshot:
        """Map the engine's Prometheus text onto a MetricsSnapshot."""

    #: False for engines this project does not start (kind external): no start/stop/restart
    manages_process: bool = True
    #: what a remote image installs into its engine environment (launchers.modal_app), pinned to the
    #: versions this project measured; empty = the engine cannot be launched remotely
    remote_packages: tuple[str, ...] = ()
    #: distributions whose installed version names the engine, tried in order (engine venv)
    version_distributions: tuple[str, ...] = ()

    @classmethod
    def spec_problems(cls, spec: EndpointSpec) -> list[tuple[tuple[str, ...], str]]:
        """What an endpoint declaring this engine gets wrong, as (YAML path under attributes, message);
        definitions loading reports each at its file and line. A server run elsewhere cannot be launched
        by a remote launcher, which starts the engine itself."""
        if not cls.manages_process and spec.launcher.kind != "local":
            return [
                (
                    ("launcher",),
                    f"engine.kind {cls.kind!r} is a server that already runs elsewhere; launcher.kind "
                    f"{spec.launcher.kind} starts the engine itself (use launcher.kind local, or omit launcher)",
                )
            ]
        return []

    @classmethod
    def speculative_counters(cls, metrics_text: str) -> dict[str, float]:
        """Speculative-decoding counters from a /metrics page (num_drafts, num_draft_tokens,
        num_accepted_tokens, accepted_pos<j>); empty when the engine exports none."""
        return {}

    @classmethod
    def draft_model_diff(cls, draft_dir: Path, k: int) -> dict[str, str] | None:
        """The argument diff that serves ``draft_dir`` (a small model sharing the target's tokenizer) as a
        speculative draft proposing ``k`` tokens; None when this engine cannot serve a trained drafter."""
        return None

    def engine_python(self) -> str:
        """Interpreter that runs the engine: engine.python, else the engine venv."""
        from specs.paths import engine_python

        return self.spec.engine.python or str(engine_python())

    def served_model_name(self, model_dir: Path) -> str:
        """The ``model`` value clients must send."""
        return self.spec.model.served_name or Path(model_dir).name

    def profile_args(self, profile_dir: Path) -> list[str]:
        """Extra launch arguments that enable the torch profiler, writing into ``profile_dir``."""
        return []

    def profile_env(self, profile_dir: Path) -> dict[str, str]:
        """Extra environment that enables the torch profiler, writing into ``profile_dir``."""
        return {}

    def engine_version(self) -> str:
        """Version of the engine package in the engine's environment (asked once, cached)."""
        if not self.version_distributions:
            return "unknown"
        return installed_version(self.engine_python(), self.version_distributions)

    @classmethod
    def version_for(cls, spec: EndpointSpec) -> str:
        """``name==version`` of the engine ``spec`` launches, without starting it: installed in the engine's
        environment for a local launch, the pinned package of a remote image; "unknown" for a server that
        runs elsewhere (or one this adapter cannot name)."""
        if not cls.manages_process or not cls.version_distributions:
            return "unknown"
        if spec.launcher.kind != "local":
            pins = [p for p in cls.remote_packages if p.partition("==")[0] in cls.version_distributions]
            return pins[0] if pins else "unknown"
        from specs.paths import engine_python

        return installed_version(spec.engine.python or str(engine_python()), cls.version_distributions)

    def missing_on_host(self) -> str | None:
        """What this host lacks to start the engine, found in seconds before any start: its interpreter,
        its package, or the GPUs the endpoint declares. None when nothing is missing."""
        import shutil

        if not self.manages_process:
            return None
        python = self.engine_python()
        if not Path(python).is_file() and shutil.which(python) is None:
            return f"its interpreter {python} does not exist"
        if self.version_distributions and self.engine_version() == "unknown":
            return f"{' or '.join(self.version_distributions)} is not installed for {python}"
        hardware = self.spec.hardware
        if hardware.gpu_count > 0:
            from engines.gpu_lease import host_gpus

            if not host_gpus():
                return (
                    f"it declares {hardware.gpu_count} x {hardware.gpu_type} GPU and this host has none "
                    "(NVML finds no GPU; AUTORESEARCH_GPUS and CUDA_VISIBLE_DEVICES name none)"
                )
        return None

    @classmethod
    def can_give(cls, what: str) -> bool:
        """Whether the engine gives this kind of evidence (one of EVIDENCE)."""
        if what not in EVIDENCE:
            raise ValueError(f"unknown evidence {what!r}; one of {', '.join(EVIDENCE)}")
        return what in cls.evidence

    @classmethod
    def launch_problems(cls, args: dict[str, str | None], gpu_count: int | None) -> list[str]:
        """Whole-configuration checks the engine itself would fail on at start (parsed arguments)."""
        return []

    def cli_args(self) -> list[str]:
        """engine.args as the engine's command line gets them: without the product's ``--overlay``
        arguments (engines.overlays applies those through the environment)."""
        from engines.overlays import split

        return split(list(self.spec.engine.args))[0]

    def validate_flags(self, args: list[str]) -> list[str]:
        """Reasons why ``args`` would not launch; empty when every flag is known."""
        from specs.engine_args import parse_args
        from engines import overlays

        found = overlays.problems(list(args), self.kind)
        if found:
            return found
        args = overlays.split(list(args))[0]
        if not self.known_flags:
            return []
        try:
            flags = parse_args(args)
        except ValueError as exc:
            return [str(exc)]
        return [f"{flag} is not a known {self.kind} argument" for flag in flags if flag not in self.known_flags]


@functools.lru_cache(maxsize=32)
def installed_version(python: str, distributions: tuple[str, ...]) -> str:
    """``name==version`` of the first installed distribution, asked of ``python`` in a subprocess
    (the engine lives in its own venv); "unknown" when none is installed or python is missing."""
    code = (
        "import importlib.metadata as m, sys\n"
        "for d in sys.argv[1:]:\n"
        "    try:\n        print(d + '==' + m.version(d)); break\n"
        "    except m.PackageNotFoundError:\n        pass\n"
    )
    try:
        out = subprocess.run([python, "-c", code, *distributions], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() or "unknown"
