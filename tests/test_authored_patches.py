"""Engine patches a proposer authored (engines.authored): a unified diff against the engine's installed
source becomes a content-addressed overlay for that candidate only; the installed engine is never
written; a diff that leaves the engine's packages, does not apply or does not compile is refused with the
reason; a campaign runs them only when it opts in, records each with its hash and shows its text.

The first tests use a small package installed for an interpreter of its own (a real ``git apply``, a real
child process importing the patched module); the campaign test asks the real vLLM environment where its
source lives and what version it is; the engine test runs a patch inside a real vLLM serving the tiny
model."""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engines import authored, overlays
from engines.authored import PatchError

CORE = '''"""The toy engine's step."""


def step():
    return "installed"


def batch_limit():
    return 8
'''


def _diff(path: str, before: str, after: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}"))


@pytest.fixture
def toy(tmp_path: Path, monkeypatch):
    """A package ``toyengine`` installed for an interpreter of its own (a wrapper that puts it on the path),
    and the project's home in tmp_path."""
    site = tmp_path / "site"
    (site / "toyengine").mkdir(parents=True)
    (site / "toyengine" / "__init__.py").write_text('FLAVOUR = "installed"\n')
    (site / "toyengine" / "core.py").write_text(CORE)
    (site / "toyengine" / "helpers.py").write_text("ANSWER = 42\n")
    python = tmp_path / "engine-python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site}" exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path / "home"))
    authored.installed_root.cache_clear()
    return site, str(python)


def _run_in_engine(python: str, names: list[str], code: str) -> str:
    """``code`` in a new process of the engine's interpreter, started with the overlays ``names``."""
    asked = overlays.split([a for n in names for a in (overlays.FLAG, n)])[1]
    env = {**os.environ, **overlays.launch_env(asked, {})}
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip() + "\n" + done.stderr


def test_a_patch_is_applied_to_a_copy_and_only_the_process_started_with_it_runs_it(toy):
    site, python = toy
    patched_core = CORE.replace('return "installed"', 'return "patched"')
    diff = _diff("toyengine/core.py", CORE, patched_core) + _diff(
        "toyengine/__init__.py", 'FLAVOUR = "installed"\n', 'FLAVOUR = "patched"\n'
    )
    name = authored.materialize(diff, "toy", "toyengine==1.0", python, ("toyengine",))
    assert name.startswith(authored.PREFIX)
    assert (site / "toyengine" / "core.py").read_text() == CORE  # the installed engine is never written
    overlay = overlays.find(name)
    assert overlay is not None and overlay.engines == frozenset({"toy"}) and overlay.purpose == "patch"
    assert authored.patch_text(name) == diff

    code = "import toyengine, toyengine.core, toyengine.helpers; print(toyengine.FLAVOUR, toyengine.core.step(), toyengine.helpers.ANSWER)"
    said = _run_in_engine(python, [name], code)
    assert said.startswith("patched patched 42"), said  # the package's unpatched modules still load
    assert f"{name}: patched toyengine, toyengine.core" in said
    plain = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    assert plain.stdout.strip() == "installed installed 42"  # a process without the overlay: untouched

    # content-addressed: the same diff is the same overlay, built once; another diff is another
    first = overlay.sha256()
    assert authored.materialize(diff, "toy", "toyengine==1.0", python, ("toyengine",)) == name
    assert overlays.find(name).sha256() == first
    other = _diff("toyengine/core.py", CORE, CORE.replace("return 8", "return 16"))
    other_name = authored.materialize(other, "toy", "toyengine==1.0", python, ("toyengine",))
    assert other_name != name and overlays.find(other_name).sha256() != first
    assert authored.overlay_name(diff, "toy", "toyengine==2.0") != name  # another version: another overlay


