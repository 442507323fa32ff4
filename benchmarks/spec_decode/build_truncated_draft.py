"""Build a layer-truncated SmolLM2 draft (first N layers, shared embeddings/lm_head, same tokenizer)."""

import json
import shutil
import sys
from pathlib import Path
from safetensors.torch import load_file, save_file

src, dst, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
dst.mkdir(parents=True, exist_ok=True)
cfg = json.loads((src / "config.json").read_text())
cfg["num_hidden_layers"] = n
(dst / "config.json").write_text(json.dumps(cfg, indent=1))
w = load_file(src / "model.safetensors")
keep = {k: v for k, v in w.items() if not k.startswith("model.layers.") or int(k.split(".")[2]) < n}
save_file(keep, dst / "model.safetensors", metadata={"format": "pt"})
for f in ["tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja"]:
    if (src / f).exists():
        shutil.copy(src / f, dst / f)
print(dst, len(keep), "tensors", sum(v.numel() for v in keep.values()) / 1e6, "M params")
