"""YAML definitions: bad input names file:line and field; the shipped definitions load."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoresearch.config import DefinitionError, load_definitions
from autoresearch.paths import definitions_dir

GOOD = """\
endpoint:
  name: demo
  model:
    path: builtin:tiny-random
  engine:
    kind: vllm
    args: ["--max-num-seqs", "2"]
  sla:
    ttft_ms: 1000
  traffic:
    kind: sample
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "endpoints" / "demo.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def issues_of(tmp_path: Path, text: str) -> list:
    path = write(tmp_path, text)
    with pytest.raises(DefinitionError) as info:
        load_definitions(tmp_path)
    for issue in info.value.issues:
        assert str(issue).startswith(f"{path}:{issue.line}: ")
    return info.value.issues


def test_good_file_loads(tmp_path: Path) -> None:
    write(tmp_path, GOOD)
    spec = load_definitions(tmp_path).endpoint("demo")
    assert spec.engine.args == ["--max-num-seqs", "2"]


def test_unknown_field_names_line_and_allowed_fields(tmp_path: Path) -> None:
    [issue] = issues_of(tmp_path, GOOD.replace("    kind: vllm\n", "    kind: vllm\n    max_num_seqs: 4\n"))
    assert (issue.line, issue.field) == (7, "endpoint.engine.max_num_seqs")
    assert "unknown field" in issue.message and "args" in issue.message


def test_wrong_type(tmp_path: Path) -> None:
    [issue] = issues_of(tmp_path, GOOD.replace("ttft_ms: 1000", "ttft_ms: fast"))
    assert (issue.line, issue.field) == (9, "endpoint.sla.ttft_ms")
    assert "number" in issue.message


def test_missing_sla(tmp_path: Path) -> None:
    [issue] = issues_of(tmp_path, GOOD.replace("  sla:\n    ttft_ms: 1000\n", ""))
    assert issue.field == "endpoint.sla" and issue.message == "required field is missing"
    assert issue.line == 1  # the `endpoint:` whose body lacks it


@pytest.mark.parametrize("bad_args, fragment", [
    ('"--max-num-seqs 2"', "valid list"),  # a shell string, not an argument list
    ("[2]", "valid string"),  # a number where a string belongs
])
def test_engine_args_must_be_a_list_of_strings(tmp_path: Path, bad_args: str, fragment: str) -> None:
    issues = issues_of(tmp_path, GOOD.replace('["--max-num-seqs", "2"]', bad_args))
    assert len(issues) == 1
    assert issues[0].line == 7 and issues[0].field.startswith("endpoint.engine.args")
    assert fragment in issues[0].message


def test_every_error_in_a_file_is_reported(tmp_path: Path) -> None:
    text = GOOD.replace("ttft_ms: 1000", "ttft_ms: -1").replace("kind: sample", "kind: kafka")
    fields = {issue.field for issue in issues_of(tmp_path, text)}
    assert {"endpoint.sla.ttft_ms", "endpoint.traffic.kind"} <= fields


def test_not_yaml(tmp_path: Path) -> None:
    [issue] = issues_of(tmp_path, GOOD.replace("    kind: sample", "    kind: [sample"))
    assert "not valid YAML" in issue.message and issue.line >= 11


def test_external_engine_needs_url(tmp_path: Path) -> None:
    [issue] = issues_of(tmp_path, GOOD.replace("kind: vllm", "kind: external"))
    assert issue.field == "endpoint.engine" and "engine.url" in issue.message


def test_shipped_definitions_load() -> None:
    defs = load_definitions(definitions_dir())
    assert {"support_smollm", "tiny_random"} <= set(defs.endpoints)
    for campaign in defs.campaigns.values():
        assert campaign.endpoint in defs.endpoints
    for spec in defs.endpoints.values():
        assert all(isinstance(arg, str) for arg in spec.engine.args)


def test_shipped_engine_args_are_known_flags() -> None:
    from engines import adapter_for

    defs = load_definitions(definitions_dir())
    for spec in defs.endpoints.values():
        assert adapter_for(spec, 0, Path(".")).validate_flags(spec.engine.args) == [], spec.name


def test_price_per_gpu_hour_is_optional_positive_and_leaves_the_config_hash(tmp_path: Path) -> None:
    priced = GOOD + "  hardware:\n    gpu_type: H200\n    gpu_count: 2\n    price_per_gpu_hour_usd: 3.5\n"
    write(tmp_path, priced)
    spec = load_definitions(tmp_path).endpoint("demo")
    assert spec.hardware.price_per_gpu_hour_usd == 3.5
    unpriced = spec.model_copy(update={"hardware": spec.hardware.model_copy(update={"price_per_gpu_hour_usd": None})})
    assert spec.launch_config_hash() == unpriced.launch_config_hash()  # a price changes no engine behaviour
    [issue] = issues_of(tmp_path, priced.replace("3.5", "-1"))
    assert (issue.line, issue.field) == (15, "endpoint.hardware.price_per_gpu_hour_usd")