def test_a_model_written_diff_with_wrong_hunk_counts_still_applies(toy):
    site, python = toy
    diff = _diff("toyengine/core.py", CORE, CORE.replace("return 8", "return 12"))
    header = next(line for line in diff.splitlines() if line.startswith("@@"))
    start = int(header.split()[1].split(",")[0][1:])
    sloppy = diff.replace(header, f"@@ -{start + 2},99 +{start + 2},99 @@")  # a start and counts a model got wrong
    name = authored.materialize(sloppy, "toy", "toyengine==1.0", python, ("toyengine",))
    assert "12" in _run_in_engine(python, [name], "import toyengine.core as c; print(c.batch_limit())")


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: _diff("toyengine/core.py", CORE.replace("installed", "elsewhere"), CORE), "does not apply"),
        (lambda: _diff("toyengine/core.py", CORE, CORE.replace("return 8", "return (8")), "does not compile"),
        (lambda: _diff("toyengine/missing.py", "x = 1\n", "x = 2\n"), "not in the installed"),
        (lambda: _diff("setup.py", "x = 1\n", "x = 2\n"), "outside the engine's packages"),
        (lambda: _diff("toyengine/../../etc/x.py", "x = 1\n", "x = 2\n"), "not a path inside"),
        (lambda: _diff("toyengine/data.json", "{}\n", '{"a": 1}\n'), "not a Python source file"),
        (lambda: "--- a/toyengine/core.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n", "deletes"),
        (lambda: "please make the scheduler faster", "not a unified diff"),
    ],
)
def test_a_patch_that_cannot_apply_is_refused_with_the_reason(toy, make, reason):
    site, python = toy
    with pytest.raises(PatchError, match=reason):
        authored.materialize(make(), "toy", "toyengine==1.0", python, ("toyengine",))
    built = [p for p in authored.root().glob("*")] if authored.root().exists() else []
    assert built == []  # nothing half-built is left behind
    assert (site / "toyengine" / "core.py").read_text() == CORE


def test_an_unknown_authored_overlay_says_what_builds_it(toy):
    with pytest.raises(overlays.OverlayError, match="built by the campaign that runs its proposal"):
        overlays.split([overlays.FLAG, "authored-0000000000000000"])


# ------------------------------------------------------------------------------------- LLM subagents
def test_a_subagent_patch_is_rejected_unless_the_campaign_runs_authored_patches():
    from research.llm_agents import SubagentContext, check_proposal, system_prompt
    from research.proposals import Intervention, Proposal

    diff = "--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"
    proposal = Proposal(
        proposal_id="p",
        question="q",
        bottleneck="cpu_overhead",
        explanation="e",
        intervention=Intervention(technique="patch_scheduler", engine_patch=diff),
        prediction="p",
        falsification="f",
        source="llm",
    )
    base = dict(campaign_id="c", experiment_id="e", replay_pool_id="p", engine_kind="vllm", engine_args=[])
    off = SubagentContext(**base)
    rejected = check_proposal(proposal, off)
    assert "does not run authored patches" in " ".join(getattr(rejected, "reasons", []))
    assert "engine_patch must be null" in system_prompt(off)
    on = SubagentContext(**base, authored_patches=True, engine_version="vllm==0.32.0")
    kept = check_proposal(proposal, on)
    assert getattr(kept, "intervention", None) is not None and kept.intervention.engine_patch == diff
    assert "vllm==0.32.0" in system_prompt(on) and "vllm/..." in system_prompt(on)
    from research.campaign.steps import proposal_record

    assert proposal_record(kept).engine_patch == diff  # what the campaign runs keeps the patch


# ----------------------------------------------------------------------------------------- campaign
STAND_IN = """\
#!{python}
# The engine's interpreter for questions (-c: where vLLM lives, its version) is the real one; started as
# an engine (--port N) it records the overlays it was given and serves test_gpu_cap's routes (SERVE).
import http.server, json, os, sys
args = sys.argv[1:]
if "--port" not in args:
    os.execv({real!r}, [{real!r}, *args])
with open({record!r}, "a") as handle:
    handle.write(json.dumps(os.environ.get("AUTORESEARCH_OVERLAYS", "")) + "\\n")
"""


def _installed_vllm_file(relative: str) -> str:
    from specs.paths import engine_python

    return (authored.installed_root(str(engine_python()), "vllm") / relative).read_text()


