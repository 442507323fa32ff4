"""The project's component types: an endpoint, a campaign and a diagnostic recipe.

Each instance is one ``defs.yaml`` under ``definitions/`` (``dg scaffold defs
dagster_project.lib.Endpoint endpoints/<name>``). Its ``attributes`` are validated by Dagster against
the pydantic model in ``specs.config`` (unknown fields are errors, reported with file and
line by ``dg check defs``). An endpoint builds its whole asset group; campaigns and recipes build no
definitions of their own but shape their endpoint's group (campaign settings, recipes) and are
checked against the other files (a campaign naming an undeclared endpoint or recipe is an error).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

import dagster as dg
from dagster.components.component.component import Component
from dagster.components.core.component_tree import ComponentTree
from dagster.components.scaffold.scaffold import ScaffoldRequest, scaffold_with
from pydantic import BaseModel

from specs.config import CampaignSpec, DefinitionError, DefinitionIssue, DefinitionSet, EndpointSpec, RecipeSpec
from dagster_project.factory import endpoint_definitions


class Declaration(Component):
    """A component whose attributes are one of the project's pydantic specs (``spec``)."""

    spec_model: ClassVar[type[BaseModel]]
    collection: ClassVar[str]  # the DefinitionSet table it lands in

    def __init__(self, spec, source: Path, positions=None):
        self.spec = spec
        self.source = source  # its defs.yaml
        self._positions = positions  # Dagster's source positions of the file, for file:line errors

    @classmethod
    def get_model_cls(cls) -> type[BaseModel]:
        return cls.spec_model

    @classmethod
    def load(cls, attributes, context: dg.ComponentLoadContext) -> "Declaration":
        positions = context.resolution_context.source_position_tree
        source = Path(positions.position.filename) if positions else context.path / "defs.yaml"
        if attributes is None:  # Dagster validates only a non-empty attributes block
            raise DefinitionError(
                [
                    DefinitionIssue(
                        source, 1, "attributes", f"required: the {cls.spec_model.__name__} fields (see specs/config.py)"
                    )
                ]
            )
        return cls(attributes, source, positions)

    def line_of(self, *path) -> int:
        """The line of ``attributes.<path>`` in this component's file (the nearest one that exists)."""
        if self._positions is None:
            return 1
        position, _ = self._positions.lookup_closest_and_path(["attributes", *path], None)
        return position.start.line

    def reference_issues(self, definitions: DefinitionSet) -> list[DefinitionIssue]:
        """Problems that span files (a name this declaration uses but nobody declares)."""
        return []

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        _, issues = collect(context.component_tree.get_all_components(Declaration))
        mine = [issue for issue in issues if issue.file == self.source]  # each file reports its own
        if mine:
            raise DefinitionError(mine)
        return dg.Definitions()


class EndpointScaffolder(dg.Scaffolder):
    """A runnable endpoint (the tiny random model on vLLM, bundled sample traffic) to edit."""

    def scaffold(self, request: ScaffoldRequest) -> None:
        dg.scaffold_component(
            request,
            {
                "name": request.target_path.name,
                "description": "TODO: what this endpoint serves",
                "model": {"path": "builtin:tiny-random", "served_name": "tiny-random"},
                "engine": {"kind": "vllm", "args": ["--max-num-seqs", "32", "--dtype", "float32"]},
                "hardware": {"gpu_type": "cpu", "gpu_count": 0},
                "sla": {"ttft_ms": 1000, "itl_ms": 200, "max_error_rate": 0.01},
                "traffic": {"kind": "sample"},
            },
        )


@scaffold_with(EndpointScaffolder)
class Endpoint(Declaration):
    """An LLM serving endpoint (model, engine, hardware, SLA, traffic) and its research asset group:
    replay pool, baseline sweeps, noise floor, load curve, diagnosis, proposals, candidates, verdicts,
    confirmed baseline, review report, campaign, and the drift and continuation sensors."""

    spec_model = EndpointSpec
    collection = "endpoints"

    def reference_issues(self, definitions: DefinitionSet) -> list[DefinitionIssue]:
        """An engine kind no adapter is registered for (engines.registry), or what that engine's adapter
        says the declaration gets wrong (``EngineAdapter.spec_problems``)."""
        from engines.registry import ADAPTERS

        kind = self.spec.engine.kind
        if kind in ADAPTERS:
            return [
                DefinitionIssue(self.source, self.line_of(*path), "attributes." + ".".join(path), message)
                for path, message in ADAPTERS[kind].spec_problems(self.spec)
            ]
        return [
            DefinitionIssue(
                self.source,
                self.line_of("engine", "kind"),
                "attributes.engine.kind",
                f"unknown engine kind {kind!r}; known: {', '.join(sorted(ADAPTERS))} "
                "(an engine is one adapter module registered in engines/registry.py)",
            )
        ]

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        definitions, _ = collect(context.component_tree.get_all_components(Declaration))
        super().build_defs(context)  # its own problems (a duplicate name)
        return endpoint_definitions(
            self.spec, definitions, reread=lambda: read_endpoint(context.component_tree, self.source).spec
        )


