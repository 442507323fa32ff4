"""Drafter stage: on-policy data -> a trained draft model -> its verdict through the one harness.

A speculative-decoding drafter trained on the endpoint's own traffic (research.drafter): the
target's replies to replay-pool prompts, a layer-truncated copy of the target fine-tuned on them,
acceptance per draft position offline, then the drafter as a lossless candidate judged against the
working baseline's noise floor exactly as proposals are (autoresearch.workflows.run_proposal).
Every drafter and its verdict go to the research memory's ``drafters`` table, which the drift
sensors mark stale when the model or the traffic moves. Built only for endpoints whose engine
adapter can serve a trained draft model (vLLM); the proposer's drafter rule also sends a fresh,
unjudged drafter to the research round's candidates.
"""

import dagster as dg

from assets.common import key, refuse_unrunnable, table
from specs import paths
from specs.config import DefinitionSet, EndpointSpec
from assets.pools import pool_for
from loadgen.results import NoiseFloor
from memory_db.records import DrafterRecord
from research.drafter import OnPolicyData, cannot_serve_drafter
from research.loop import CandidateRun


class DrafterDataConfig(dg.Config):
    """How much on-policy data to ask the engine for."""

    examples: int = 120  # replies of the target to the first pool requests (the last `heldout` are held out)
    max_tokens: int | None = None  # cap on each reply (None: the pool's logged max_tokens)
    concurrency: int = 4  # requests in flight while generating


class DrafterTrainConfig(dg.Config):
    """The draft model: the target's first `layers` layers, trained `steps` steps."""

    heldout: int = 20
    layers: int = 4
    steps: int = 300
    lr: float = 1e-3
    k: int = 3  # tokens drafted per round (num_speculative_tokens)
    control: bool = True  # also evaluate the untrained truncation, the control a trained drafter must beat


class DrafterVerdictConfig(dg.Config):
    repeats: int | None = None  # candidate sweeps (None: the endpoint's campaign repeats)


def job_name(endpoint: EndpointSpec) -> str:
    return f"{endpoint.name}__drafter_job"


