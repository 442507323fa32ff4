"""The experiment unit: one configuration measured as one unit of work, described by files.

A unit is what a launcher ships to wherever the engine runs (this host, a GPU box, Modal):
``spec.json`` (an :class:`ExperimentSpec`: the endpoint, the candidate's engine arguments, repeats,
the noise floor and reference outputs to judge against) next to the replay pool it names
(``pool.parquet``, a path relative to the spec file), and one entry point,
``autoresearch experiment run spec.json --out DIR``. The unit starts the engine, checks or captures
correctness, runs the sweeps and stops the engine through :func:`research.harness.run_candidate`
(the one harness), then leaves ``result.json`` (an :class:`ExperimentResult`) and ``engine.log`` in
DIR. Nothing here knows who launched it; Dagster Pipes is glue in the app layer.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
from pydantic import BaseModel, Field

from specs.config import EndpointSpec
from loadgen.results import NoiseFloor
from research.correctness import ReferenceOutputs
from research.harness import CandidateResult, Progress, default_sweep_fn, run_candidate

SPEC_FILE = "spec.json"
POOL_FILE = "pool.parquet"
RESULT_FILE = "result.json"
ENGINE_LOG = "engine.log"


class ExperimentSpec(BaseModel):
    """Everything a unit needs to measure one configuration, and nothing about where it runs."""

    label: str = "experiment"
    endpoint: EndpointSpec
    engine_args: list[str]
    repeats: int = Field(default=1, ge=1)
    extra_repeats: int = Field(default=2, ge=0)  # more sweeps while the verdict straddles (CampaignSpec)
    # The replay pool (Parquet): relative paths are relative to the spec file's folder, so the
    # folder (spec.json + pool.parquet) can be copied to another machine and run there.
    pool: str = POOL_FILE
    noise_floor: NoiseFloor | None = None  # judge against it (None: no comparison, verdict "same" if valid)
    reference: ReferenceOutputs | None = None  # check correctness against it (None: no check)
    capture_reference: bool = False  # record this configuration's outputs as the reference instead
    lossy: bool = False
    # GPUs this unit may use (the launcher's choice); set for the engine process only.
    cuda_visible_devices: str | None = None

    @classmethod
    def for_endpoint(cls, endpoint: EndpointSpec, **fields) -> "ExperimentSpec":
        """A unit measuring ``endpoint`` as declared (its own engine arguments unless given)."""
        fields.setdefault("engine_args", list(endpoint.engine.args))
        return cls(endpoint=endpoint, **fields)

    def write(self, folder: Path, pool: pl.DataFrame | Path) -> Path:
        """Write ``spec.json`` and the pool (as ``pool.parquet``) into ``folder``; return the spec file."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / POOL_FILE
        if isinstance(pool, pl.DataFrame):
            pool.write_parquet(target)
        elif Path(pool).resolve() != target.resolve():
            shutil.copyfile(pool, target)
        spec_file = folder / SPEC_FILE
        spec_file.write_text(self.model_copy(update={"pool": POOL_FILE}).model_dump_json(indent=1))
        return spec_file

    @classmethod
    def read(cls, path: Path | str) -> "ExperimentSpec":
        """Read a spec file; its pool path becomes absolute (resolved against the spec's folder)."""
        path = Path(path)
        spec = cls.model_validate_json(path.read_text())
        pool = Path(spec.pool)
        if not pool.is_absolute():
            spec = spec.model_copy(update={"pool": str((path.resolve().parent / pool).resolve())})
        return spec

    def load_pool(self) -> pl.DataFrame:
        from specs.pool_schema import check_pool

        path = Path(self.pool)
        if not path.exists():
            raise FileNotFoundError(
                f"experiment {self.label!r}: replay pool {path} not found (it travels next to "
                f"the spec file as {POOL_FILE})"
            )
        return check_pool(pl.read_parquet(path))


class ExperimentResult(BaseModel):
    """What a unit leaves behind (``result.json``): the harness's result plus where it ran."""

    label: str
    endpoint: str
    candidate: CandidateResult
    host: str = Field(default_factory=socket.gethostname)
    cuda_visible_devices: str | None = None
    started_at: float = 0.0  # unix time
    wall_s: float = 0.0
    engine_log: str | None = None  # file name in the output folder

    @property
    def verdict(self) -> str:
        return self.candidate.verdict

    @property
    def invalid_reason(self) -> str | None:
        return self.candidate.invalid_reason

    @property
    def capacities(self) -> list[float]:
        return self.candidate.capacities

    @classmethod
    def read(cls, folder: Path | str) -> "ExperimentResult":
        return cls.model_validate_json((Path(folder) / RESULT_FILE).read_text())


@contextlib.contextmanager
def _cuda_devices(devices: str | None) -> Iterator[None]:
    """CUDA_VISIBLE_DEVICES for the engine started inside (it inherits this process's environment);
    kept out of engine.env so the launch config hash does not depend on which GPU was free."""
    if devices is None:
        yield
        return
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = devices
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before


