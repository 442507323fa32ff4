"""Bad input through the real ``autoresearch`` CLI (issues 23, 24): one ``error:`` line naming the file:line
or field, a ``hint:`` line, exit 2, no traceback unless ``--debug``. Nothing here starts an engine: each
bad input is refused before anything is launched (or written)."""

from __future__ import annotations

import copy
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CLI = Path(sys.executable).with_name("autoresearch")  # .venv/bin/autoresearch, the installed entry point


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def busy_port():
    """A port something listens on for the whole module."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture(scope="module")
def bad_defs(tmp_path_factory, busy_port) -> Path:
    """A defs folder of tiny_random variants, each with one bad input."""
    root = tmp_path_factory.mktemp("bad_defs")
    base = yaml.safe_load((REPO / "definitions" / "endpoints" / "tiny_random" / "defs.yaml").read_text())
    (root / "data" / "a_folder").mkdir(parents=True)
    unreadable = root / "data" / "unreadable.jsonl"
    unreadable.write_text('{"messages": []}\n')
    unreadable.chmod(0)
    (root / "model_without_weights").mkdir()
    (root / "model_without_weights" / "tokenizer.json").write_text("{}")
    (root / "model_without_weights" / "config.json").write_text("{}")

    def endpoint(name: str, **attributes) -> None:
        spec = copy.deepcopy(base)
        spec["attributes"].update(name=name, **attributes)
        (root / "defs" / "endpoints" / name).mkdir(parents=True)
        (root / "defs" / "endpoints" / name / "defs.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))

    endpoint("tiny_random")
    endpoint("missing_traffic", traffic={"kind": "request_log", "path": str(root / "data" / "no_such.jsonl")})
    endpoint("folder_traffic", traffic={"kind": "request_log", "path": str(root / "data" / "a_folder")})
    endpoint("unreadable_traffic", traffic={"kind": "request_log", "path": str(unreadable)})
    endpoint("no_weights", model={"path": str(root / "model_without_weights"), "served_name": "x"})
    endpoint("fixed_port", engine={**base["attributes"]["engine"], "port": busy_port})
    endpoint("unreachable", engine={"kind": "external", "url": f"http://127.0.0.1:{_free_port()}"})
    mooncake = root / "data" / "mooncake_trace.jsonl"  # a Mooncake trace declared as an Azure one
    mooncake.write_text('{"timestamp": 0, "input_length": 512, "output_length": 20, "hash_ids": [0, 1, 2, 3]}\n')
    endpoint("wrong_columns", traffic={"kind": "azure", "path": str(mooncake)})
    return root


def cli(root: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    from specs.paths import models_dir

    env = {
        **os.environ,
        "AUTORESEARCH_HOME": str(root / "home"),
        "AUTORESEARCH_DEFINITIONS": str(root / "defs"),
        "AUTORESEARCH_MODELS": str(models_dir()),
    }
    env.pop("AUTORESEARCH_MEMORY_DB", None)
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, cwd=REPO, env=env, timeout=timeout)


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one ``error:`` line of a clean exit-2 error (with a hint and no traceback)."""
    assert result.returncode == 2, (result.returncode, result.stdout[-2000:], result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert any(line.startswith("hint: ") for line in result.stderr.splitlines()), result.stderr
    return errors[0]


def defs_file(root: Path, endpoint: str) -> str:
    return str(root / "defs" / "endpoints" / endpoint / "defs.yaml")


def line_of(root: Path, endpoint: str, text: str) -> int:
    lines = Path(defs_file(root, endpoint)).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def test_unknown_engine_flag_from_set_is_refused_before_anything_runs(bad_defs):
    line = error_line(cli(bad_defs, "sweep", "tiny_random", "--set", "engine.no-such-flag=3"))
    assert line == "error: --no-such-flag is not a known vllm argument (--set engine.no-such-flag=3)"
    assert not (bad_defs / "home" / "pools").exists() and not (bad_defs / "home" / "runs").exists()


def test_debug_shows_the_traceback_of_the_same_error(bad_defs):
    for args in (["--debug", "sweep", "tiny_random"], ["sweep", "tiny_random", "--debug"]):
        result = cli(bad_defs, *args, "--set", "engine.max-num-seq=3")
        assert result.returncode == 2
        assert "Traceback (most recent call last)" in result.stderr
        assert "error: --max-num-seq is not a known vllm argument" in result.stderr
        assert "did you mean --max-num-seqs" in result.stderr


def test_missing_traffic_file_names_its_file_and_line(bad_defs):
    line = error_line(cli(bad_defs, "replay", "build", "missing_traffic"))
    where = f"{defs_file(bad_defs, 'missing_traffic')}:{line_of(bad_defs, 'missing_traffic', 'no_such.jsonl')}"
    assert line.startswith("error: traffic.path ") and "does not exist" in line
    assert f"({where} attributes.traffic.path)" in line


def test_a_folder_or_an_unreadable_file_where_the_traffic_file_should_be(bad_defs):
    line = error_line(cli(bad_defs, "replay", "build", "folder_traffic"))
    assert "is a folder, not a file" in line and f"{defs_file(bad_defs, 'folder_traffic')}:" in line
    if os.geteuid() != 0:  # root reads a chmod 000 file anyway
        line = error_line(cli(bad_defs, "replay", "build", "unreadable_traffic"))
        assert "is not readable (permission denied)" in line and "attributes.traffic.path" in line


def test_a_traffic_file_whose_columns_do_not_match_its_kind(bad_defs):
    line = error_line(cli(bad_defs, "replay", "build", "wrong_columns"))
    assert "mooncake_trace.jsonl" in line and "TIMESTAMP" in line and "ContextTokens" in line, line


def test_model_folder_without_weights_is_refused_before_the_engine_starts(bad_defs):
    line = error_line(cli(bad_defs, "sweep", "no_weights"))
    assert "model_without_weights has no weights" in line
    assert (
        f"({defs_file(bad_defs, 'no_weights')}:{line_of(bad_defs, 'no_weights', 'model_without_weights')} "
        "attributes.model.path)" in line
    )
    assert not list((bad_defs / "home").rglob("engine.log"))


def test_fixed_engine_port_already_in_use(bad_defs, busy_port):
    line = error_line(cli(bad_defs, "sweep", "fixed_port"))
    assert f"127.0.0.1:{busy_port} is already in use" in line
    assert (
        f"({defs_file(bad_defs, 'fixed_port')}:{line_of(bad_defs, 'fixed_port', f'port: {busy_port}')} "
        "attributes.engine.port)" in line
    )


def test_unreachable_external_server(bad_defs):
    for command in (["sweep", "unreachable"], ["engine", "up", "unreachable"]):
        line = error_line(cli(bad_defs, *command))
        assert "not answering: ConnectError" in line and "attributes.engine.url" in line
    pools = bad_defs / "home" / "pools"  # refused before its replay pool was built (other tests build theirs)
    assert not (pools.exists() and list(pools.rglob("unreachable*")))


def test_noise_floor_that_is_not_one_names_the_option_and_field(bad_defs):
    (bad_defs / "noise.json").write_text('{"x": 1}')
    line = error_line(
        cli(
            bad_defs,
            "experiment",
            "spec",
            "tiny_random",
            "--out",
            str(bad_defs / "unit"),
            "--noise-floor",
            str(bad_defs / "noise.json"),
        )
    )
    assert "not a noise floor: repeats: Field required" in line and "(--noise-floor)" in line
    line = error_line(
        cli(
            bad_defs,
            "experiment",
            "spec",
            "tiny_random",
            "--out",
            str(bad_defs / "unit"),
            "--noise-floor",
            str(bad_defs / "data" / "a_folder"),
        )
    )
    assert "a_folder: Is a directory (--noise-floor)" in line
    assert not (bad_defs / "unit").exists()


def test_memory_file_that_is_not_a_duckdb_database(tmp_path):
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "memory.duckdb").write_text("not a database\n")
    line = error_line(cli(tmp_path, "memory", "query", "select 1"))
    assert line.startswith(f"error: research memory {tmp_path / 'home' / 'memory.duckdb'} is not a DuckDB database")
    line = error_line(cli(tmp_path, "memory", "query", "select 1", "--db", str(tmp_path)))
    assert "is a folder, not a DuckDB file (--db)" in line
    line = error_line(
        cli(tmp_path, "memory", "query", "select * from no_such_table", "--db", str(tmp_path / "m.duckdb"))
    )
    assert "SQL: Catalog Error" in line and "no_such_table" in line


def test_memory_locked_by_another_process(tmp_path):
    db = tmp_path / "memory.duckdb"
    assert cli(tmp_path, "memory", "query", "select 1", "--db", str(db)).returncode == 0  # creates it
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, sys, time\ncon = duckdb.connect({str(db)!r})\nprint('held', flush=True)\ntime.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        line = error_line(cli(tmp_path, "memory", "query", "select 1", "--db", str(db), "--wait", "1"))
        assert f"research memory {db} is held open by another process" in line and f"PID {holder.pid}" in line
        assert time.monotonic() - started < 60
    finally:
        holder.kill()
        holder.wait()


def test_an_unexpected_exception_is_one_line_and_points_at_debug(monkeypatch, capsys):
    from autoresearch import cli as module

    def broken(args):
        raise RuntimeError("something internal\nwith detail")

    monkeypatch.setattr(module, "cmd_validate", broken)
    assert module.main(["validate"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[0] == "error: RuntimeError: something internal"
    assert "rerun with --debug for the traceback" in err
    assert module.main(["--debug", "validate"]) == 1
    assert "Traceback (most recent call last)" in capsys.readouterr().err
