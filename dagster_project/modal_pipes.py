"""A small Dagster Pipes client for experiments on Modal, on the Modal SDK (launchers.modal_app).

Why not ``dagster-modal`` 0.0.5: its ``ModalClient`` is a ``PipesSubprocessClient`` that shells out
to ``modal run MODULE::FUNCTION`` inside a project directory. Our Modal app is built per endpoint
at run time (GPU, volume, timeout from YAML), so there is no module for ``modal run`` to import,
the CLI would read its token from ``~/.modal.toml`` unless told otherwise, and a subprocess hides
the container's return value (the experiment's out dir). This client calls the SDK directly and
keeps the Pipes protocol: the bootstrap variables go into the container's environment, and the
messages the experiment writes to a file in its out dir are read when the out dir comes back
(there is no filesystem or socket shared with a Modal container while it runs).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
from dagster._core.pipes.client import PipesClientCompletedInvocation

from specs.config import EndpointSpec
from launchers.container import EXPERIMENT_ROOT
from launchers.modal_app import RemoteCall, run_remote

PIPES_MESSAGES = "pipes_messages.jsonl"  # in the experiment's out dir


class PipesReturnedFileMessageReader(dg.PipesMessageReader):
    """Reads the Pipes messages file the container wrote into its out dir, once that dir is back."""

    def __init__(self, path_in_container: str):
        self.path_in_container = path_in_container
        self.returned: Path | None = None  # the local copy, set by the client after the call

    @contextmanager
    def read_messages(self, handler: dg.PipesMessageHandler) -> Iterator[dict]:
        try:
            yield {"path": self.path_in_container}
        finally:  # also after a failed experiment: its log messages say why
            if self.returned is not None and self.returned.exists():
                for line in self.returned.read_text(encoding="utf-8").splitlines():
                    if line.strip():
                        handler.handle_message(json.loads(line))

    def no_messages_debug_text(self) -> str:
        return (
            f"Expected the experiment to write Pipes messages to {self.path_in_container} "
            "(open_dagster_pipes() with the default message writer) and the container to return its out dir."
        )


class PipesModalClient(dg.PipesClient):
    """Runs ``autoresearch experiment run`` for one endpoint on Modal inside a Pipes session.

    ``call`` replaces the one call into Modal's cloud (launchers.modal_app.call_modal) with a
    stand-in; None = the real Modal SDK."""

    def __init__(self, root: str = EXPERIMENT_ROOT, call: RemoteCall | None = None):
        self.root = root
        self.call = call

    def run(
        self,
        *,
        context: dg.AssetExecutionContext | dg.OpExecutionContext,
        endpoint: EndpointSpec,
        spec_json: str,
        out_dir: Path,
        extras: Mapping | None = None,
    ) -> PipesClientCompletedInvocation:
        reader = PipesReturnedFileMessageReader(f"{self.root}/out/{PIPES_MESSAGES}")
        with dg.open_pipes_session(
            context=context,
            context_injector=dg.PipesEnvContextInjector(),
            message_reader=reader,
            extras=dict(extras or {}),
        ) as session:
            try:
                result = run_remote(
                    endpoint,
                    spec_json,
                    Path(out_dir),
                    env=session.get_bootstrap_env_vars(),
                    root=self.root,
                    call=self.call,
                )
            finally:
                reader.returned = Path(out_dir) / PIPES_MESSAGES
            if result["returncode"] != 0:
                raise dg.Failure(
                    f"experiment on Modal for {endpoint.name} exited {result['returncode']}: {result['argv']} "
                    f"(container log: {Path(out_dir) / 'container.log'})"
                )
        return PipesClientCompletedInvocation(session)
