"""An overlay for `transformers serve`: set ContinuousBatchingConfig fields the CLI does not expose.

`transformers serve` builds its ContinuousBatchingConfig from five flags only (``cli/serve.py``).
The rest (``q_padding_interval_size``, ``kv_padding_interval_size``, ``scheduler_type``,
``default_compile_level``, ``max_requests_per_batch``, ``use_async_batching``, ...) decide its padded
shapes, its CUDA-graph captures and its memory. Put this folder on the engine's PYTHONPATH and give
the fields as a JSON object:

    engine:
      env: {PYTHONPATH: engines/patches/transformers_cb_config,
            AUTORESEARCH_CB_CONFIG: '{"q_padding_interval_size": 512, "kv_padding_interval_size": 4096}'}

Each field is set after the config's own ``__post_init__`` has run, so derived defaults see the CLI's
values and the overlay wins. A field the installed version does not have is an error: the engine
exits at once with its name (a setting the product does not honour is never silently dropped). Only
the engine process it is given to is touched; the installed engine is not.
"""

import json
import os
import sys


def _apply() -> str:
    raw = os.environ.get("AUTORESEARCH_CB_CONFIG")
    if not raw:
        return ""
    fields = json.loads(raw)
    if not isinstance(fields, dict):
        raise SystemExit("[autoresearch patch] AUTORESEARCH_CB_CONFIG must be a JSON object of field: value")
    try:
        from transformers.generation import configuration_utils as cu
    except Exception:  # noqa: BLE001 - not a transformers interpreter: nothing to configure
        return ""
    import dataclasses

    config = cu.ContinuousBatchingConfig
    known = {f.name for f in dataclasses.fields(config)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise SystemExit(
            f"[autoresearch patch] ContinuousBatchingConfig has no field(s) {unknown} in this "
            f"transformers; known: {sorted(known)}"
        )
    original = config.__post_init__

    def post_init(self):
        original(self)
        for name, value in fields.items():
            setattr(self, name, value)

    config.__post_init__ = post_init
    return "ContinuousBatchingConfig overlay: " + ", ".join(f"{k}={v!r}" for k, v in sorted(fields.items()))


_message = _apply()  # a SystemExit here stops the engine with the reason: a refused setting
if _message:
    print(f"[autoresearch patch] {_message}", file=sys.stderr, flush=True)
