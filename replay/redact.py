"""PII redaction for request logs: regex-first detectors with validators, consistent placeholders.

Why not Presidio's analyzer as is: its default NLP engine needs a spaCy model that cannot be
downloaded here, and its per-call overhead is far too high for millions of messages. The pattern
detectors below follow Presidio's recognizers (Luhn for cards, mod-97 for IBANs, SSN area rules,
``ipaddress`` for IPs) and run behind cheap prefilters; person names use a gazetteer (Faker's
per-locale first/last-name lists) plus context cues (introductions, titles, sign-offs).
docs/replay.md has the evaluation against Presidio's pattern recognizers.

Replacement is consistent: a keyed hash (HMAC-SHA256 with ``AUTORESEARCH_REDACTION_KEY``) of the
value picks a fake value of the same shape and about the same length, so the same value gets
the same replacement across requests (shared prefixes stay shared) and token counts stay close.
Only free text is touched: message contents, tool-call arguments and the ``user`` field; tool
definitions, response schemas and generation settings are left exactly as they were.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from replay.pii_fixtures import STREET_SUFFIXES, iban_ok, luhn_ok, name_lists

DEFAULT_KEY = b"autoresearch-default-redaction-key"  # override per deployment via the environment
CATEGORIES = ("EMAIL", "IBAN", "CREDIT_CARD", "US_SSN", "IP_ADDRESS", "PHONE", "STREET_ADDRESS", "PERSON")

_EMAIL = re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?!\d)")
_SSN = re.compile(r"(?<![\d-])(\d{3})([- .])(\d{2})\2(\d{4})(?![\d-])")
_SSN_BARE = re.compile(r"(?i)\b(?:ssn|social security(?: number)?)\D{0,12}(\d{9})\b")
_IPV4 = re.compile(r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\d.])")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_PHONE = re.compile(
    r"(?<![\w+])\+\d{1,3}(?:[ .-]?\(?\d{1,5}\)?){2,6}(?!\w)"           # international, +CC ...
    r"|(?<![\w(])(?:1[ .-])?(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}(?!\w)"  # North American
    r"|(?i:(?<=phone )|(?<=call )|(?<=text )|(?<=mobile )|(?<=cell )|(?<=tel ))\d{10,11}(?!\w)")
_SUFFIX = "|".join(sorted(set(STREET_SUFFIXES) | {"Highway", "Hwy", "Square", "Sq", "Pkwy", "Cir", "Trail", "Trl"}, key=len, reverse=True))
_ADDRESS = re.compile(
    rf"\b\d{{1,6}}(?: [A-Z][a-z]+){{1,3}} (?:{_SUFFIX})\b\.?"
    r"(?:,? (?:Apt|Apartment|Suite|Ste|Unit|#) ?[A-Za-z0-9-]+)?"
    r"(?:, [A-Z][a-z]+(?: [A-Z][a-z]+)?, [A-Z]{2} \d{5}(?:-\d{4})?)?")
_NAME_WORD = r"[A-Z][a-z]*(?:['’][A-Z][a-z]+|-[A-Za-z][a-z]+|[A-Z][a-z]+)*"
_CAP_RUN = re.compile(rf"(?<![\w'-]){_NAME_WORD}(?: {_NAME_WORD}){{0,2}}")
_CUE = re.compile(r"(?:\b(?:[Mm]y name is|[Nn]ame is|I am|I'm|[Tt]his is|[Aa]sk for|[Uu]nder|[Nn]amed|[Cc]alled|"
                  r"[Mm]y (?:wife|husband|son|daughter|colleague|partner|mother|father|manager))"
                  r"|\b(?:Mr|Mrs|Ms|Dr|Miss|Prof)\.?"
                  r"|\b(?:Regards|Thanks|Thank you|Sincerely|Cheers|Best|Kind regards|Best regards),?\n?)\s*$")
_DIGIT = re.compile(r"\d")
# First names that are also common English words: a name only with a surname or a cue.
_AMBIGUOUS = frozenset(
    "Amber April August Autumn Bill Carol Chase Crystal Daisy Dawn Dean Don Drew Faith Frank Glen Grace Guy Harry "
    "Holly Hunter Iris Ivy Jack Jade Jordan Joy June Lily Mark May Penny Ray Rose Sue Summer Will Hope Page Price "
    "Case Lane Miles Reed Rich Wade Star Sky Sunny Pearl Ruby Violet Art Bella Brook Cliff Gay Pat Sandy Angel "
    "Destiny Precious Heaven Chance Major Royal Prince Rocky Rusty Buddy Honey Misty Candy Cherry Ginger Hazel Olive "
    "Sage Scarlett Stone Storm Tex Dallas Austin Paris Florence Georgia Virginia Carolina Savannah Sydney Victoria "
    "China India Kenya Lincoln Madison Jefferson Washington Franklin Orlando Phoenix Denver Salem Eden Mercedes "
    "Porsche Tesla Apple Bliss Lucky Happy Sorry Thanks Hello Please Customer Support Order Account Card Phone Email".split())
_NOT_NAME = frozenset(
    "I The A An My Your Our Their This That These Those Hi Hello Hey Dear Thanks Thank Please Sorry Yes No Ok Okay Good "
    "Great Fine Can Could Would Should Will Is Are Was Were Do Does Did Have Has Had Not Also Just Still Very So And But Or "
    "If When Where What Which Who Why How Here There Today Tomorrow Yesterday Monday Tuesday Wednesday Thursday Friday "
    "Saturday Sunday January February March April May June July August September October November December Street Road "
    "Avenue Apt Suite Unit Order Account Card Phone Email Address Customer Support Team Agent Bank Service Internet App "
    "Example Rules Facts Output Examples Intent Tool Call Looking Writing Calling Trying Waiting Going Getting Happy "
    "Available Back Ready Here Sure Glad Afraid Interested Unable Able New Old First Last Next Other Some Any Every".split())
_TITLES = ("Mr", "Mrs", "Ms", "Dr", "Miss", "Prof")
# Stand-in names are made up and in no name list, so a leak scan never mistakes one for a real name.
_FAKE_FIRST = ("Avrel", "Corvin", "Dariel", "Elwin", "Farra", "Gavrin", "Halden", "Jorvik", "Kestrel", "Lorin", "Maelis",
               "Norrin", "Quillon", "Ravena", "Sorrel", "Tamsin", "Veyra", "Wrenna", "Xandor", "Zephyrine")
_FAKE_LAST = ("Ashdown", "Brackwell", "Coldmere", "Dunhollow", "Eastbrook", "Fallowby", "Greythorn", "Hartwick", "Ivesdale",
              "Kettleby", "Larkspur", "Marrowby", "Northgate", "Oakhurst", "Quarrington", "Ravensdale", "Stonebridge",
              "Thistlewood", "Underhill", "Wexford")
_FAKE_STREETS = ("Alder", "Birch", "Cedar", "Dogwood", "Elm", "Fir", "Hawthorn", "Juniper", "Larch", "Linden", "Magnolia",
                 "Poplar", "Rowan", "Spruce", "Sycamore", "Tamarack")


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    category: str


@lru_cache(maxsize=1)
def _gazetteer() -> tuple[frozenset[str], frozenset[str]]:
    first, last = name_lists()
    return frozenset(first), frozenset(last)


def _key_from_env() -> bytes:
    value = os.environ.get("AUTORESEARCH_REDACTION_KEY")
    return value.encode() if value else DEFAULT_KEY


class Redactor:
    """Find and replace personal data in free text and in chat-completions request bodies.

    ``counts`` tallies replacements per category (counts only: values are never kept in logs).
    """

    def __init__(self, key: bytes | None = None, categories: tuple[str, ...] = CATEGORIES, cache_entries: int = 200_000):
        self._key = key if key is not None else _key_from_env()
        self.categories = frozenset(categories)
        unknown = self.categories - set(CATEGORIES)
        if unknown:
            raise ValueError(f"unknown PII categories {sorted(unknown)}; known: {CATEGORIES}")
        self.counts: Counter[str] = Counter()
        self._young: dict[str, str] = {}
        self._old: dict[str, str] = {}
        self._cache_entries = cache_entries
        self._first, self._last = _gazetteer()

    @property
    def key_id(self) -> str:
        """A short fingerprint of the key (for lineage); the key itself is never written."""
        return hashlib.sha256(b"key-id\x00" + self._key).hexdigest()[:12]

    # ---- detection -------------------------------------------------------------------------
    def find(self, text: str) -> list[Span]:
        """Non-overlapping PII spans in ``text`` (earlier categories in CATEGORIES win ties)."""
        found: list[Span] = []
        cats = self.categories
        has_digit = _DIGIT.search(text) is not None
        if "EMAIL" in cats and "@" in text:
            found += [Span(m.start(), m.end(), "EMAIL") for m in _EMAIL.finditer(text)]
        if has_digit:
            if "IBAN" in cats:
                found += self._ibans(text)
            if "CREDIT_CARD" in cats:
                found += [Span(m.start(), m.end(), "CREDIT_CARD") for m in _CARD.finditer(text)
                          if 13 <= len(d := re.sub(r"\D", "", m.group())) <= 19 and luhn_ok(d)]
            if "US_SSN" in cats:
                found += [Span(m.start(), m.end(), "US_SSN") for m in _SSN.finditer(text) if _ssn_ok(m.group(1), m.group(3), m.group(4))]
                found += [Span(m.start(1), m.end(1), "US_SSN") for m in _SSN_BARE.finditer(text)
                          if _ssn_ok(m.group(1)[:3], m.group(1)[3:5], m.group(1)[5:])]
            if "IP_ADDRESS" in cats:
                found += [Span(m.start(), m.end(), "IP_ADDRESS") for m in _IPV4.finditer(text)]
            if "PHONE" in cats:
                found += [Span(m.start(), m.end(), "PHONE") for m in _PHONE.finditer(text)
                          if 7 <= len(re.sub(r"\D", "", m.group())) <= 15]
            if "STREET_ADDRESS" in cats:
                found += [Span(m.start(), m.end(), "STREET_ADDRESS") for m in _ADDRESS.finditer(text)]
        if "IP_ADDRESS" in cats and text.count(":") >= 2:
            found += [Span(m.start(), m.end(), "IP_ADDRESS") for m in _IPV6.finditer(text) if _ipv6_ok(m.group())]
        if "PERSON" in cats:
            found += self._persons(text)
        return _resolve(found)

    def _ibans(self, text: str) -> list[Span]:
        out = []
        for m in _IBAN.finditer(text):
            value = m.group()
            while len(value.replace(" ", "")) >= 15:  # trailing words may have been swallowed: trim back
                if iban_ok(value):
                    out.append(Span(m.start(), m.start() + len(value), "IBAN"))
                    break
                value = value[:-1].rstrip()
        return out

    def _persons(self, text: str) -> list[Span]:
        out = []
        first, last = self._first, self._last
        for m in _CAP_RUN.finditer(text):
            words = m.group().split(" ")
            offsets, pos = [], m.start()
            for w in words:
                offsets.append(pos)
                pos += len(w) + 1
            i = 0
            while i < len(words):
                w0, rest = words[i], words[i + 1:]
                n = 0
                if rest and w0 in first and rest[0] in last and len(w0) > 1:  # "April Villarreal"
                    n = 2
                elif w0 not in _NOT_NAME and len(w0) > 1:
                    if rest and (w0 in first or w0 in last) and rest[0] not in _NOT_NAME:
                        n = 2 + (len(rest) > 1 and rest[1] in last)
                    elif w0 in first and w0 not in _AMBIGUOUS:
                        n = 1
                    elif _CUE.search(text, max(0, offsets[i] - 40), offsets[i]) is not None:
                        n = 2 if rest and rest[0] not in _NOT_NAME else 1
                if n:
                    out.append(Span(offsets[i], offsets[i] + len(" ".join(words[i:i + n])), "PERSON"))
                    i += n
                else:
                    i += 1
        return out

    # ---- replacement -----------------------------------------------------------------------
    def _digest(self, category: str, value: str) -> bytes:
        return hmac.new(self._key, f"{category}\x00{value}".encode(), hashlib.sha256).digest()

    def replacement(self, category: str, value: str) -> str:
        """The consistent stand-in for ``value``: same input, same key -> same output."""
        d = self._digest(category, value)
        digits = iter(str(int.from_bytes(d, "big")) * 2)
        if category == "EMAIL":
            local, _, domain = value.partition("@")
            fake_local = ("user" + d.hex())[: max(6, len(local))]
            return f"{fake_local}@example.{('com', 'org', 'net')[d[0] % 3]}"
        if category in ("PHONE", "US_SSN", "CREDIT_CARD"):
            out = "".join(next(digits) if c.isdigit() else c for c in value)
            if category == "US_SSN":  # area 9xx is never issued: the stand-in cannot be a real SSN
                i = next(i for i, c in enumerate(out) if c.isdigit())
                out = out[:i] + "9" + out[i + 1:]
            if category == "CREDIT_CARD" and luhn_ok(re.sub(r"\D", "", out)):  # never emit a valid card number
                i = max(i for i, c in enumerate(out) if c.isdigit())
                out = out[:i] + str((int(out[i]) + 1) % 10) + out[i + 1:]
            return out
        if category == "IBAN":
            body = "".join(next(digits) if c.isalnum() else c for c in value[4:])
            fake = f"{value[:2]}00{body}"
            if iban_ok(fake):  # never emit a valid IBAN
                i = max(i for i, c in enumerate(fake) if c.isdigit())
                fake = fake[:i] + str((int(fake[i]) + 1) % 10) + fake[i + 1:]
            return fake
        if category == "IP_ADDRESS":
            if ":" in value:
                return "fd00:" + ":".join(f"{int.from_bytes(d[i:i + 2], 'big'):x}" for i in range(0, 8, 2)) + "::" + f"{d[9]:x}"
            return f"10.{d[0]}.{d[1]}.{d[2] % 254 + 1}"
        if category == "STREET_ADDRESS":
            m = re.match(r"(\d+)((?: [A-Z][a-z]+)+?) (" + _SUFFIX + r")\b(.*)", value, re.S)
            if not m:
                return "".join(next(digits) if c.isdigit() else c for c in value)
            n_words = len(m.group(2).split())
            street = " ".join(_FAKE_STREETS[d[1 + k] % len(_FAKE_STREETS)] for k in range(n_words))
            number = "".join(next(digits) for _ in m.group(1))
            tail = "".join(next(digits) if c.isdigit() else c for c in m.group(4))
            tail = re.sub(r"(, )[A-Z][a-z]+(?: [A-Z][a-z]+)?(, [A-Z]{2})", r"\1Springfield\2", tail)
            return f"{number} {street} {m.group(3)}{tail}"
        if category == "PERSON":
            words = value.split()
            title = words[0] if words[0].rstrip(".") in _TITLES else None
            names = words[1:] if title else words
            fake = [_like(_FAKE_FIRST, names[0], d[0])] + [_like(_FAKE_LAST, w, d[1 + k]) for k, w in enumerate(names[1:])]
            return " ".join(([title] if title else []) + fake)
        raise ValueError(f"unknown category {category!r}")

    def redact_text(self, text: str) -> str:
        """``text`` with every detected value replaced (memoised: repeated texts cost a lookup)."""
        hit = self._young.get(text)
        if hit is None:
            hit = self._old.get(text)
            if hit is None:
                hit = self._redact_uncached(text)
            self._young[text] = hit
            if len(self._young) >= self._cache_entries:
                self._old, self._young = self._young, {}
        return hit

    def _redact_uncached(self, text: str) -> str:
        spans = self.find(text)
        if not spans:
            return text
        parts, pos = [], 0
        for s in spans:
            parts.append(text[pos:s.start])
            parts.append(self.replacement(s.category, text[s.start:s.end]))
            self.counts[s.category] += 1
            pos = s.end
        parts.append(text[pos:])
        return "".join(parts)

    def redact_request(self, body: dict) -> dict:
        """A copy of a chat-completions body with free text redacted and everything else kept."""
        out = dict(body)
        messages = []
        for m in body.get("messages") or []:
            m2 = dict(m)
            content = m.get("content")
            if isinstance(content, str):
                m2["content"] = self.redact_text(content)
            elif isinstance(content, list):
                m2["content"] = [({**p, "text": self.redact_text(p["text"])} if isinstance(p, dict) and isinstance(p.get("text"), str) else p)
                                 for p in content]
            if isinstance(m.get("name"), str):
                m2["name"] = self.redact_text(m["name"])
            if m.get("tool_calls"):
                calls = []
                for c in m["tool_calls"]:
                    fn = c.get("function") if isinstance(c, dict) else None
                    if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                        c = {**c, "function": {**fn, "arguments": self.redact_text(fn["arguments"])}}
                    calls.append(c)
                m2["tool_calls"] = calls
            messages.append(m2)
        out["messages"] = messages
        if isinstance(body.get("user"), str):
            out["user"] = self.redact_text(body["user"])
        return out


def _like(pool: tuple[str, ...], word: str, pick: int) -> str:
    """One of the four stand-ins closest in length to ``word`` (keeps token counts close)."""
    near = sorted(pool, key=lambda w: (abs(len(w) - len(word)), w))[:4]
    return near[pick % len(near)]


def _ssn_ok(area: str, group: str, serial: str) -> bool:
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def _ipv6_ok(value: str) -> bool:
    try:
        ipaddress.IPv6Address(value)
        return True
    except ValueError:
        return False


def _resolve(spans: list[Span]) -> list[Span]:
    """Keep the earliest-starting, then longest, then highest-priority span of any overlap."""
    if len(spans) <= 1:
        return spans
    prio = {c: i for i, c in enumerate(CATEGORIES)}
    spans.sort(key=lambda s: (s.start, -(s.end - s.start), prio[s.category]))
    out: list[Span] = []
    for s in spans:
        if out and s.start < out[-1].end:
            continue
        out.append(s)
    return out
