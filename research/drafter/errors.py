"""The drafter stage's one error (research.drafter): a step could not run."""

from __future__ import annotations


class DrafterError(RuntimeError):
    """A drafter step could not run (engine refused, training crashed, no data)."""
