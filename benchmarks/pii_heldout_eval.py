"""Recall of ``replay.redact`` per kind on two corpora, measured on what is persisted.

1. ``fixtures``: ``replay.pii_fixtures.planted_pii_logs`` (the project's own generator; it shares
   word lists with the recognisers, so it cannot show their gaps).
2. ``heldout``: ``benchmarks/pii_heldout_corpus.py`` (written independently of the recognisers).
3. ``world``: ``benchmarks/pii_heldout_world.py``, a second held-out generator written apart from
   the recognisers (before the structural address detector was tuned): street-address forms of
   56 countries/territories from published address-format references, national phone formats,
   national identity numbers with check digits; recall of addresses is also shown per country,
   and ordinary sentences with numbers in them ("Chapter 12", "Gate 23, Terminal 2") are checked
   to come through unchanged (precision).

Each corpus is written as a request log and built into a pool by the product's own Dagster asset
(the path of ``autoresearch replay build`` and of the UI), in a fresh AUTORESEARCH_HOME and
DAGSTER_HOME; the endpoint is then recorded in the research memory (DuckDB). Every file left
behind is then read back decoded (Parquet rows via polars, DuckDB tables via duckdb, the Dagster
sqlite event log via sqlite3, gzip, text) and searched for every planted value: recall per kind
counts values whose identifiers survive in their own request's pool row; "persisted anywhere"
counts whole values found in any file. Also reports over-redaction (stand-ins in requests that
carry no planted value) and the fidelity table.

    .venv/bin/python benchmarks/pii_heldout_eval.py [--lines 2000] [--corpora fixtures,heldout,world] [--out benchmarks/results/pii_recall.txt]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

ENDPOINT = """\
endpoint:
  name: {name}
  model: {{path: "builtin:smollm2-135m-instruct", served_name: smollm2}}
  engine: {{kind: vllm, args: ["--max-num-seqs", "8"]}}
  sla: {{ttft_ms: 1000}}
  traffic: {{kind: request_log, path: "{logs}"}}
