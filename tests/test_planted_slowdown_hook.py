"""The planted slowdown's GPU-stream hook (engines/patches/planted_slowdown) patches whichever model runner
vLLM imports: the V1 runner, or Model Runner V2, which vLLM 0.24 picks by default for most models (on the
H100 the hook waited for the V1 module alone, and B ran unslowed). Checked in the engine's own Python (it
has torch) on stand-in modules of the two names: no GPU is touched until a forward pass."""

from __future__ import annotations

import os
import subprocess

import pytest

from specs import paths

HOOK = paths.REPO_ROOT / "engines" / "patches" / "planted_slowdown"
RUNNER = "class GPUModelRunner:\n    def execute_model(self, *a, **k):\n        return 'ran'\n"


@pytest.mark.parametrize("module", ["vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.gpu.model_runner"])
def test_the_hook_patches_either_model_runner_when_vllm_imports_it(tmp_path, module):
    if not paths.engine_python().exists():
        pytest.skip("no engine environment (scripts/setup.sh makes it)")
    *packages, leaf = module.split(".")
    folder = tmp_path
    for part in packages:
        folder = folder / part
        folder.mkdir(exist_ok=True)
        (folder / "__init__.py").write_text("")
    (folder / f"{leaf}.py").write_text(RUNNER)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HOOK), str(tmp_path)]),
        "AUTORESEARCH_PLANTED_SLOWDOWN_ON": "gpu_stream",
        "AUTORESEARCH_PLANTED_SLOWDOWN_FILE": str(tmp_path / "fraction"),
    }
    (tmp_path / "fraction").write_text("0")
    code = f"import {module} as m; print(m.GPUModelRunner.execute_model.__name__, m.GPUModelRunner().execute_model())"
    done = subprocess.run(
        [str(paths.engine_python()), "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["slowed", "ran"]  # wrapped, and at fraction 0 the pass runs as it was
    assert f"planted slowdown on the GPU stream applied ({module})" in done.stderr
