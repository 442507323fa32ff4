"""What a proposer rule sees: the diagnosis, the engine's kind, vocabulary and current arguments.

Apart from the techniques and the proposer so that a new kind of technique (a flag, an engine-internal
change) is written against one small record, and the proposer builds it in one place (``context_for``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specs.engine_args import REMOVE, parse_args
from engines.base import ArgDiff, Knob, Vocabulary
from engines.registry import ADAPTERS
from research.proposals import Diagnosis, Intervention


@dataclass
class Context:
    """What a technique needs to write an exact diff: the diagnosis, the engine's vocabulary, its arguments."""

    diagnosis: Diagnosis
    kind: str
    args: dict[str, str | None]
    gpu_count: int  # 0 = CPU host
    vocab: Vocabulary = Vocabulary()

    @property
    def cpu(self) -> bool:
        return self.gpu_count == 0

    def int_arg(self, flag: str, default: int | None = None) -> int | None:
        try:
            return int(self.args[flag]) if self.args.get(flag) is not None else default
        except ValueError:
            return default

    def knob(self, knob: Knob | None) -> int | None:
        """The knob's current value (its default when unset); None when the engine has no such knob."""
        return None if knob is None else self.int_arg(knob.flag, knob.default(self.cpu))

    def changes(self, diff: ArgDiff | None) -> bool:
        """Whether applying ``diff`` would change the arguments (a switch that is off)."""
        if not diff:
            return False
        return any(
            (flag in self.args) if value == REMOVE else (flag not in self.args or self.args[flag] != value)
            for flag, value in diff.items()
        )

    def stat(self, key: str, default: float = 0.0) -> float:
        value = self.diagnosis.engine_stats.get(key, self.diagnosis.request_stats.get(key))
        return default if value is None else float(value)


#: one exact change: the intervention for these arguments, or None where it does not apply
Technique = Callable[[Context], Intervention | None]


def context_for(diagnosis: Diagnosis, gpu_count: int) -> Context:
    """The context of ``diagnosis``'s engine: its adapter's vocabulary (none for an unknown kind)."""
    cls = ADAPTERS.get(diagnosis.engine_kind)
    return Context(
        diagnosis=diagnosis,
        kind=diagnosis.engine_kind,
        args=parse_args(diagnosis.engine_args),
        gpu_count=gpu_count,
        vocab=cls.vocabulary if cls is not None else Vocabulary(),
    )