def _campaign(tmp_path: Path, allowed: bool, folder: str, patches: dict[str, str]):
    from specs.config import CampaignSpec, HardwareSpec, SweepSpec
    from specs.paths import definitions_dir, engine_python
    from dagster_project.lib import load_definitions
    from memory_db import MemoryStore
    from research.campaign import run_campaign
    from research.state import ProposalRecord, StateStore
    from test_campaign import pool, sweep
    from test_gpu_cap import SERVE

    record = tmp_path / f"{folder}-engines.jsonl"
    stand_in = tmp_path / f"{folder}-python"
    stand_in.write_text(STAND_IN.format(python=sys.executable, real=str(engine_python()), record=str(record)) + SERVE)
    stand_in.chmod(0o755)
    (tmp_path / "model").mkdir(exist_ok=True)
    base = load_definitions(definitions_dir()).endpoint("tiny_random")
    endpoint = base.model_copy(
        update={
            "model": base.model.model_copy(update={"path": str(tmp_path / "model")}),
            "engine": base.engine.model_copy(
                update={"python": str(stand_in), "args": ["--max-num-seqs", "2"], "env": {}, "startup_timeout_s": 30}
            ),
            "hardware": HardwareSpec(gpu_type="cpu", gpu_count=0),
            "sweep": SweepSpec(rates=[0.5, 1, 2, 3, 4], repeats=2),
        }
    )
    spec = CampaignSpec(
        name="patches",
        endpoint=endpoint.name,
        subagents=len(patches),
        repeats=2,
        extra_repeats=0,
        max_rounds=1,
        proposer="rules",
        authored_patches=allowed,
    )

    def propose(endpoint_, diagnosis, state, n, skip):
        return [
            ProposalRecord(proposal_id=key, title=key, technique=f"patch_{key}", engine_arg_diff={}, engine_patch=diff)
            for key, diff in patches.items()
        ]

    def measure(engine, pool_, spec_):  # a patched engine holds more in this stand-in: 3 vs 2 req/s
        patched = any(a.startswith(authored.PREFIX) for a in engine.spec.engine.args)
        return sweep(3.0 if patched else 2.0, args=tuple(engine.spec.engine.args))

    memory = MemoryStore(tmp_path / f"{folder}.duckdb")
    lines: list[str] = []
    outcome = run_campaign(
        spec,
        endpoint,
        state_dir=tmp_path / folder,
        pool=pool(),
        sweep_fn=measure,
        diagnose_fn=lambda *a: {"bottlenecks": []},
        propose_fn=propose,
        progress=lines.append,
        memory=memory,
    )
    state = StateStore(tmp_path / folder, "patches").load()
    started = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return outcome, state, started, memory, lines


@pytest.mark.timeout(600)
def test_a_campaign_runs_authored_patches_only_when_it_opts_in_and_records_each_with_its_hash(
    tmp_path: Path, monkeypatch
):
    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path / "home"))
    source = _installed_vllm_file("vllm/sampling_params.py")
    good = _diff("vllm/sampling_params.py", source, source + "\nAUTHORED_PATCH_MARK = 1\n")
    stale = _diff("vllm/sampling_params.py", "def this_function_is_not_in_vllm():\n    pass\n", "x = 1\n")
    outside = _diff("setup.py", "x = 1\n", "x = 2\n")
    patches = {"good": good, "stale": stale, "outside": outside}

    outcome, state, started, memory, lines = _campaign(tmp_path, True, "on", patches)
    assert outcome.finished, "\n".join(lines)
    by_title = {e.title: e for e in state.experiments.values() if e.kind == "candidate"}
    assert by_title["stale"].verdict == "invalid"
    assert by_title["stale"].invalid_reason.startswith("patch does not apply: the patch does not apply")
    assert "outside the engine's packages" in by_title["outside"].invalid_reason
    applied = by_title["good"]
    assert applied.verdict == "better", (applied.invalid_reason, "\n".join(lines))
    (name,) = [a for a in applied.engine_args if a.startswith(authored.PREFIX)]
    assert applied.identity["overlays"] == {name: overlays.find(name).sha256()}
    assert outcome.best_args[-2:] == [overlays.FLAG, name]  # adopted: a better patch becomes the baseline
    # only the candidate's engine ran it: the reference's engine had no overlay
    with_patch = [s for s in started if name in s]
    assert with_patch and any(name not in s for s in started)
    rows = memory.query("SELECT technique, verdict, overlays, engine_patch FROM v_engine_patches ORDER BY technique")
    assert rows["technique"].to_list() == ["patch_good", "patch_outside", "patch_stale"]
    assert json.loads(rows["overlays"][0]) == {name: overlays.find(name).sha256()}
    assert rows["engine_patch"][0] == good
    review = "\n".join(p.read_text() for p in (tmp_path / "on").rglob("*.md"))
    assert "```diff" in review and "+AUTHORED_PATCH_MARK = 1" in review

    outcome, state, started, memory, lines = _campaign(tmp_path, False, "off", {"good": good})
    (refused,) = [e for e in state.experiments.values() if e.kind == "candidate"]
    assert refused.verdict == "invalid" and "does not run authored patches" in refused.invalid_reason
    assert not any(authored.PREFIX in s for s in started)  # no engine ever got it
    assert outcome.best_args == ["--max-num-seqs", "2"]


