"""Engine-internal settings as candidates through the one harness, on a real `transformers serve`
(tiny random model on this CPU): the overlay's settings reach the engine process, the content hashes of
every overlay it ran with are in the experiment's identity, and an overlay that cannot apply is
`invalid` with the engine's own words, before anything is measured."""

from __future__ import annotations

import pytest

from specs.config import DefinitionSet
from engines import overlays
from research.harness import run_candidate


def _short(spec):
    sweep = dict(rates=[0.5], step_duration_s=4, min_requests=2, warmup_requests=1, refine_steps=0, max_steps=2)
    return spec.model_copy(update={"sweep": spec.sweep.model_copy(update=sweep)})


@pytest.mark.engine
@pytest.mark.timeout(900)
def test_an_internal_setting_runs_through_the_harness_with_its_hash_and_a_bad_one_is_invalid(
    engine_slot, definitions: DefinitionSet, tmp_path
):
    from autoresearch.workflows import load_pool
    from research.rules.internal import setting_for

    engine_slot.release()  # one engine at a time on this machine
    spec = _short(definitions.endpoint("tiny_transformers"))
    pool = load_pool(spec)
    setting = setting_for("transformers", "internal_prefill_first")
    args = [*spec.engine.args, overlays.FLAG, setting.overlay_arg()]
    lines: list[str] = []
    result = run_candidate(
        spec, args, pool, None, 1, capture=True, soak=False, workdir=tmp_path / "good", progress=lines.append
    )
    log = "\n".join(lines)
    assert result.verdict != "invalid", log
    applied = overlays.REGISTRY[setting.overlay]
    assert result.identity["overlays"] == {
        setting.overlay: applied.sha256(),
        "transformers_cb_probe": overlays.REGISTRY["transformers_cb_probe"].sha256(),
    }
    engine_log = (tmp_path / "good").rglob("*.log")
    said = "\n".join(p.read_text(errors="replace") for p in engine_log)
    assert "ContinuousBatchingConfig overlay: scheduler_type='prefill_first'" in said  # applied in the engine
    assert result.sweeps and result.sweeps[0].engine_internals is not None  # and its internals came back

    bad = [*spec.engine.args, overlays.FLAG, 'transformers_cb_config={"no_such_field": 1}']
    refused = run_candidate(spec, bad, pool, None, 1, capture=True, soak=False, workdir=tmp_path / "bad")
    assert refused.verdict == "invalid" and refused.invalid_reason.startswith("launch failed"), refused
    assert "no_such_field" in (refused.log_tail or "") + refused.invalid_reason
    assert not refused.sweeps  # nothing was measured on an engine that never started


@pytest.mark.engine
@pytest.mark.timeout(900)
def test_a_patch_recipe_runs_through_the_harness_with_its_hash_and_a_patch_that_does_not_apply_is_invalid(
    engine_slot, definitions: DefinitionSet, tmp_path, monkeypatch
):
    """The vLLM adapter's first recipe (the issue-55005 fix) as the rules write it, on the tiny model; then a
    patch written for a vLLM that is not this one (its target function does not exist here)."""
    from autoresearch.workflows import load_pool
    from engines.registry import ADAPTERS

    engine_slot.release()  # one engine at a time on this machine
    spec = _short(definitions.endpoint("tiny_random"))
    pool = load_pool(spec)
    (recipe,) = [r for r in ADAPTERS["vllm"].patch_recipes if r.name == "vllm_issue_55005"]
    args = [*spec.engine.args, overlays.FLAG, recipe.overlay_arg()]
    result = run_candidate(spec, args, pool, None, 1, capture=True, soak=False, workdir=tmp_path / "recipe")
    assert result.verdict != "invalid", result.invalid_reason
    assert result.identity["overlays"] == {recipe.overlay: overlays.REGISTRY[recipe.overlay].sha256()}
    said = "\n".join(p.read_text(errors="replace") for p in (tmp_path / "recipe").rglob("*.log"))
    assert "vllm issue 55005 fix:" in said  # the patch ran in the engine and said what it did

    stale = tmp_path / "patches" / "stale_fix"
    stale.mkdir(parents=True)
    # the patch checks its target the way a careful author would: a module that will not import at site time
    # (one full suite saw a ModuleNotFoundError there) is "does not apply" too, with the same reason
    (stale / "sitecustomize.py").write_text(
        "try:\n"
        "    from vllm.utils import cpu_triton_utils\n"
        "except ImportError:\n"
        "    cpu_triton_utils = None\n"
        "if not hasattr(cpu_triton_utils, '_expand_kernel_v2'):\n"
        "    raise RuntimeError('stale_fix does not apply: vllm.utils.cpu_triton_utils has no _expand_kernel_v2')\n"
    )
    monkeypatch.setitem(
        overlays.REGISTRY,
        "stale_fix",
        overlays.Overlay("stale_fix", frozenset({"vllm"}), "patch", "a fix for another vLLM", root=stale.parent),
    )
    bad = [*spec.engine.args, overlays.FLAG, "stale_fix"]
    refused = run_candidate(spec, bad, pool, None, 1, capture=True, soak=False, workdir=tmp_path / "stale")
    assert refused.verdict == "invalid" and refused.invalid_reason.startswith("launch failed"), refused
    assert "_expand_kernel_v2" in (refused.log_tail or "") + refused.invalid_reason  # with the reason
    assert not refused.sweeps