def _sweep_progress(progress: Progress) -> Callable:
    """One line per finished sweep step (the harness reports sweeps, this reports their steps)."""

    def report(event) -> None:
        if event.phase == "step_done" and event.step is not None:
            s = event.step
            progress(
                f"    step {event.step_index}: {s.target_rate:g} req/s, TTFT p95 {s.ttft_ms.p95 or 0:.0f} ms, "
                f"errors {s.error_rate:.1%}, {'within SLA' if s.within_sla else 'over SLA'}"
                + (f" (invalid: {s.invalid_reason})" if s.validity != "valid" else "")
            )

    return report


class LogFollower:
    """Follows a growing log file on a thread and hands each new line to ``sink`` (engine logs to
    the launcher while the engine runs). ``keep`` filters lines; at most ``limit`` are handed on."""

    def __init__(
        self,
        path: Path,
        sink: Callable[[str], None],
        keep: Callable[[str], bool] = lambda line: True,
        limit: int = 2000,
        interval_s: float = 0.5,
    ):
        self.path, self.sink, self.keep, self.limit, self.interval_s = Path(path), sink, keep, limit, interval_s
        self.sent = self.dropped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="log-follower", daemon=True)

    def __enter__(self) -> "LogFollower":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        position, partial = 0, ""
        while True:
            stopping = self._stop.is_set()
            if self.path.exists():
                with open(self.path, "rb") as log:
                    log.seek(position)
                    chunk = log.read()
                    position += len(chunk)
                text = partial + chunk.decode(errors="replace")
                *lines, partial = text.split("\n")
                for line in lines:
                    self._send(line.rstrip())
            if stopping:
                if partial.strip():
                    self._send(partial.rstrip())
                if self.dropped:
                    self.sink(f"({self.dropped} more engine log line(s) not forwarded; see {self.path.name})")
                return
            self._stop.wait(self.interval_s)

    def _send(self, line: str) -> None:
        if not line.strip() or not self.keep(line):
            return
        if self.sent >= self.limit:
            self.dropped += 1
            return
        self.sent += 1
        try:
            self.sink(line)
        except Exception:  # noqa: BLE001 - a broken sink must not stop the measurement
            self.dropped += 1


def run_experiment(
    spec: ExperimentSpec,
    out_dir: Path,
    progress: Progress = print,
    *,
    engine_log_sink: Callable[[str], None] | None = None,
    keep_log_line: Callable[[str], bool] = lambda line: True,
    **harness_kwargs,
) -> ExperimentResult:
    """Run the unit: the harness on ``spec`` with its engine files in ``out_dir``; write ``result.json``.

    ``engine_log_sink`` receives the engine's log lines while it runs (those ``keep_log_line``
    keeps). Never raises for a bad configuration: that is an ``invalid`` verdict in the result.
    ``harness_kwargs`` go to :func:`run_candidate` (tests pass ``sweep_fn``).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started, clock = time.time(), time.monotonic()
    progress(
        f"experiment {spec.label} on {spec.endpoint.name}: {' '.join(spec.engine_args)} ({spec.repeats} repeat(s))"
    )
    harness_kwargs.setdefault("soak", "sweep_fn" not in harness_kwargs)  # the unit's own sweep is soaked
    harness_kwargs.setdefault("sweep_fn", default_sweep_fn(progress=_sweep_progress(progress)))
    follower = (
        LogFollower(out_dir / ENGINE_LOG, engine_log_sink, keep_log_line)
        if engine_log_sink
        else contextlib.nullcontext()
    )
    try:
        pool = spec.load_pool()
    except (OSError, ValueError) as exc:
        candidate = CandidateResult(
            engine_args=list(spec.engine_args), verdict="invalid", invalid_reason=f"replay pool unreadable: {exc}"
        )
        progress(f"  invalid: {candidate.invalid_reason}")
    else:
        with _cuda_devices(spec.cuda_visible_devices), follower:
            candidate = run_candidate(
                spec.endpoint,
                list(spec.engine_args),
                pool,
                spec.noise_floor,
                spec.repeats,
                lossy=spec.lossy,
                reference=spec.reference,
                capture=spec.capture_reference,
                workdir=out_dir,
                progress=progress,
                extra_repeats=spec.extra_repeats,
                **harness_kwargs,
            )
    result = ExperimentResult(
        label=spec.label,
        endpoint=spec.endpoint.name,
        candidate=candidate,
        cuda_visible_devices=spec.cuda_visible_devices,
        started_at=started,
        wall_s=time.monotonic() - clock,
        engine_log=ENGINE_LOG if (out_dir / ENGINE_LOG).exists() else None,
    )
    tmp = out_dir / (RESULT_FILE + ".tmp")
    tmp.write_text(result.model_dump_json(indent=1))
    tmp.replace(out_dir / RESULT_FILE)
    return result
