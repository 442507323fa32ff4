"""Replace this machine's absolute paths in recorded results with placeholders.

    .venv/bin/python benchmarks/scrub_paths.py [FILE_OR_FOLDER ...]   # default: benchmarks/results

A recorded result is read on other machines: a path such as ``/tmp/gpubench-home/models/x`` or the
checkout's own location says nothing there, and may say more than it should about the host. The
checkout becomes ``<repo>``, a temporary folder ``<tmp>``, a home folder ``~`` and an interpreter's
installation ``<python>``; the rest of each path is kept, so a log still says which file it meant.
``tests/test_results_hygiene.py`` fails on any recorded result that still holds such a path.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: (pattern, placeholder), applied in order: the most specific first
RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"(?<![\w.-])(?:/check)?/work/[A-Za-z0-9_.-]+(?=/|\b)"), "<repo>"),
    (re.compile(re.escape(str(REPO)) + r"(?=/|\b)"), "<repo>"),
    (re.compile(r"(?<![\w.-])/root/\.pyenv/versions/[0-9.]+"), "<python>"),
    (re.compile(r"(?<![\w.-])/usr/(?:local/)?lib/python3(?:\.[0-9]+)?"), "<python>/lib"),
    (re.compile(r"(?<![\w.-])(?:/private)?/var/folders/[A-Za-z0-9_+-]+/[A-Za-z0-9_+-]+/T"), "<tmp>"),  # macOS
    (re.compile(r"(?<![\w.-])/tmp/[A-Za-z0-9_.+@-]+"), "<tmp>"),
    (re.compile(r"(?<![\w.-])/(?:home|Users)/[^/\s\"'\\]+"), "~"),
    (re.compile(r"[A-Za-z]:\\+Users\\+[^\\/\s\"']+"), "~"),  # Windows, as written or JSON-escaped
    (re.compile(r"(?<![\w.-])/root(?=/|\b)"), "~"),
]

#: what the hygiene test looks for: an absolute path under a machine-specific root
MACHINE_PATH = re.compile(
    r"(?<![\w.<>~-])/(?:tmp|root|home|work|check|Users|var/folders)/[^/\s\"']"
    r"|\b[A-Za-z]:\\+Users\\"
)

TEXT_SUFFIXES = {".json", ".txt", ".md", ".log", ".csv", ".jsonl", ".yaml", ".yml"}


def _read(path: Path) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:  # keeps \r as it was
        return f.read()


def scrub(text: str) -> str:
    for pattern, placeholder in RULES:
        text = pattern.sub(placeholder, text)
    return text


def files_under(targets: list[Path]):
    for target in targets:
        if target.is_file():
            yield target
        else:
            yield from (p for p in sorted(target.rglob("*")) if p.is_file() and p.suffix in TEXT_SUFFIXES)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="*", type=Path, default=[REPO / "benchmarks" / "results"])
    args = ap.parse_args(argv)
    changed = 0
    for path in files_under(args.targets):
        text = _read(path)
        clean = scrub(text)
        if clean != text:
            with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
                f.write(clean)
            changed += 1
    left = [str(p) for p in files_under(args.targets) if MACHINE_PATH.search(_read(p))]
    print(f"scrubbed {changed} file(s)" + (f"; still holding machine paths: {', '.join(left)}" if left else ""))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
