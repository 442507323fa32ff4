"""YAML declarations (defs.yaml of the component types): bad input names file:line and field; the
shipped defs folder loads; checks that span files (a campaign naming an undeclared endpoint or recipe)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specs.config import DefinitionError
from dagster_project.lib import load_definitions
from specs.paths import definitions_dir

GOOD = """\
type: dagster_project.lib.Endpoint
attributes:
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
    path = tmp_path / "endpoints" / "demo" / "defs.yaml"
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
    assert (issue.line, issue.field) == (8, "attributes.engine.max_num_seqs")
    assert "unknown field" in issue.message and "args" in issue.message


def test_wrong_type(tmp_path: Path) -> None:
    [issue] = issues_of(tmp_path, GOOD.replace("ttft_ms: 1000", "ttft_ms: fast"))
    assert (issue.line, issue.field) == (10, "attributes.sla.ttft_ms")
    assert "number" in issue.message


def test_missing_sla(tmp_path: Path) -> None:
    [issue] = issues_of(tmp_path, GOOD.replace("  sla:\n    ttft_ms: 1000\n", ""))
    assert issue.field == "attributes.sla" and issue.message == "required field is missing"
    assert issue.line == 2  # the `attributes:` whose body lacks it


@pytest.mark.parametrize(
    "bad_args, fragment",
    [
        ('"--max-num-seqs 2"', "write a YAML list"),  # a shell string, not an argument list
        ("[2]", "valid string"),  # a number where a string belongs
    ],
)
def test_engine_args_must_be_a_list_of_strings(tmp_path: Path, bad_args: str, fragment: str) -> None:
    issues = issues_of(tmp_path, GOOD.replace('["--max-num-seqs", "2"]', bad_args))
    assert len(issues) == 1
    assert issues[0].line == 8 and issues[0].field.startswith("attributes.engine.args")
    assert fragment in issues[0].message


def test_every_error_in_a_file_is_reported(tmp_path: Path) -> None:
    text = GOOD.replace("ttft_ms: 1000", "ttft_ms: -1").replace("kind: sample", "kind: kafka")
    fields = {issue.field for issue in issues_of(tmp_path, text)}
    assert {"attributes.sla.ttft_ms", "attributes.traffic.kind"} <= fields


def test_not_yaml(tmp_path: Path) -> None:
    [issue] = issues_of(tmp_path, GOOD.replace("    kind: sample", "    kind: [sample"))
    assert "not valid YAML" in issue.message and issue.line >= 11


def test_external_engine_needs_url(tmp_path: Path) -> None:
    [issue] = issues_of(tmp_path, GOOD.replace("kind: vllm", "kind: external"))
    assert issue.field == "attributes.engine" and "engine.url" in issue.message


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
    assert (issue.line, issue.field) == (16, "attributes.hardware.price_per_gpu_hour_usd")


CAMPAIGN = """\
type: dagster_project.lib.Campaign
attributes:
  name: demo_default
  endpoint: {endpoint}
  recipes: [prompt_length_scan, {recipe}]
"""


def test_campaign_naming_an_undeclared_endpoint_or_recipe_names_its_line(tmp_path: Path) -> None:
    write(tmp_path, GOOD)
    recipe = definitions_dir() / "recipes" / "prompt_length_scan" / "defs.yaml"
    (tmp_path / "recipes" / "prompt_length_scan").mkdir(parents=True)
    (tmp_path / "recipes" / "prompt_length_scan" / "defs.yaml").write_text(recipe.read_text())
    campaign = tmp_path / "campaigns" / "demo_default" / "defs.yaml"
    campaign.parent.mkdir(parents=True)
    campaign.write_text(CAMPAIGN.format(endpoint="demo", recipe="prompt_length_scan"))
    assert load_definitions(tmp_path).campaigns["demo_default"].endpoint == "demo"
    campaign.write_text(CAMPAIGN.format(endpoint="nowhere", recipe="no_such_recipe"))
    with pytest.raises(DefinitionError) as info:
        load_definitions(tmp_path)
    by_field = {i.field: i for i in info.value.issues}
    assert (by_field["attributes.endpoint"].file, by_field["attributes.endpoint"].line) == (campaign, 4)
    assert "unknown endpoint 'nowhere'; declared: demo" in by_field["attributes.endpoint"].message
    assert by_field["attributes.recipes"].line == 5 and "no_such_recipe" in by_field["attributes.recipes"].message


def test_old_layout_files_are_refused_not_ignored(tmp_path: Path) -> None:
    old = tmp_path / "endpoints" / "demo.yaml"
    old.parent.mkdir(parents=True)
    old.write_text(GOOD.replace("type: dagster_project.lib.Endpoint\nattributes:", "endpoint:"))
    with pytest.raises(DefinitionError) as info:
        load_definitions(tmp_path)
    [issue] = info.value.issues
    assert issue.file == old and "old layout" in issue.message


def test_migrate_keeps_the_body_and_comments(tmp_path: Path) -> None:
    from dagster_project.lib.migrate import migrate_folder

    old = tmp_path / "old" / "endpoints" / "demo.yaml"
    old.parent.mkdir(parents=True)
    old.write_text(
        "# why this endpoint exists\n" + GOOD.replace("type: dagster_project.lib.Endpoint\nattributes:", "endpoint:")
    )
    [(source, written)] = migrate_folder(tmp_path / "old", tmp_path / "new")
    assert written == tmp_path / "new" / "endpoints" / "demo" / "defs.yaml"
    assert written.read_text() == "# why this endpoint exists\n" + GOOD
    assert load_definitions(tmp_path / "new").endpoint("demo").engine.args == ["--max-num-seqs", "2"]
