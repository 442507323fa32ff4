"""Evaluation: replay.redact vs Presidio's pattern recognizers on planted PII (recall and speed).

Presidio's recognizers run without an NLP engine (its default needs a spaCy model download):
each recognizer's ``analyze`` is called directly. Presidio has no offline person-name
recognizer (names need spaCy NER), so PERSON and STREET_ADDRESS show as not covered. Its
EmailRecognizer uses tldextract, which fetches the public suffix list over the network unless
told not to: this script points it at tldextract's bundled snapshot. Recall is
measured per planted value: a value counts as found when a detected span covers it entirely.

    .venv/bin/python benchmarks/replay_presidio_eval.py [--lines 600]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _texts(line: str) -> list[str]:
    body = json.loads(line)["request"]
    return [m["content"] for m in body["messages"] if isinstance(m.get("content"), str) and m["role"] != "system"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=600)
    parser.add_argument("--held-out-names", type=float, default=0.0)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "replay_presidio_eval.txt")
    args = parser.parse_args()

    import tldextract

    # Presidio's EmailRecognizer calls tldextract, which by default FETCHES the public suffix list
    # over the network at first use; use the snapshot bundled with tldextract instead (offline).
    tldextract.extract = tldextract.TLDExtract(suffix_list_urls=())
    from presidio_analyzer.predefined_recognizers import (
        CreditCardRecognizer,
        EmailRecognizer,
        IbanRecognizer,
        IpRecognizer,
        PhoneRecognizer,
        UsSsnRecognizer,
    )

    from replay.pii_fixtures import CATEGORIES
    from replay.sample_logs import planted_pii_logs
    from replay.redact import Redactor

    lines, planted = planted_pii_logs(args.lines, seed=99, held_out_names=args.held_out_names)
    texts = [_texts(x) for x in lines]
    presidio = {
        "EMAIL": (EmailRecognizer(), "EMAIL_ADDRESS"),
        "CREDIT_CARD": (CreditCardRecognizer(), "CREDIT_CARD"),
        "IBAN": (IbanRecognizer(), "IBAN_CODE"),
        "US_SSN": (UsSsnRecognizer(), "US_SSN"),
        "IP_ADDRESS": (IpRecognizer(), "IP_ADDRESS"),
        "PHONE": (PhoneRecognizer(supported_regions=("US", "GB", "DE", "FR")), "PHONE_NUMBER"),
    }

    def covered(found: dict[int, list[tuple[int, int, str]]], p) -> bool:
        for t_index, text in enumerate(texts[p.line - 1]):
            i = text.find(p.value)
            if i >= 0 and any(s <= i and i + len(p.value) <= e for s, e, _ in found.get((p.line, t_index), [])):
                return True
        return False

    results = {}
    start = time.perf_counter()
    found_p: dict = {}
    for li, tt in enumerate(texts, start=1):
        for ti, text in enumerate(tt):
            spans = []
            for cat, (rec, entity) in presidio.items():
                for r in rec.analyze(text, entities=[entity], nlp_artifacts=None):
                    if r.score >= 0.3:
                        spans.append((r.start, r.end, cat))
            found_p[(li, ti)] = spans
    results["presidio pattern recognizers"] = (time.perf_counter() - start, found_p)
    red = Redactor()
    start = time.perf_counter()
    found_r: dict = {}
    for li, tt in enumerate(texts, start=1):
        for ti, text in enumerate(tt):
            found_r[(li, ti)] = [(s.start, s.end, s.category) for s in red.find(text)]
    results["replay.redact"] = (time.perf_counter() - start, found_r)

    n_texts = sum(len(t) for t in texts)
    total = Counter(p.category for p in planted)
    out = [
        f"planted PII: {len(planted)} values in {args.lines} request-log lines ({n_texts} message texts); "
        f"held-out (unlisted) person names: {args.held_out_names:.0%}",
        "",
    ]
    header = f"{'detector':30s} " + " ".join(f"{c:>14s}" for c in CATEGORIES) + f" {'texts/s':>9s}"
    out.append(header)
    for name, (seconds, found) in results.items():
        hit = Counter(p.category for p in planted if covered(found, p))
        cells = []
        for c in CATEGORIES:
            cells.append(
                f"{hit[c] / total[c]:14.4f}"
                if (name != "presidio pattern recognizers" or c in presidio)
                else f"{'not covered':>14s}"
            )
        out.append(f"{name:30s} " + " ".join(cells) + f" {n_texts / seconds:9.0f}")
    text = "\n".join(out) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
