"""Issue 2: the code location loads, and a real Dagster webserver serves every endpoint's assets.

The webserver runs on the shipped code location (``dagster_project.definitions``) with a
throw-away DAGSTER_HOME; what it lists over GraphQL must match what the Definitions declare.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from specs.config import DefinitionSet
from dagster_project.definitions import build_definitions
from ui_support import Webserver, report_dir, start_webserver

SAMPLE_ENDPOINT = "support_smollm"

ASSET_NODES = """
query { assetNodes { assetKey { path } groupName description
  repository { name location { name } } } }
"""


def group_keys(definitions: dg.Definitions, group: str) -> set[tuple[str, ...]]:
    """Asset keys (as tuples) the Definitions put in ``group``."""
    return {tuple(spec.key.path) for spec in definitions.resolve_all_asset_specs() if spec.group_name == group}


def test_code_location_is_loadable() -> None:
    defs = build_definitions()
    dg.Definitions.validate_loadable(defs)
    assert ("support_smollm", "engine_identity") in group_keys(defs, SAMPLE_ENDPOINT)


@pytest.fixture
def webserver(tmp_path: Path) -> Iterator[Webserver]:
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    server = start_webserver(home, ["-m", "dagster_project.definitions"], report_dir() / "webserver.log")
    try:
        yield server
    finally:
        server.stop()  # idempotent: a no-op when the test stopped it already


def group_members(pgid: int) -> list[int]:
    """PIDs whose process group is ``pgid`` (from /proc)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


@pytest.mark.browser
def test_webserver_lists_sample_endpoint_assets(webserver: Webserver, definitions: DefinitionSet) -> None:
    nodes = webserver.graphql(ASSET_NODES)["assetNodes"]
    served = {tuple(n["assetKey"]["path"]): n for n in nodes}

    sample = {key for key, node in served.items() if node["groupName"] == SAMPLE_ENDPOINT}
    assert ("support_smollm", "engine_identity") in sample
    assert sample == group_keys(build_definitions(), SAMPLE_ENDPOINT)  # every stage of the endpoint, no more
    assert all(key[0] == SAMPLE_ENDPOINT for key in sample)  # keys are [endpoint, stage]

    # One group per YAML endpoint, all from the one code location.
    assert set(definitions.endpoints) <= {n["groupName"] for n in nodes}
    assert {n["repository"]["location"]["name"] for n in nodes} == {"dagster_project.definitions"}
    identity = served[("support_smollm", "engine_identity")]
    assert identity["description"] and "engine" in identity["description"].lower()

    # Stopping ends the webserver and its code server with SIGTERM alone (Dagster's SIGTERM quirk).
    pgid = webserver.process.pid
    assert len(group_members(pgid)) >= 2  # the webserver and its code server
    webserver.stop()
    assert webserver.process.returncode != -signal.SIGKILL
    assert group_members(pgid) == []
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