# ------------------------------------------------------------------------------------------ engine
@pytest.mark.engine
@pytest.mark.timeout(900)
def test_an_authored_patch_runs_inside_a_real_vllm_through_the_harness(engine_slot, definitions, tmp_path, monkeypatch):
    """A diff written against the installed vLLM (as a subagent would), applied through the harness: the
    engine serves, its log shows the patched module ran, the overlay's hash is in the experiment's identity."""
    from autoresearch.workflows import load_pool
    from engines.authored import candidate_args
    from research.harness import run_candidate

    engine_slot.release()  # one engine at a time on this machine
    monkeypatch.setenv("AUTORESEARCH_HOME", str(tmp_path / "home"))
    spec = definitions.endpoint("tiny_random")
    sweep = dict(rates=[0.5], step_duration_s=4, min_requests=2, warmup_requests=1, refine_steps=0, max_steps=2)
    spec = spec.model_copy(update={"sweep": spec.sweep.model_copy(update=sweep)})
    source = _installed_vllm_file("vllm/sampling_params.py")
    mark = 'import sys as _authored_sys\nprint("[authored patch] sampling_params ran", file=_authored_sys.stderr, flush=True)\n'
    diff = _diff("vllm/sampling_params.py", source, source + "\n" + mark)
    args, problem = candidate_args(spec, list(spec.engine.args), diff, allowed=True)
    assert problem is None, problem
    result = run_candidate(spec, args, load_pool(spec), None, 1, capture=True, soak=False, workdir=tmp_path / "run")
    assert result.verdict != "invalid", result.invalid_reason
    name = args[-1]
    assert result.identity["overlays"][name] == overlays.find(name).sha256()
    said = "\n".join(p.read_text(errors="replace") for p in (tmp_path / "run").rglob("*.log"))
    assert f"{name}: patched vllm.sampling_params" in said
    assert "[authored patch] sampling_params ran" in said


def test_the_review_shows_the_text_of_every_patch_a_candidate_ran_with():
    from research.review import _experiment_section
    from research.state import ExperimentState

    recipe = overlays.REGISTRY["vllm_issue_55005"]
    record = ExperimentState(
        experiment_id="cand-1",
        round=1,
        proposal_ids=["p"],
        title="patch_vllm_issue_55005",
        baseline_args=[],
        engine_args=[overlays.FLAG, recipe.name],
        diff={overlays.FLAG: recipe.name},
        verdict="same",
        identity={"overlays": {recipe.name: recipe.sha256()}},
    )
    text = "\n".join(_experiment_section(record))
    source = (recipe.folder / "sitecustomize.py").read_text()
    assert f"content hash {recipe.sha256()}" in text
    assert source.strip().splitlines()[-1] in text and "```python" in text  # the recipe's code itself
    authored_record = record.model_copy(
        update={"engine_patch": "--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1 +1 @@\n-a\n+b\n"}
    )
    assert "```diff\n--- a/vllm/x.py" in "\n".join(_experiment_section(authored_record))
