"""Launchers: WHERE an engine runs (this host, or a Modal GPU container), apart from WHAT it is.

An adapter (engines/) knows an engine's command line, metrics and routes; a launcher decides the
machine. ``local`` starts the adapter's command as a child process here; ``modal`` ships one whole
experiment (engine and load generator together) to a Modal container (launchers.modal_app);
``engine.kind: external`` is the "existing host" case: nothing is launched, a URL is measured.

No Dagster imports here. Secrets come from the environment only, are never written anywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

from specs.config import EndpointSpec, ModalLauncher

MODAL_ENV = ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET")


class LaunchRefused(Exception):
    """A launch that must not start (missing credentials, a launcher this command cannot use);
    raised before anything is started or written."""


def modal_credentials(endpoint: EndpointSpec) -> tuple[str, str]:
    """MODAL_TOKEN_ID and MODAL_TOKEN_SECRET from the environment (never ~/.modal.toml or any file)."""
    return modal_credentials_from_env(f"endpoint {endpoint.name!r} runs on Modal (launcher.kind: modal)")


def modal_credentials_from_env(who: str = "a Modal launch") -> tuple[str, str]:
    """The token pair from the environment, or LaunchRefused saying exactly what to set."""
    missing = [name for name in MODAL_ENV if not os.environ.get(name, "").strip()]
    if missing:
        raise LaunchRefused(
            f"{who} but {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not set. Export both MODAL_TOKEN_ID and MODAL_TOKEN_SECRET "
            "in this environment (a token from Modal's settings page); they are read from the environment only, "
            "never from ~/.modal.toml or any file. Nothing was started."
        )
    return os.environ["MODAL_TOKEN_ID"].strip(), os.environ["MODAL_TOKEN_SECRET"].strip()


def preflight(endpoint: EndpointSpec):
    """Check, before any work, that ``endpoint``'s launcher can run: for a local one, that this host has
    the engine and the GPUs it declares (LaunchRefused naming what is missing); for Modal, credentials
    in the environment and the app, image, volume and function built offline (up to the SDK boundary).
    Returns the ModalBuild for Modal endpoints, None for local and external ones."""
    if not isinstance(endpoint.launcher, ModalLauncher):
        problem = host_problem(endpoint)
        if problem is not None:
            raise LaunchRefused(problem)
        return None
    modal_credentials(endpoint)
    from launchers.modal_app import build

    return build(endpoint)


def host_problem(endpoint: EndpointSpec) -> str | None:
    """Why ``endpoint`` cannot run on this host, with what to do instead; None when it can (or when it
    does not run here: Modal, external). The engine's adapter knows what its engine needs."""
    if isinstance(endpoint.launcher, ModalLauncher):
        return None
    from engines import adapter_for

    missing = adapter_for(endpoint, 0, Path(".")).missing_on_host()
    if missing is None:
        return None
    if endpoint.hardware.gpu_count > 0:
        where = (
            f"run it on a host with that GPU, or launch it on Modal (launcher: {{kind: modal, gpu_type: "
            f"{endpoint.hardware.gpu_type}}} in its defs.yaml; docs/launchers.md)"
        )
    else:
        where = "install the engine into its environment (scripts/setup.sh), or set engine.python to one that has it"
    return f"endpoint {endpoint.name!r} cannot run on this host: {missing}. Nothing was started; {where}."


__all__ = ["LaunchRefused", "MODAL_ENV", "modal_credentials", "modal_credentials_from_env", "preflight", "host_problem"]