def build(endpoint: EndpointSpec, definitions: DefinitionSet) -> dg.Definitions:
    if cannot_serve_drafter(endpoint.engine.kind):
        return dg.Definitions()
    name = endpoint.name
    settings = definitions.campaign_of(endpoint.name)

    @dg.asset(
        key=key(name, "drafter_data"),
        group_name=name,
        deps=[key(name, "replay_pool")],
        pool=pool_for(endpoint),
        kinds={endpoint.engine.kind},
        description=f"On-policy training data for a drafter: {name}'s engine answers replay-pool requests as "
        "logged (sampling settings, tools, response format); the prompt and reply token ids are kept.",
    )
    def drafter_data(context: dg.AssetExecutionContext, config: DrafterDataConfig) -> OnPolicyData:
        refuse_unrunnable(endpoint)
        from autoresearch.workflows import load_pool, working_spec
        from research.drafter import DrafterError, onpolicy_data

        spec = working_spec(endpoint)
        try:
            data = onpolicy_data(
                spec,
                load_pool(spec),
                paths.home() / "drafters" / name,
                examples=config.examples,
                max_tokens=config.max_tokens,
                concurrency=config.concurrency,
                progress=context.log.info,
            )
        except DrafterError as exc:
            raise dg.Failure(str(exc)) from None
        context.add_output_metadata(
            {
                "examples": data.examples,
                "reply_tokens": data.reply_tokens,
                "prompt_tokens_mean": round(data.prompt_tokens_mean, 1),
                "data_signature": data.signature,
                "generation_s": data.data_s,
                "file": dg.MetadataValue.path(data.path),
            }
        )
        return data

    @dg.asset(
        key=key(name, "drafter"),
        group_name=name,
        kinds={"torch", "duckdb"},
        ins={"drafter_data": dg.AssetIn(key(name, "drafter_data"))},
        description="A draft model trained on the on-policy data (the target's first layers, its embeddings and "
        "head, next-token loss on the replies), its acceptance per draft position on held-out replies "
        "against the untrained control, recorded in the research memory's drafters table.",
    )
    def drafter(
        context: dg.AssetExecutionContext, config: DrafterTrainConfig, drafter_data: OnPolicyData
    ) -> DrafterRecord:
        from autoresearch.workflows import working_spec
        from memory_db.store import MemoryStore
        from research.drafter import DrafterError, break_even_acceptance, train_drafter

        spec = working_spec(endpoint)
        try:
            rec = train_drafter(
                spec,
                drafter_data,
                paths.home() / "drafters" / name,
                heldout=config.heldout,
                layers=config.layers,
                steps=config.steps,
                lr=config.lr,
                k=config.k,
                baseline=config.control,
                progress=context.log.info,
            )
        except DrafterError as exc:
            raise dg.Failure(str(exc)) from None
        MemoryStore(paths.memory_db_path()).record_drafter(rec)
        offline, control = rec.acceptance_offline, rec.train.get("untrained") or {}
        rows = [
            {"position": j, "trained": p, "untrained": (control.get("accepted_per_position") or [None] * (j + 1))[j]}
            for j, p in enumerate(offline["accepted_per_position"])
        ]
        context.add_output_metadata(
            {
                "drafter_id": rec.drafter_id,
                "path": dg.MetadataValue.path(rec.path),
                "acceptance_length": offline["acceptance_length"],
                "untrained_acceptance_length": control.get("acceptance_length"),
                "break_even_acceptance_length": round(
                    break_even_acceptance(rec.num_speculative_tokens, rec.train["draft_cost_ratio"]), 3
                ),
                "accepted_per_position": table(rows),
                "train_examples": rec.train_examples,
                "train_tokens": rec.train_tokens,
                "steps": rec.steps,
                "train_s": rec.train_s,
                "loss_first": rec.train.get("loss_first"),
                "loss_last": rec.train.get("loss_last"),
                "params_m": rec.train.get("params_m"),
            }
        )
        return rec

    @dg.asset(
        key=key(name, "drafter_verdict"),
        group_name=name,
        pool=pool_for(endpoint),
        kinds={endpoint.engine.kind},
        ins={"drafter": dg.AssetIn(key(name, "drafter")), "noise_floor": dg.AssetIn(key(name, "noise_floor"))},
        description="The drafter as a lossless candidate through the shared harness (correctness check on "
        "logprobs, repeated sweeps, verdict against the baseline's noise floor), with the acceptance the "
        "engine counted while serving it; the verdict is written to the drafter's record.",
    )
    def drafter_verdict(
        context: dg.AssetExecutionContext, config: DrafterVerdictConfig, drafter: DrafterRecord, noise_floor: NoiseFloor
    ) -> CandidateRun:
        refuse_unrunnable(endpoint)
        from autoresearch.workflows import load_pool, run_proposal, working_spec
        from memory_db.store import MemoryStore
        from research.drafter import drafter_proposal

        spec = working_spec(endpoint)
        proposal = drafter_proposal(spec, drafter)
        run = run_proposal(
            spec,
            proposal,
            load_pool(spec),
            noise_floor,
            repeats=config.repeats or settings.repeats,
            campaign_id=f"{name}-interactive",
            dagster_run_id=context.run.run_id,
            progress=context.log.info,
            extra_repeats=settings.extra_repeats,
        )
        verdict = run.verdict()
        judged = next(
            (r for r in MemoryStore(paths.memory_db_path()).drafters(name) if r.drafter_id == drafter.drafter_id),
            drafter,
        )
        context.add_output_metadata(
            {
                "verdict": verdict.verdict,
                "confirmed": verdict.confirmed,
                "capacity_ratio": verdict.capacity_ratio,
                "correctness": judged.correctness or "not checked",
                "skipped": run.skipped or "no",
                "acceptance_offline": drafter.acceptance_offline.get("acceptance_length"),
                "acceptance_served": judged.acceptance_served.get("acceptance_length"),
                "evidence": verdict.evidence or verdict.invalid_reason or verdict.reason or "",
                "change": proposal.intervention.describe(),
            }
        )
        return run

    job = dg.define_asset_job(
        job_name(endpoint),
        selection=[key(name, n) for n in ("drafter_data", "drafter", "drafter_verdict")],
        description=f"Train a drafter on {name}'s own traffic and judge it through the harness",
    )
    return dg.Definitions(assets=[drafter_data, drafter, drafter_verdict], jobs=[job])