"""


def readable(path: Path) -> str:
    """Everything a person could read from a persisted file, decoded."""
    if path.suffix == ".parquet":
        import polars as pl

        frame = pl.read_parquet(path)
        return "\n".join(str(v) for c in frame.columns for v in frame[c].to_list())
    data = path.read_bytes()
    if path.suffix in (".duckdb", ".db") or data[:16].startswith(b"SQLite format 3"):
        if data[:16].startswith(b"SQLite format 3"):
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            out = []
            for (table,) in con.execute("select name from sqlite_master where type='table'"):
                for row in con.execute(f'select * from "{table}"'):
                    out.extend(str(v) for v in row)
            con.close()
            return "\n".join(out) + "\n" + data.decode("utf-8", errors="ignore")
        import duckdb

        con = duckdb.connect(str(path), read_only=True)
        out = []
        for schema, table in con.execute("select table_schema, table_name from information_schema.tables").fetchall():
            for row in con.execute(f'select * from "{schema}"."{table}"').fetchall():
                out.extend(str(v) for v in row)
        con.close()
        return "\n".join(out)
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="ignore")


def corpus(name: str, lines: int):
    """(log lines, planted values as (line, kind, value, leaked(text) -> bool))."""
    if name == "fixtures":
        from replay.sample_logs import planted_pii_logs

        log, planted = planted_pii_logs(lines, seed=29)
        return log, [(p.line, p.category, p.value, p.leaked_in) for p in planted]
    if name == "world":
        import pii_heldout_world as W

        log, planted = W.generate(lines, seed=5)
        return log, [(p.line, p.kind, p.value, (lambda t, p=p: W.leaked(p, t)), p.country) for p in planted]
    import pii_heldout_corpus as H

    log, planted = H.generate(lines, seed=7)
    return log, [(p.line, p.kind, p.value, (lambda t, p=p: H.leaked(p, t))) for p in planted]


def evaluate(name: str, lines: int, work: Path) -> str:
    import dagster as dg
    from dagster_project.definitions import build_definitions
    from dagster_project.lib import load_definitions
    from dagster_project.lib.migrate import write_declarations
    from memory_db.records import EndpointRecord
    from memory_db.store import MemoryStore
    from specs import paths

    log, planted = corpus(name, lines)
    logs = work / f"{name}_logs.jsonl"
    logs.write_text("\n".join(log) + "\n")
    defs_dir = work / f"definitions_{name}"
    defs_dir.mkdir()
    endpoint = f"pii_{name}"
    write_declarations(defs_dir, ENDPOINT.format(name=endpoint, logs=logs))
    home, dagster_home = work / f"home_{name}", work / f"dagster_{name}"
    dagster_home.mkdir()
    os.environ["AUTORESEARCH_HOME"] = str(home)
    defs = build_definitions(defs_dir)
    t0 = time.perf_counter()
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        key = dg.AssetKey([endpoint, "replay_pool"])
        result = dg.materialize([defs.get_assets_def(key)], instance=instance, selection=[key])
        assert result.success
    build_s = time.perf_counter() - t0
    spec = load_definitions(defs_dir).endpoint(endpoint)
    MemoryStore(paths.memory_db_path()).record_endpoint(EndpointRecord.from_spec(spec, "pii-eval"))

    files = [p for root in (home, dagster_home) for p in root.rglob("*") if p.is_file() and "models" not in p.parts]
    pool_file = next(p for p in files if p.name.endswith("-pool.parquet"))
    import polars as pl

    pool = pl.read_parquet(pool_file)
    rows = {int(rid.rsplit(":", 1)[1]): body for rid, body in zip(pool["request_id"], pool["body"])}
    others = {p: readable(p) for p in files}
    total, leaked, anywhere = Counter(), Counter(), Counter()
    by_country, leaked_country = Counter(), Counter()
    examples: dict[str, list[str]] = {}
    for line, kind, value, is_leaked, *country in planted:
        total[kind] += 1
        hit = is_leaked(rows[line])
        if kind == "STREET_ADDRESS" and country:
            by_country[country[0]] += 1
            leaked_country[country[0]] += hit
        if hit:
            leaked[kind] += 1
            examples.setdefault(kind, []).append(value)
        if any(value in text and re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text) for text in others.values()):
            anywhere[kind] += 1
    planted_lines = {p[0] for p in planted}
    clean = [n for n in rows if n not in planted_lines]
    originals = {i: json.loads(l)["request"] for i, l in enumerate(log, start=1)}
    over = sum(
        json.dumps(originals[n]["messages"], ensure_ascii=False)
        != json.dumps(json.loads(rows[n])["messages"], ensure_ascii=False)
        for n in clean
    )
    meta = json.loads(next(p for p in files if p.name.endswith(".lineage.json")).read_text())
    out = [
        f"corpus {name}: {len(log)} requests, {sum(total.values())} planted values, {build_s:.0f} s to build "
        f"(Dagster materialize), {len(files)} persisted files scanned ({sum(len(t) for t in others.values()) / 1e6:.1f} MB decoded)",
        f"{'kind':16} {'planted':>8} {'leaked':>7} {'recall':>8} {'in any file':>12}",
    ]
    for kind in sorted(total):
        out.append(
            f"{kind:16} {total[kind]:8d} {leaked[kind]:7d} {1 - leaked[kind] / total[kind]:8.4f} {anywhere[kind]:12d}"
        )
    n = sum(total.values())
    out.append(
        f"{'overall':16} {n:8d} {sum(leaked.values()):7d} {1 - sum(leaked.values()) / n:8.4f} {sum(anywhere.values()):12d}"
    )
    out.append(f"requests with no planted value: {len(clean)}, of which changed by redaction: {over}")
    out.append(
        "redaction counts: " + ", ".join(f"{k}={v}" for k, v in sorted(meta.get("redaction_counts", {}).items()))
    )
    for kind, vals in sorted(examples.items()):
        out.append(f"missed {kind} (first 8): " + " | ".join(v.replace("\n", "\\n") for v in vals[:8]))
    if by_country:
        out.append(
            f"street-address recall per country ({len(by_country)} countries/territories; planted / leaked / recall):"
        )
        cells = [
            f"{c:9} {by_country[c]:4d} {leaked_country[c]:3d} {1 - leaked_country[c] / by_country[c]:7.4f}"
            for c in sorted(by_country)
        ]
        for i in range(0, len(cells), 4):
            out.append("  " + "   ".join(cells[i : i + 4]))
    if name == "world":
        import pii_heldout_world as W

        sentences = changed = 0
        altered: Counter[str] = Counter()
        for n, body in rows.items():
            original = json.dumps(originals[n]["messages"], ensure_ascii=False)
            for f in W.FILLER:
                if f in original:
                    sentences += 1
                    if f not in body:
                        changed += 1
                        altered[f] += 1
        out.append(
            f"precision: ordinary sentences with numbers (W.FILLER) in the requests: {sentences}, changed by redaction: {changed} "
            f"({changed / max(1, sentences):.2%})"
            + ("; most often: " + " | ".join(f"{f!r} x{k}" for f, k in altered.most_common(5)) if altered else "")
        )
    return "\n".join(out)


def other_seeds(seeds: list[int], lines: int, corpus_name: str = "heldout") -> str:
    """Recall of a held-out corpus at other seeds, in memory (the redactor the pool build uses)."""
    if corpus_name == "world":
        import pii_heldout_world as H
    else:
        import pii_heldout_corpus as H
    from replay.redact import Redactor

    out = [
        f"{corpus_name} corpus at other seeds ({lines} requests each, redacted in memory, leaks counted per request):",
        "seed  " + " ".join(f"{k:>14}" for k in H.KINDS) + "  missed",
    ]
    for seed in seeds:
        log, planted = H.generate(lines, seed=seed)
        r = Redactor()
        red = [json.dumps(r.redact_request(json.loads(line)["request"]), ensure_ascii=False) for line in log]
        total, leaked, missed = Counter(), Counter(), []
        for p in planted:
            total[p.kind] += 1
            if H.leaked(p, red[p.line - 1]):
                leaked[p.kind] += 1
                missed.append(p.value)
        out.append(
            f"{seed:<5} "
            + " ".join(f"{1 - leaked[k] / total[k]:>14.4f}" for k in H.KINDS)
            + "  "
            + " | ".join(m.replace("\n", "\\n") for m in missed[:6])
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--corpora", default="fixtures,heldout,world")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "pii_recall.txt")
    parser.add_argument("--other-seeds", default="8,9,10,11,12,13", help="held-out seeds also measured in memory")
    parser.add_argument("--world-seeds", default="6,7,8,9,10,11", help="world-corpus seeds also measured in memory")
    args = parser.parse_args()
    os.environ.setdefault("AUTORESEARCH_MODELS", str(REPO / ".autoresearch" / "models"))
    sections = [
        f"PII recall on persisted outputs ({time.strftime('%Y-%m-%d %H:%M:%S %Z')})",
        f"command: .venv/bin/python benchmarks/pii_heldout_eval.py --lines {args.lines} --corpora {args.corpora} "
        f"--other-seeds {args.other_seeds} --world-seeds {args.world_seeds}",
        "",
    ]
    with tempfile.TemporaryDirectory(prefix="pii-eval-") as tmp:
        for name in args.corpora.split(","):
            sections += [evaluate(name, args.lines, Path(tmp)), ""]
    if args.other_seeds:
        sections += [other_seeds([int(x) for x in args.other_seeds.split(",")], args.lines), ""]
    if args.world_seeds:
        sections += [other_seeds([int(x) for x in args.world_seeds.split(",")], args.lines, "world"), ""]
    text = "\n".join(sections)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