class CampaignParams(BaseModel):
    endpoint: str | None = None  # the endpoint it researches (default: the folder name without _default)


class CampaignScaffolder(dg.Scaffolder[CampaignParams]):
    """A campaign on an endpoint, with the default budget and proposer."""

    @classmethod
    def get_scaffold_params(cls) -> type[CampaignParams]:
        return CampaignParams

    def scaffold(self, request: ScaffoldRequest[CampaignParams]) -> None:
        name = request.target_path.name
        endpoint = request.params.endpoint if request.params else None
        dg.scaffold_component(
            request,
            {
                "name": name,
                "endpoint": endpoint or name.removesuffix("_default"),
                "deadline_minutes": 60,
                "gpu_hours": 1.0,
                "max_concurrent_gpus": 1,
                "subagents": 3,
                "proposer": "auto",
            },
        )


@scaffold_with(CampaignScaffolder)
class Campaign(Declaration):
    """A research campaign's settings on one endpoint: deadline, GPU budget and cap, subagents, repeats,
    rounds, proposer, recipes. The endpoint's first declared campaign sets its asset group's research
    settings and its GPU pool limit."""

    spec_model = CampaignSpec
    collection = "campaigns"

    def reference_issues(self, definitions: DefinitionSet) -> list[DefinitionIssue]:
        issues = []
        if self.spec.endpoint not in definitions.endpoints:
            issues.append(
                DefinitionIssue(
                    self.source,
                    self.line_of("endpoint"),
                    "attributes.endpoint",
                    f"unknown endpoint {self.spec.endpoint!r}; declared: "
                    f"{', '.join(sorted(definitions.endpoints)) or 'none'}",
                )
            )
        for index, recipe in enumerate(self.spec.recipes):
            if recipe not in definitions.recipes:
                issues.append(
                    DefinitionIssue(
                        self.source,
                        self.line_of("recipes", index),
                        "attributes.recipes",
                        f"unknown recipe {recipe!r}; declared: {', '.join(sorted(definitions.recipes)) or 'none'}",
                    )
                )
        return issues


class DiagnosticRecipe(Declaration):
    """A diagnostic workload: one property of the traffic varied, the rest fixed (research.workloads)."""

    spec_model = RecipeSpec
    collection = "recipes"


def read_endpoint(tree: ComponentTree, file: Path) -> Endpoint:
    """The endpoint in ``file`` as it is on disk now, validated as ``dg`` validates it: a fresh tree
    over the same defs folder (nothing cached) loads just that file."""
    fresh = ComponentTree.from_module(tree.defs_module, tree.project_root)
    component = fresh.load_component(Path(file).parent.relative_to(tree.defs_module_path))
    if not isinstance(component, Endpoint):
        raise DefinitionError([DefinitionIssue(Path(file), 1, "type", "not a dagster_project.lib.Endpoint")])
    return component


def declared(components: Iterable[Declaration]) -> DefinitionSet:
    """Every declaration in one DefinitionSet; DefinitionError (file:line) for any check that spans files."""
    result, issues = collect(components)
    if issues:
        raise DefinitionError(issues)
    return result


def collect(components: Iterable[Declaration]) -> tuple[DefinitionSet, list[DefinitionIssue]]:
    """Every declaration in one DefinitionSet, and the problems that span files (duplicate names,
    references to undeclared endpoints or recipes)."""
    result, issues, components = DefinitionSet(), [], sorted(components, key=lambda c: str(c.source))
    for component in components:
        table = getattr(result, component.collection)
        if component.spec.name in table:
            issues.append(
                DefinitionIssue(
                    component.source,
                    component.line_of("name"),
                    "attributes.name",
                    f"{component.spec.name!r} already declared in {result.sources[component.spec.name]}",
                )
            )
            continue
        table[component.spec.name] = component.spec
        result.sources[component.spec.name] = str(component.source)
    for component in components:
        issues.extend(component.reference_issues(result))
    return result, issues
