"""Component types of this project (``[tool.dg.project] registry_modules``) and the loader the CLI
and the code location share: ``dg list components`` shows Endpoint, Campaign and DiagnosticRecipe."""

from dagster_project.lib.components import Campaign, DiagnosticRecipe, Endpoint
from dagster_project.lib.folder import defs_tree, load_definitions

__all__ = ["Campaign", "DiagnosticRecipe", "Endpoint", "defs_tree", "load_definitions"]
