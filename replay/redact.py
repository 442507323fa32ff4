"""PII redaction for request logs: validated patterns, cue- and shape-based names and addresses,
surrogates that keep the endpoint's token counts.

Detection
- Structured kinds (emails, cards, IBANs, SSNs, IPs, phones) are patterns behind cheap prefilters
  with Presidio's validators (Luhn for cards, mod-97 for IBANs, SSN area rules, ``ipaddress``).
- Person names: runs of capitalised words (any Latin script, with particles such as ``van der``,
  ``de la``, ``bin``, ``al-``, apostrophes and hyphens) are names when a cue announces them
  (introductions, titles, sign-offs, role labels such as "Account holder:" or "name on the card",
  relations such as "my daughter", role verbs such as "spoke to", "deliver to", "on behalf of",
  JSON keys such as ``"recipient"``), when a cue follows them ("... here", "... speaking"), or
  when a word of the run is in the gazetteer (Faker's names of 80+ locales). Lower-case and
  upper-case names are taken after the strongest cues.
- Street addresses: national formats with the street type before the name ("Calle de la Paz 12",
  "12 rue du Faubourg Saint-Honoré", "Via dei Mille 3", "ul. Długa 5/3"), after it ("300 Anna
  Salai Walk", "İstiklal Caddesi No: 12"), compounded into it ("Hauptstraße 5", "Kerkstraat 12",
  "Storgatan 4"), German prepositional streets ("Am Markt 4"), Japanese block numbers, with
  unit prefixes and postcode/city tails. Every form needs a house number.
- Why not an NER model: ``benchmarks/results/pii_ner_probe.txt`` (spaCy's small English pipeline,
  the only one installable here) found 72% of the held-out names and 41% of the addresses at
  about 200 texts/s; see docs/replay.md.

Replacement is consistent: a keyed hash (HMAC-SHA256 with ``AUTORESEARCH_REDACTION_KEY``) of the
value seeds its stand-in, so the same value gets the same stand-in across requests (shared
prefixes stay shared). Stand-ins keep the value's shape: digits stay digits (cards made
Luhn-invalid, SSN area 9xx, IBAN check digits wrong), letters stay letters of the same case, and
type words, particles, titles and punctuation are kept. Given the endpoint's tokenizer
(``Redactor(tokenizer=...)``), every replaced word is rebuilt to the same number of tokens in
its context, so prompt token counts are unchanged (checked; the closest candidate is used if no
exact one is found). Only free text is touched: message contents, tool-call arguments and the
``user`` field; tool definitions, response schemas and generation settings are left as they were.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import random
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

from replay import pii_lexicon as lex
from replay.pii_validators import iban_ok, luhn_ok

DEFAULT_KEY = b"autoresearch-default-redaction-key"  # override per deployment via the environment
CATEGORIES = ("EMAIL", "IBAN", "CREDIT_CARD", "US_SSN", "IP_ADDRESS", "PHONE", "STREET_ADDRESS", "PERSON")

_EMAIL = re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?:[ -]?[A-Z0-9]){11,30}\b")
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?!\d)")
_SSN = re.compile(r"(?<![\d-])(\d{3})([- .])(\d{2})\2(\d{4})(?![\d-])")
_SSN_BARE = re.compile(r"(?i)\b(?:ssn|social security(?: number| no\.?)?|social)\D{0,12}(\d{9})\b")
_IPV4 = re.compile(r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\d.])")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}|00[1-9]\d{0,2}(?= ))(?:[ .-]?\(?\d{1,5}\)?){2,6}(?!\w)"  # international, +CC ... / 00CC ...
    r"|(?<![\w(])(?:1[ .-])?(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}(?!\w)"  # North American
    r"|(?<![\w(+\-])0[1-9]\d{2,3} \d{3} ?\d{3,4}(?![\w\-])"                  # national trunk prefix: 0803 123 4567
    r"|(?i:(?<=phone )|(?<=call )|(?<=text )|(?<=mobile )|(?<=cell )|(?<=tel )|(?<=whatsapp )|(?<=number ))\d{10,12}(?!\w)")
_DIGIT = re.compile(r"\d")


def _trie(words) -> str:
    """A regex alternation of ``words`` as a trie (Python's ``re`` does not factor alternations)."""
    root: dict = {}
    for w in set(words):
        node = root
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict) -> str:
        end = "" in node
        alts = [re.escape(ch) + emit(sub) for ch, sub in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        if len(alts) == 1 and len(alts[0]) > 1 and not body.startswith("(?:"):
            body = "(?:" + body + ")"
        return body + "?" if end else body

    return emit(root)


# ---- letters of any Latin script -------------------------------------------------------------
_UPPER_CHARS = "".join(chr(c) for c in list(range(0x41, 0x250)) + list(range(0x1E00, 0x1F00)) if chr(c).isupper())
_U = "[" + re.escape(_UPPER_CHARS) + "]"
_L = r"[^\W\d_]"
_CAPW = rf"{_U}{_L}*(?:['’\-]{_L}+)*"
_PREFIXED = rf"(?:al|el|ad|as|ash|ul|bin|ibn|ben|abu|abd|d|l|o|di|de|da|du|van|von|mc|mac)['’\-]{_U}{_L}*(?:-{_L}+)*"
_NAME_WORD = rf"(?:{_PREFIXED}|{_CAPW}|{_U}\.(?= {_U}))"
_PARTICLE = _trie([p for p in lex.PARTICLES if p.isalpha() and p.islower()])
_NAME_RUN = re.compile(rf"(?<![\w'’\-]){_NAME_WORD}(?!\w)(?:(?: (?:{_PARTICLE}))* {_NAME_WORD}(?!\w)){{0,5}}")
_WORD_IN_RUN = re.compile(rf"{_NAME_WORD}|{_L}+")

_CUE_BEFORE = re.compile(
    r"(?i)(?:\b(?:from|to|cc|bcc|by|for)\s*:(?=\s*$)|\b(?:" + lex.ROLE_NOUNS + r")|\bmy (?:" + lex.RELATIONS + r")|\b(?:" + lex.RELATIONS + r")|"
    r"\b(?:" + _trie(t for t in lex.TITLES if t.replace(".", "").isalpha()) + r")\.?)"
    r"(?:\s+(?:of|on|for|to|from)\s+(?:the|this|that|my|our|your|his|her)\s+\w+)?"
    r"(?:\s+(?:is|was|are|were|will be|should be|reads|says|shows))?"
    r"(?:\s*\([^)]{0,20}\))?[\s,:;.\-–—]*$")
_JSON_KEY = re.compile(r"(?i)\"[a-z_]*(?:name|recipient|customer|holder|payee|beneficiary|contact|sender|addressee|passenger|"
                       r"owner|client|guest|patient|driver|agent|user|signatory|from|to|attn|by|person|employee|member)[a-z_]*\"\s*:\s*\"$")
# Romanised Vietnamese, Korean and Chinese family names that are also English words.
_SHORT_FAMILY = frozenset("do ha ma an le so to ho oh go yu no ko lo mo bo on".split())
_LABEL = re.compile(r"(?i)\b(?:name|holder|customer|client|recipient|payee|beneficiary|from|to|attn|att|contact|passenger|"
                    r"owner|signed|sender|addressee)\s*:\s*$")
_CUE_AFTER = re.compile(
    r"(?i)(?:['’]s)?[\s,]*(?:here\b|speaking\b|again\b|signed\b|said\b|says\b|wrote\b|called\b|calling\b|will (?:collect|pick|sign|call)|"
    r"is (?:the|my|our) (?:account |card |main |primary |authori[sz]ed )*(?:holder|owner|user|name|contact|beneficiary|" + lex.RELATIONS + r")|"
    r"(?:from|at|of) (?:your|the) (?:team|support|desk|store|branch|office|bank|call cent(?:er|re))|"
    r"was (?:very |really )?(?:helpful|rude|kind)|promised|told me|confirmed|approved|handled|signed for)")
_STRONG_LOWER = re.compile(
    r"(?i)(?:\b(?:my name is|my name's|name is|name:|full name:|call me|i am called|this is|it's|it is|i am|i'm)\s+)"
    r"([^\W\d_][^\W\d_'’\-]*(?:['’\-][^\W\d_]+)*(?: [^\W\d_][^\W\d_'’\-]*(?:['’\-][^\W\d_]+)*){0,3})")
_HERE_LOWER = re.compile(
    r"(?i)(?:^|\n|[.!?] |(?:hi|hello|hey|good (?:morning|afternoon|evening)|it's|it is|this is)[,!.]? )"
    r"([^\W\d_]+(?:['’\-][^\W\d_]+)*(?: [^\W\d_]+(?:['’\-][^\W\d_]+)*){0,3})[,]? (?:here|speaking)\b")

# ---- street addresses --------------------------------------------------------------------------
_TYPE_BEFORE = _trie({t for t in lex.STREET_TYPES_BEFORE} | {t.capitalize() for t in lex.STREET_TYPES_BEFORE}
                     | {t.upper() for t in lex.STREET_TYPES_BEFORE if len(t) <= 3})
_TYPE_AFTER = _trie({t for t in lex.STREET_TYPES_AFTER} | {t.capitalize() for t in lex.STREET_TYPES_AFTER}
                    | {t.upper() for t in lex.STREET_TYPES_AFTER if len(t) <= 4})
_ENDINGS = _trie(lex.compound_street_endings())
_ST_PART = (r"(?:(?:de|del|della|delle|dei|degli|di|da|das|dos|do|du|des|la|le|les|los|las|el|al|of|the|van|von|der|den|na|"
            r"a|e|y|och|og|und|et|i|à|ad)\s|(?:d|l|dell|all|sull|dall|nell)['’])")
_ROMAN = r"(?:[IVX]{1,5}|\d{1,3}(?:st|nd|rd|th|º|ª|°|e|er|\.))"
_ST_NAME = rf"(?:{_ST_PART})*(?:{_CAPW}|{_ROMAN})(?:[ \-](?:{_ST_PART})*(?:{_CAPW}|{_ROMAN})){{0,4}}"
_HOUSE = r"\d{1,5}(?:[A-Za-z](?![\w]))?(?:[/-]\d{1,4}[A-Za-z]?)?"
_HNW = r"(?:(?i:no|nr|num|nº|n°|n|d|dom|č|house no|plot|bldg|block|blk|door no|h\.no)\.?:?\s?)"
_UNIT = (r"(?i:flat|apt|apartment|unit|suite|ste|room|rm|floor|fl|level|plot|house no|house|building|bldg|block|blk|door|"
         r"shop|office|po box)")
_ADDRESSES = [re.compile(p) for p in (
    # number first, type after the name: "300 Anna Salai Walk", "Apt 39B, 221B Baker Street"
    rf"(?<![\w./-])(?:{_UNIT}\.? ?(?:no\.? ?)?\w{{1,6}}(?:, ?| |/))?{_HOUSE},? (?:{_CAPW}[ ]|{_ROMAN} |(?:{_ST_PART})){{1,5}}(?:{_TYPE_AFTER})\b\.?",
    # type before the name, number after or before: "Calle de la Paz 12", "12 bis rue de Rivoli", "Rua Augusta, 1008"
    rf"(?<![\w])(?:(?P<lead>{_HOUSE}(?: (?i:bis|ter|quater|[a-h]))?,? ))?(?:{_TYPE_BEFORE})\.? ?{_ST_NAME}"
    rf"(?P<trail>,? {_HNW}?{_HOUSE}(?![\d.,]\d))?",
    # name then a separate type word then the number: "Berliner Straße 10", "İstiklal Caddesi No: 12", "Karl Johans gate 22"
    rf"(?<![\w])(?:{_CAPW} ){{1,3}}(?:{_TYPE_AFTER})\.?,? {_HNW}?{_HOUSE}(?![\d.,]\d)",
    # compounded street word then the number: "Hauptstraße 5", "Kerkstraat 12-3", "Storgatan 4", "Bahnhofstr. 12"
    rf"(?<![\w])(?:{_CAPW}[ \-])?{_U}{_L}*?(?i:{_ENDINGS}) ?{_HOUSE}(?![\d.,]\d)",
    # German/Dutch/Slavic prepositional streets: "Am Markt 4", "Unter den Linden 77", "Na Příkopě 12/3"
    rf"(?<![\w])(?:Am|An der|An den|Auf dem|Auf der|Im|In der|In den|Zum|Zur|Unter den|Hinter dem|Vor dem|Bei der|Op de|Aan de|"
    rf"In de|Na|Pod|Nad|Przy|Za) {_CAPW}(?: {_CAPW})? {_HOUSE}(?![\d.,]\d)",
    # a name with a slashed house number: "Vodičkova 12/3", "Marszałkowska 10/4"
    rf"(?<![\w])(?:{_CAPW} ){{0,2}}{_CAPW} \d{{1,4}}/\d{{1,4}}[a-zA-Z]?(?![\d/])",
    # Japanese block addresses: "1-2-3 Jingumae, Shibuya-ku"
    rf"(?<![\w-])\d{{1,2}}-\d{{1,3}}(?:-\d{{1,3}})?,? {_CAPW}(?:-(?:ku|shi|cho|machi|gun|mura))?"
    rf"(?:, {_CAPW}-(?:ku|shi|cho|machi|gun|mura|ken))?",
    # a name, a number and a postcode + city: "Vinohradská 12, 12000 Praha"
    rf"(?<![\w])(?:{_CAPW} ){{0,3}}{_CAPW} {_HOUSE}, (?:\d{{4,5}}|\d{{2}}-\d{{3}}|\d{{3}} \d{{2}}) {_CAPW}",
)]
_ADDRESS_TAIL = re.compile(
    rf"(?:,? {_UNIT}\.? ?(?:no\.? ?)?\w{{1,6}}|,? (?i:apto|apt|piso|puerta|daire|kv|kat|etg|whg|top|stiege|int|interior|"
    rf"depto|dpto|bloco|andar|sala|esc|escalera)\.?:? ?\w{{1,5}}|,? \d{{1,2}}[º°ª]\.?(?: ?[A-Za-z](?!\w)| th\.| tv\.| mf\.)?|"
    rf" [A-Z](?: \d{{1,3}})?(?=,|$|\s)|,? (?:\d{{5}}(?:-\d{{3,4}})?|\d{{4}}(?: ?[A-Z]{{2}}(?!\w))?|\d{{2}}-\d{{3}}|\d{{3}} \d{{2}}|"
    rf"[A-Z]{{1,2}}\d[A-Z\d]? \d[A-Z]{{2}}|\d{{6}}) {_CAPW}(?: {_CAPW})?|,? (?:Col\.|Colonia|Bairro|Barrio|Quartier) {_CAPW}(?: {_CAPW})?|"
    rf" - \d{{4}}-\d{{3}} {_CAPW}|, {_CAPW}-(?:ku|shi|cho|machi|gun)|,? \d{{4,5}}-\d{{3}})")

_PLACE_TAIL = re.compile(rf", ((?:{_CAPW})(?: {_CAPW}){{0,2}})(?: \d{{4,6}}| [A-Z]{{1,2}}\d[A-Z\d]? \d[A-Z]{{2}})?(?![\w'’-])")

# Lower-case words kept as they are inside a stand-in (their kind of word, not personal data);
# of an address's street-type words only one is kept (see _kept_type_word): "Via del Corso".
_KEEP_ADDRESS = (frozenset(lex.fold(w) for w in lex.UNIT_WORDS + lex.HOUSE_NUMBER_WORDS) | lex.PARTICLES
                 | frozenset("bis ter quater no nr kv d col colonia bairro apto piso daire".split()))
_KEEP_PERSON = lex.PARTICLES | lex.TITLES
_TYPES_BEFORE = frozenset(lex.fold(w) for w in lex.STREET_TYPES_BEFORE)
_TYPES_AFTER = frozenset(lex.fold(w) for w in lex.STREET_TYPES_AFTER)


def _kept_type_word(parts: list[str]) -> tuple[int, ...]:
    """Index (in ``parts``) of the one street-type word an address stand-in keeps: the first word
    when it is a type written before the name, else the last word when it is one written after."""
    words = [i for i, p in enumerate(parts) if p and p[0].isalpha() and len(p) > 1]
    if len(words) < 2:
        return ()
    if lex.fold(parts[words[0]]) in _TYPES_BEFORE:
        return (words[0],)
    if lex.fold(parts[words[-1]]) in _TYPES_AFTER and lex.fold(parts[words[0]]) not in ("am", "an", "auf", "im", "in", "zum", "zur", "unter"):
        return (words[-1],)
    return ()
_SYLLABLES = ("ka", "lo", "mi", "ren", "dor", "vel", "tis", "bra", "quo", "zen", "fal", "mor", "rin", "sta", "wex", "yol",
              "pa", "ne", "ru", "vi", "sel", "tan", "gor", "hal", "ix", "ost", "um", "ber", "cal", "dri")


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    category: str


def _key_from_env() -> bytes:
    value = os.environ.get("AUTORESEARCH_REDACTION_KEY")
    return value.encode() if value else DEFAULT_KEY


@lru_cache(maxsize=1)
def _names_all() -> frozenset[str]:
    """Names including those that are also common words (Best, May, Young, Do)."""
    first, last = lex.person_names(keep_common=True)
    return first | last


@lru_cache(maxsize=1)
def _words() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    first, last = lex.person_names()
    return first, last, lex.common_words()


class Redactor:
    """Find and replace personal data in free text and in chat-completions request bodies.

    ``tokenizer`` (a ``tokenizers.Tokenizer``, the endpoint's) makes stand-ins keep token counts.
    ``counts`` tallies replacements per category (counts only: values are never kept in logs).
    """

    def __init__(self, key: bytes | None = None, categories: tuple[str, ...] = CATEGORIES, cache_entries: int = 200_000,
                 tokenizer=None):
        self._key = key if key is not None else _key_from_env()
        self.categories = frozenset(categories)
        unknown = self.categories - set(CATEGORIES)
        if unknown:
            raise ValueError(f"unknown PII categories {sorted(unknown)}; known: {CATEGORIES}")
        self.counts: Counter[str] = Counter()
        self.token_mismatches = 0  # stand-ins whose token count differs from the value's (none expected)
        self._young: dict[str, str] = {}
        self._old: dict[str, str] = {}
        self._stand_ins: dict[tuple[str, str, bool], str] = {}
        self._cache_entries = cache_entries
        self._first, self._last, self._common = _words()
        self._tokenizer = tokenizer
        self._pieces: dict[str, tuple[str, ...]] | None = None
        self._ntok: dict[str, int] = {}

    @property
    def key_id(self) -> str:
        """A short fingerprint of the key (for lineage); the key itself is never written."""
        return hashlib.sha256(b"key-id\x00" + self._key).hexdigest()[:12]

    # ---- detection -------------------------------------------------------------------------
    def find(self, text: str) -> list[Span]:
        """Non-overlapping PII spans in ``text`` (the earliest, then longest, span of an overlap wins)."""
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
                found += self._addresses(text)
        if "IP_ADDRESS" in cats and text.count(":") >= 2:
            found += [Span(m.start(), m.end(), "IP_ADDRESS") for m in _IPV6.finditer(text) if _ipv6_ok(m.group())]
        if "PERSON" in cats:
            found += self._persons(text)
        return _resolve(found, text)

    def _ibans(self, text: str) -> list[Span]:
        out = []
        for m in _IBAN.finditer(text):
            value = m.group()
            while len(value.replace(" ", "").replace("-", "")) >= 15:  # trailing words may have been swallowed: trim back
                if iban_ok(value.replace("-", "")):
                    out.append(Span(m.start(), m.start() + len(value), "IBAN"))
                    break
                value = value[:-1].rstrip(" -")
        return out

    def _addresses(self, text: str) -> list[Span]:
        out = []
        common = self._common
        for k, rx in enumerate(_ADDRESSES):
            for m in rx.finditer(text):
                if k == 1 and not (m.group("lead") or m.group("trail")):
                    continue  # a street type and a name but no house number: not an address
                value = m.group()
                letters = [w for w in re.findall(_L + "+", value)]
                if k in (3, 5, 7) and all(lex.fold(w) in common for w in letters):
                    continue  # "Spring 2024", "March 12/3": ordinary words with a number
                end = m.end()
                for _ in range(4):
                    t = _ADDRESS_TAIL.match(text, end)
                    if not t or t.end() == end:
                        t = _PLACE_TAIL.match(text, end)  # ", Ponsonby, Auckland 1011": suburb and city
                        if not t or any(lex.fold(w) in common for w in t.group(1).split()):
                            break
                    end = t.end()
                out.append(Span(m.start(), end, "STREET_ADDRESS"))
        return out

    def _persons(self, text: str) -> list[Span]:
        out: list[Span] = []
        first, last, common = self._first, self._last, self._common
        for m in _NAME_RUN.finditer(text):
            words = [(w.start(), w.end(), w.group()) for w in _WORD_IN_RUN.finditer(m.group())]
            base = m.start()
            segs: list[list[tuple[int, int, str]]] = [[]]
            titled: list[bool] = [False]
            for ws, we, w in words:
                f = lex.fold(w.rstrip("."))
                if f in lex.TITLES and (w[0].isupper()):
                    segs.append([])
                    titled.append(True)
                    continue
                if f in lex.FUNCTION_WORDS or f in lex.COMMON_WORDS:
                    k = words.index((ws, we, w))
                    if (not segs[-1] and w[0].isupper() and k + 1 < len(words)
                            and (f in _names_all() or _LABEL.search(text, max(0, base + ws - 32), base + ws) is not None)
                            and lex.fold(words[k + 1][2]) not in lex.FUNCTION_WORDS
                            and _CUE_BEFORE.search(text, max(0, base + ws - 48), base + ws) is not None):
                        segs[-1].append((base + ws, base + we, w))  # "Name: Do Duc", "my name is May Chen"
                        continue
                    if segs[-1] and w[0].isupper() and (ws, we, w) == words[-1] and f in _names_all():
                        segs[-1].append((base + ws, base + we, w))  # "Garrett Best", "Theresa May"
                        continue
                    if segs[-1]:
                        segs.append([])
                        titled.append(False)
                    else:
                        titled[-1] = False
                    continue
                segs[-1].append((base + ws, base + we, w))
            for seg, title in zip(segs, titled):
                while seg and lex.fold(seg[-1][2]) in lex.PARTICLES and not seg[-1][2][0].isupper():
                    seg.pop()
                while seg and lex.fold(seg[0][2]) in lex.PARTICLES and not seg[0][2][0].isupper():
                    seg.pop(0)
                if not seg:
                    continue
                s, e = seg[0][0], seg[-1][1]
                if seg[-1][2][-2:] in ("'s", "’s") and len(seg[-1][2]) > 3:
                    e -= 2  # "Adebayo's order": the possessive is not part of the name
                names = [lex.fold(w) for _, _, w in seg if w[0].isupper() or lex.fold(w) not in lex.PARTICLES]
                cue = title or _CUE_BEFORE.search(text, max(0, s - 48), s) is not None \
                    or _JSON_KEY.search(text, max(0, s - 40), s) is not None or _CUE_AFTER.match(text, e) is not None
                known = [n for n in names if (n in first or n in last or n.replace("'", "") in last)]
                if cue:
                    ok = not all(n in common for n in names) or len(names) > 1 or title
                elif known:
                    plain = [n for n in names if n not in common]
                    ok = bool(plain) and (len(names) > 1 or names[0] in first) and any(n not in common for n in known)
                else:
                    ok = False
                if ok:
                    out.append(Span(s, e, "PERSON"))
        # names typed in lower case after the strongest cues ("my name is aarav sharma")
        if "here" in text or "speaking" in text or "name" in text.lower() or " am " in text or "'m " in text or "'s " in text:
            for rx in (_STRONG_LOWER, _HERE_LOWER):
                for m in rx.finditer(text):
                    span = self._lower_name(text, m.start(1), m.group(1))
                    if span is not None:
                        out.append(span)
        return out

    def _lower_name(self, text: str, start: int, group: str) -> Span | None:
        first, last, common = self._first, self._last, self._common
        words = group.split(" ")
        strong = re.search(r"(?i)(?:name(?: is|'s|:)|call me|called)\s+$", text[max(0, start - 16):start]) is not None
        take = []
        for k, w in enumerate(words):
            f = lex.fold(w)
            if f in lex.FUNCTION_WORDS or f in common or f in lex.COMMON_WORDS:
                # East Asian family names that are also English words ("my name is do minh", "ha eun")
                if not (strong and k == 0 and f in _SHORT_FAMILY and len(words) > 1
                        and lex.fold(words[1]) not in common and lex.fold(words[1]) not in lex.FUNCTION_WORDS):
                    break
            take.append(w)
        if not take or any(w[0].isupper() for w in take):  # capitalised ones are the main pass's job
            return None
        known = any(lex.fold(w) in first or lex.fold(w) in last for w in take)
        here = re.match(r"[,]? (?:here|speaking)\b", text[start + len(" ".join(take)):]) is not None
        if known or strong or here:
            return Span(start, start + len(" ".join(take)), "PERSON")
        return None

    # ---- replacement -----------------------------------------------------------------------
    def _digest(self, category: str, value: str) -> bytes:
        return hmac.new(self._key, f"{category}\x00{value}".encode(), hashlib.sha256).digest()

    def replacement(self, category: str, value: str, lead_space: bool = True) -> str:
        """The consistent stand-in for ``value`` (same input, same key -> same output); with a
        tokenizer, of the same token count when it follows a space (``lead_space``) or not."""
        key = (category, value, lead_space)
        hit = self._stand_ins.get(key)
        if hit is None:
            hit = self._stand_in(category, value, lead_space)
            if len(self._stand_ins) > 500_000:
                self._stand_ins.clear()
            self._stand_ins[key] = hit
        return hit

    def _stand_in(self, category: str, value: str, lead_space: bool) -> str:
        d = self._digest(category, value)
        best, best_gap = None, None
        target = self._count(value, lead_space) if self._tokenizer is not None else None
        for attempt in range(40 if category in ("IP_ADDRESS", "EMAIL", "IBAN") else 8):
            rng = random.Random(d + bytes([attempt]))
            cand = self._shape(category, value, rng, lead_space)
            if cand == value:
                continue
            if target is None:
                return cand
            gap = abs(self._count(cand, lead_space) - target)
            if gap == 0:
                return cand
            if best_gap is None or gap < best_gap:
                best, best_gap = cand, gap
        self.token_mismatches += 1
        return best if best is not None else self._shape(category, value, random.Random(d), lead_space)

    def _shape(self, category: str, value: str, rng: random.Random, lead_space: bool) -> str:
        if category in ("PHONE", "US_SSN", "CREDIT_CARD"):
            out = "".join(str(rng.randrange(10)) if c.isdigit() else c for c in value)
            if category == "US_SSN":  # area 9xx is never issued: the stand-in cannot be a real SSN
                i = next(i for i, c in enumerate(out) if c.isdigit())
                out = out[:i] + "9" + out[i + 1:]
            if category == "CREDIT_CARD" and luhn_ok(re.sub(r"\D", "", out)):  # never emit a valid card number
                i = max(i for i, c in enumerate(out) if c.isdigit())
                out = out[:i] + str((int(out[i]) + 1) % 10) + out[i + 1:]
            return out
        if category == "IBAN":
            body = "".join(str(rng.randrange(10)) if c.isdigit() else (rng.choice("ABCDEFGHJKLMNPRSTUVWXYZ") if c.isalpha() else c)
                           for c in value[4:])
            fake = f"{value[:2]}00{body}"
            if iban_ok(fake):  # never emit a valid IBAN
                i = max(i for i, c in enumerate(fake) if c.isdigit())
                fake = fake[:i] + str((int(fake[i]) + 1) % 10) + fake[i + 1:]
            return fake
        if category == "IP_ADDRESS":
            if ":" in value:
                out = "".join(rng.choice("0123456789") if c.isdigit() else (rng.choice("abcdef") if c.isalpha() else c) for c in value)
                return out  # same character classes (digits, a-f), so the same token count
            octets = value.split(".")
            first = {1: "0", 2: "10"}.get(len(octets[0]), "24" + str(rng.randrange(10)))  # 0/8, 10/8, 240/4: never public
            return ".".join([first] + ["".join(str(rng.randrange(10)) for _ in o) for o in octets[1:]])
        # letters: every word rebuilt (same case, same token count), kept words and punctuation kept
        keep = _KEEP_PERSON if category == "PERSON" else _KEEP_ADDRESS
        parts = re.split(r"([^\W\d_]+|\d+)", value)
        kept = _kept_type_word(parts) if category == "STREET_ADDRESS" else ()
        out, prev = [], (" " if lead_space else "")
        for i, part in enumerate(parts):
            if not part:
                continue
            if part.isdigit():
                out.append("".join(str(rng.randrange(1, 10)) if j == 0 and len(part) > 1 else str(rng.randrange(10))
                                   for j in range(len(part))))
            elif part[0].isalpha() and len(part) == 1:
                out.append(part)  # an initial or a unit letter ("39B") identifies nobody
            elif part[0].isalpha():
                tld = category == "EMAIL" and i == len(parts) - 2
                if tld or (category != "EMAIL" and part.islower() and lex.fold(part) in keep) or i in kept:
                    out.append(part)
                else:
                    out.append(self._fake_word(part, prev.endswith(" "), rng))
            else:
                out.append(part)
            prev = part
        return "".join(out)

    def _fake_word(self, word: str, space: bool, rng: random.Random) -> str:
        upper = word.isupper() and len(word) > 1
        title = word[0].isupper() and not upper
        case = (lambda s: s.upper()) if upper else (lambda s: s.capitalize()) if title else (lambda s: s.lower())
        first, last = self._first, self._last
        if self._tokenizer is None:
            n = max(1, round(len(word) / 3))
            for _ in range(8):
                w = case("".join(rng.choice(_SYLLABLES) for _ in range(n)))
                if lex.fold(w) not in first and lex.fold(w) not in last and w.lower() != word.lower():
                    return w
            return w
        target = self._count(word, space)
        pieces = self._piece_pool()
        best, best_gap = None, None
        for _ in range(10):
            w = case(rng.choice(pieces["head"]) + "".join(rng.choice(pieces["tail"]) for _ in range(max(0, target - 1))))
            if lex.fold(w) in first or lex.fold(w) in last or w.lower() == word.lower():
                continue
            gap = abs(self._count(w, space) - target)
            if gap == 0:
                return w
            if best_gap is None or gap < best_gap:
                best, best_gap = w, gap
            if gap and target > 1 and self._count(w, space) > target:
                target_tail = max(0, target - 1 - (self._count(w, space) - target))
                w2 = case(rng.choice(pieces["head"]) + "".join(rng.choice(pieces["tail"]) for _ in range(target_tail)))
                if self._count(w2, space) == target and lex.fold(w2) not in first and lex.fold(w2) not in last:
                    return w2
        return best if best is not None else case("".join(rng.choice(_SYLLABLES) for _ in range(max(1, target))))

    def _count(self, text: str, space: bool) -> int:
        s = (" " + text) if space else text
        n = self._ntok.get(s)
        if n is None:
            n = len(self._tokenizer.encode(s, add_special_tokens=False).ids)
            if len(self._ntok) > 400_000:
                self._ntok.clear()
            self._ntok[s] = n
        return n

    def _piece_pool(self) -> dict[str, tuple[str, ...]]:
        """Word pieces the tokenizer keeps whole: 2-4 lower-case letters (word starts and continuations)."""
        if self._pieces is None:
            vocab = self._tokenizer.get_vocab()
            head, tail = [], []
            for tok in vocab:
                core = tok.lstrip("Ġ▁")
                if not (2 <= len(core) <= 4 and core.isascii() and core.isalpha() and core.islower()):
                    continue
                if tok == core:
                    tail.append(core)
                    head.append(core)
            head = sorted(h for h in head if self._count(h.capitalize(), True) == 1 and self._count(h, True) <= 2)[:3000]
            tail = sorted(t for t in tail if len(t) >= 2)[:3000]
            self._pieces = {"head": tuple(head) or _SYLLABLES, "tail": tuple(tail) or _SYLLABLES}
        return self._pieces

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
            lead = s.start > 0 and text[s.start - 1] == " "
            parts.append(self.replacement(s.category, text[s.start:s.end], lead))
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


def _ssn_ok(area: str, group: str, serial: str) -> bool:
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def _ipv6_ok(value: str) -> bool:
    try:
        ipaddress.IPv6Address(value)
        return True
    except ValueError:
        return False


_TEXT_KINDS = ("STREET_ADDRESS", "PERSON")


def _resolve(spans: list[Span], text: str) -> list[Span]:
    """Non-overlapping spans. Validated kinds (emails, IBANs, cards, SSNs, IPs, phones) come
    first; of overlapping ones the earliest-starting, then longest, then higher-priority wins.
    Names and addresses then fill the text between them: one that overlaps a kept span is cut
    to its part outside it ("IBAN DE87…" keeps the IBAN whole; "…, 0793 Oslo Nakamura Yuto"
    keeps the name after the address)."""
    if len(spans) <= 1:
        return spans
    prio = {c: i for i, c in enumerate(CATEGORIES)}
    spans.sort(key=lambda s: (s.start, -(s.end - s.start), prio[s.category]))
    kept: list[Span] = []
    for s in spans:
        if s.category in _TEXT_KINDS:
            continue
        if kept and s.start < kept[-1].end:
            continue
        kept.append(s)
    for s in spans:
        if s.category not in _TEXT_KINDS:
            continue
        start, end = s.start, s.end
        for k in kept:
            if k.end <= start or k.start >= end:
                continue
            if k.start <= start:  # keep what follows the kept span, from the next word on
                start = k.end
                while start < end and (not text[start].isalpha() or text[start - 1].isalpha()):
                    start += 1
            else:  # keep what precedes it
                end = k.start
                while end > start and not text[end - 1].isalpha():
                    end -= 1
            if start >= end:
                break
        if end - start >= 2 and any(c.isalpha() for c in text[start:end]):
            kept.append(Span(start, end, s.category))
            kept.sort(key=lambda x: x.start)
    return kept
