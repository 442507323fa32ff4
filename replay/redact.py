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
- Street addresses, two ways. By form: national formats with the street type before the name
  ("Calle de la Paz 12", "12 rue du Faubourg Saint-Honoré", "Via dei Mille 3", "ul. Długa 5/3"),
  after it ("300 Anna Salai Walk", "İstiklal Caddesi No: 12"), compounded into it ("Hauptstraße 5",
  "Kerkstraat 12", "Storgatan 4"), German prepositional streets ("Am Markt 4"), Japanese block
  numbers, with unit prefixes and postcode/city tails. By structure, for the forms no list names
  (issue 24): a house number next to a run of capitalised words, in either order ("Ilica 242",
  "45 Lý Tự Trọng", "Teheran-ro 152", "No. 7, Sec. 5, Xinyi Rd.", "Narva mnt 7", "Calle 11 N° 739"),
  taken when the context says it is an address: a locality after it (postcode and place, place and
  postcode, an administrative unit, a grid number), an address cue before it ("Lieferadresse:",
  "we moved to", a JSON key such as "street") or "is my address" after it. Prose with numbers is
  not taken: numbered things ("Chapter 12", "Version 2", "Room 5", "Gate 23"), quantities ("Berlin
  5 years ago"), runs cut at ordinary English words. Every form needs a house number.
- National phone formats without a country code ("06 12 34 56 78", "(0161) 496 0452",
  "010-1234-5678") after a phone cue, or alone when only a phone has that shape.
- National identity numbers (``NATIONAL_ID``) of 14 countries by shape and check digits (UK NINO,
  Spanish DNI/NIE, Brazilian CPF, Korean RRN, Chinese resident id, Swedish personnummer, Italian
  codice fiscale, French NIR, Finnish HETU, Norwegian fødselsnummer, Indian Aadhaar; Canadian SIN,
  Polish PESEL and Dutch BSN only after a cue, their shapes being too plain).
- Why not an NER model: ``benchmarks/results/pii_ner_probe.txt`` (spaCy's small English pipeline,
  the only one installable here) found 72% of the held-out names and 41% of the addresses at
  about 200 texts/s; see docs/replay.md.

Replacement is consistent: a keyed hash (HMAC-SHA256 with ``AUTORESEARCH_REDACTION_KEY``) of the
value seeds its stand-in, so the same value gets the same stand-in across requests (shared
prefixes stay shared). Stand-ins keep the value's shape: digits stay digits (cards made
Luhn-invalid, SSN area 9xx, IBAN and national-id check digits wrong), letters stay letters of the same case, and
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
CATEGORIES = (
    "EMAIL",
    "IBAN",
    "CREDIT_CARD",
    "US_SSN",
    "NATIONAL_ID",
    "IP_ADDRESS",
    "PHONE",
    "STREET_ADDRESS",
    "PERSON",
)

_EMAIL = re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}")
_IBAN = re.compile(
    r"\b(?:[A-Z]{2}\d{2}(?:[ -]?[A-Z0-9]){11,30}|[a-z]{2}\d{2}(?:[ -]?[a-z0-9]){11,30})\b"
)  # printed, electronic, typed in lower case
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?!\d)")
_SSN = re.compile(r"(?<![\d-])(\d{3})([- .])(\d{2})\2(\d{4})(?![\d-])")
_SSN_BARE = re.compile(r"(?i)\b(?:ssn|social security(?: number| no\.?)?|social)\D{0,12}(\d{9})\b")
_IPV4 = re.compile(
    r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\d]|\.\d)"
)
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:\d{1,3}(?:\.\d{1,3}){3}|[0-9A-Fa-f]{0,4})(?![\w:]|\.\d)")
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}|00[1-9]\d{0,2}(?= ))(?:[ .-]?\(?\d{1,5}\)?){2,6}(?!\w)"  # international, +CC ... / 00CC ...
    r"|(?<![\w(])(?:1[ .-])?(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}(?!\w)"  # North American
    r"|(?<![\w(+\-])0[1-9]\d{2,3} \d{3} ?\d{3,4}(?![\w\-])"  # national trunk prefix: 0803 123 4567
    r"|(?i:(?<=phone )|(?<=call )|(?<=text )|(?<=mobile )|(?<=cell )|(?<=tel )|(?<=whatsapp )|(?<=number ))\d{10,12}(?!\w)"
)
# National forms without a country code ("06 12 34 56 78", "(0161) 496 0452", "010-1234-5678",
# "8 (912) 345-67-89"): digit groups; taken after a phone cue, or alone when the shape is a
# phone's only (a parenthesised area code, a "+", or a trunk 0 with nine or more digits).
_PHONE_GROUPS = re.compile(
    r"(?<![\w+.\-/(])(?:\+\d{1,3}[ .-]?|\d ?(?=\())?(?:\(\d{1,5}\)[ .-]?)?\d{1,5}(?:[ .-]\d{1,8}){0,5}"
    r"(?![\w\-/]|[.,:]\d)"
)
_SSN_SHAPE = re.compile(r"\d{3}([- .])\d{2}\1\d{4}")
_PHONE_CUE = re.compile(
    r"(?i)(?:\b(?:phone|ph|tel|telephone|telefon|telefono|teléfono|telefone|telefoon|tél|tlf|puh|mob|mobile|mobil|"
    r"móvil|cell|cellphone|handy|call|ring|text|sms|whatsapp|viber|signal|fax|contact|reach|number|nummer|"
    r"número|numero)\b|☎|📞)[^\w\n]{0,4}(?:(?:me|us|on|at|is|number|no|nr|ist|es|my|the)[^\w\n]{1,3}){0,3}$"
)
_PHONE_NOT = re.compile(
    r"(?i)\b(?:order|invoice|ticket|tracking|reference|ref|account|policy|booking|case|claim|serial|"
    r"customer|member|card|iban|ssn|id)\b[^.\n]{0,16}$"
)
_DIGIT = re.compile(r"\d")


# ---- national identity numbers: each country's shape and check digits ------------------------------
def _date_ok(yymmdd: str) -> bool:
    return 1 <= int(yymmdd[2:4]) <= 12 and 1 <= int(yymmdd[4:6]) <= 31


def _weighted(digits: str, weights) -> int:
    return sum(int(c) * w for c, w in zip(digits, weights))


_VERHOEFF_D = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    [1, 2, 3, 4, 0, 6, 7, 8, 9, 5],
    [2, 3, 4, 0, 1, 7, 8, 9, 5, 6],
    [3, 4, 0, 1, 2, 8, 9, 5, 6, 7],
    [4, 0, 1, 2, 3, 9, 5, 6, 7, 8],
    [5, 9, 8, 7, 6, 0, 4, 3, 2, 1],
    [6, 5, 9, 8, 7, 1, 0, 4, 3, 2],
    [7, 6, 5, 9, 8, 2, 1, 0, 4, 3],
    [8, 7, 6, 5, 9, 3, 2, 1, 0, 4],
    [9, 8, 7, 6, 5, 4, 3, 2, 1, 0],
]
_VERHOEFF_P = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    [1, 5, 7, 6, 2, 8, 3, 0, 9, 4],
    [5, 8, 0, 3, 7, 9, 6, 1, 4, 2],
    [8, 9, 1, 6, 0, 4, 3, 5, 2, 7],
    [9, 4, 5, 3, 1, 2, 6, 8, 7, 0],
    [4, 2, 8, 6, 5, 7, 3, 9, 0, 1],
    [2, 7, 9, 3, 8, 0, 6, 4, 1, 5],
    [7, 0, 4, 6, 9, 1, 3, 2, 5, 8],
]


def _verhoeff_ok(digits: str) -> bool:
    c = 0
    for i, ch in enumerate(reversed(digits)):
        c = _VERHOEFF_D[c][_VERHOEFF_P[i % 8][int(ch)]]
    return c == 0


def _mod11_no(digits: str) -> bool:
    for n, w in ((9, (3, 7, 6, 1, 8, 9, 4, 5, 2)), (10, (5, 4, 3, 2, 7, 6, 5, 4, 3, 2))):
        k = (11 - _weighted(digits, w) % 11) % 11
        if k == 10 or k != int(digits[n]):
            return False
    return True


_CF_ODD = dict(
    zip(
        "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        [
            1,
            0,
            5,
            7,
            9,
            13,
            15,
            17,
            19,
            21,
            1,
            0,
            5,
            7,
            9,
            13,
            15,
            17,
            19,
            21,
            2,
            4,
            18,
            20,
            11,
            3,
            6,
            8,
            12,
            14,
            16,
            10,
            22,
            25,
            24,
            23,
        ],
    )
)


def _cf_ok(v: str) -> bool:
    total = sum(
        _CF_ODD[ch] if i % 2 == 0 else (int(ch) if ch.isdigit() else ord(ch) - 65) for i, ch in enumerate(v[:15])
    )
    return chr(65 + total % 26) == v[15]


def _cn_ok(v: str) -> bool:
    total = _weighted(v[:17], (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2))
    return "10X98765432"[total % 11] == v[17] and 1 <= int(v[10:12]) <= 12 and 1 <= int(v[12:14]) <= 31


def _nino_ok(v: str) -> bool:
    return v[:2] not in ("BG", "GB", "NK", "KN", "TN", "NT", "ZZ") and v[0] not in "DFIQUV" and v[1] not in "DFIOQUV"


_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"
# (pattern, validator of the value with separators removed, needs a cue before it)
_NATIONAL_IDS = [
    (re.compile(p), ok, cue)
    for p, ok, cue in (
        (r"(?<![\w])[A-Z]{2} ?\d{2} ?\d{2} ?\d{2} ?[A-D](?![\w])", _nino_ok, False),  # GB National Insurance
        (r"(?<![\w-])[XYZ]?\d{7,8}-?[A-Z](?![\w])", lambda v: _dni_ok(v), False),  # ES DNI / NIE
        (r"(?<![\d.])\d{3}\.\d{3}\.\d{3}-\d{2}(?![\d])", lambda v: _cpf_ok(v), False),  # BR CPF
        (
            r"(?<![\w-])\d{6}-[1-4]\d{6}(?![\w-])",
            lambda v: (
                _date_ok(v[:6]) and (11 - _weighted(v, (2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5)) % 11) % 10 == int(v[12])
            ),
            False,
        ),  # KR resident number
        (r"(?<![\w])\d{17}[\dX](?![\w])", _cn_ok, False),  # CN resident id
        (
            r"(?<![\w-])(?:19|20)?\d{6}[-+]\d{4}(?![\w-])",
            lambda v: _date_ok(v[-10:-4]) and luhn_ok(v[-10:]),
            False,
        ),  # SE
        (r"(?<![\w])[A-Z]{6}\d{2}[A-EHLMPR-T]\d{2}[A-Z]\d{3}[A-Z](?![\w])", _cf_ok, False),  # IT codice fiscale
        (
            r"(?<![\w])[12] ?\d{2} ?\d{2} ?(?:\d{2}|2[AB]) ?\d{3} ?\d{3} ?\d{2}(?![\w])",
            lambda v: v[5:7].isdigit() and 97 - int(v[:13]) % 97 == int(v[13:]) and 1 <= int(v[3:5]) <= 12,
            False,
        ),  # FR NIR
        (r"(?<![\w-])\d{6}[-+A]\d{3}[0-9A-Y](?![\w-])", lambda v: _hetu_ok(v), False),  # FI henkilötunnus
        (
            r"(?<![\w.-])\d{11}(?![\w-]|\.\d)",
            lambda v: _date_ok(v[4:6] + v[2:4] + v[0:2]) and _mod11_no(v),
            False,
        ),  # NO fødselsnummer
        (r"(?<![\w-])[2-9]\d{3} \d{4} \d{4}(?![\w-])", _verhoeff_ok, False),  # IN Aadhaar, grouped
        (r"(?<![\w-])[2-9]\d{11}(?![\w-])", _verhoeff_ok, True),  # IN Aadhaar
        (r"(?<![\w-])[1-79]\d{2}[ -]?\d{3}[ -]?\d{3}(?![\w-])", luhn_ok, True),  # CA SIN
        (
            r"(?<![\w.-])\d{11}(?![\w-]|\.\d)",
            lambda v: _date_ok(v[:6]) and (10 - _weighted(v, (1, 3, 7, 9, 1, 3, 7, 9, 1, 3)) % 10) % 10 == int(v[10]),
            True,
        ),  # PL PESEL
        (
            r"(?<![\w.-])\d{9}(?![\w-]|\.\d)|(?<![\w.])\d{4}\.\d{2}\.\d{3}(?![\w]|\.\d)",
            lambda v: (_weighted(v, (9, 8, 7, 6, 5, 4, 3, 2)) - int(v[8])) % 11 == 0,
            True,
        ),  # NL BSN
        (r"(?<![\d.])\d{11}(?![\d])", lambda v: _cpf_ok(v), True),  # BR CPF, bare
    )
]
_ID_HINT = re.compile(
    r"(?:\d[ .\-+]?){7,}|[A-Z]{6}\d\d[A-Z]|\d{6}[-+A]\d{3}|[A-Z]{2} ?\d\d ?\d\d ?\d\d ?[A-D]"
)  # every form above has one of these
_ID_CUE = re.compile(
    r"(?i)\b(?:sin|nas|social insurance|pesel|bsn|burgerservicenummer|sofi|aadhaar|aadhar|uidai|cpf|dni|nie|nif|"
    r"personnummer|cpr|fødselsnummer|fodselsnummer|hetu|henkilötunnus|national id|id card|id number|identity|"
    r"resident registration|codice fiscale|national insurance|nino|insee|sécurité sociale|securite sociale|"
    r"tax id|tin|identification)\b[^\n\d]{0,24}$"
)


def _dni_ok(v: str) -> bool:
    digits = str("XYZ".index(v[0])) + v[1:-1] if v[0] in "XYZ" else v[:-1]
    return len(digits) == 8 and _DNI_LETTERS[int(digits) % 23] == v[-1]


def _hetu_ok(v: str) -> bool:
    if len(v) == 11:  # the century sign "A" (after separators were dropped)
        v = v[:6] + v[7:]
    return _date_ok(v[4:6] + v[2:4] + v[0:2]) and "0123456789ABCDEFHJKLMNPRSTUVWXY"[int(v[:9]) % 31] == v[9]


def _cpf_ok(v: str) -> bool:
    if len(set(v)) == 1:
        return False
    d1 = _weighted(v[:9], range(10, 1, -1)) * 10 % 11 % 10
    d2 = _weighted(v[:10], range(11, 1, -1)) * 10 % 11 % 10
    return d1 == int(v[9]) and d2 == int(v[10])


def national_id_ok(value: str) -> bool:
    """Whether ``value`` is a valid national identity number of one of the recognised countries."""
    for rx, ok, _ in _NATIONAL_IDS:
        if rx.fullmatch(value) and _id_check(ok, value):
            return True
    return False


def _id_check(ok, value: str) -> bool:
    try:
        return bool(ok(re.sub(r"[\s.\-+]", "", value)))
    except (ValueError, IndexError, KeyError):
        return False


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
_NAME_WORD = rf"(?:{_U}\.(?= {_U})|{_PREFIXED}|{_CAPW})"
_PARTICLE = _trie([p for p in lex.PARTICLES if p.isalpha() and p.islower()])
_NAME_RUN = re.compile(rf"(?<![\w'’\-]){_NAME_WORD}(?!\w)(?:(?: (?:{_PARTICLE}))* {_NAME_WORD}(?!\w)){{0,5}}")
_WORD_IN_RUN = re.compile(rf"{_NAME_WORD}|{_L}+")

_CUE_BEFORE = re.compile(
    r"(?i)(?:\b(?:from|to|cc|bcc|by|for)\s*:(?=\s*$)|\b(?:"
    + lex.ROLE_NOUNS
    + r")|\bmy (?:"
    + lex.RELATIONS
    + r")|\b(?:"
    + lex.RELATIONS
    + r")|"
    r"\b(?:" + _trie(t for t in lex.TITLES if t.replace(".", "").isalpha()) + r")\.?)"
    r"(?:\s+(?:of|on|for|to|from)\s+(?:the|this|that|my|our|your|his|her)\s+\w+)?"
    r"(?:\s+(?:is|was|are|were|will be|should be|reads|says|shows))?"
    r"(?:\s*\([^)]{0,20}\))?[\s,:;\-–—]*(?:\.[^\S\n]*\n\s*)?$"
)  # "agent. Rebook ...": a full stop ends the cue's sentence
_JSON_KEY = re.compile(
    r"(?i)\"[a-z_]*(?:name|recipient|customer|holder|payee|beneficiary|contact|sender|addressee|passenger|"
    r"owner|client|guest|patient|driver|agent|user|signatory|from|to|attn|by|person|employee|member)[a-z_]*\"\s*:\s*\"$"
)
# Romanised Vietnamese, Korean and Chinese family names that are also English words.
_NEVER_SURNAME = frozenset(
    "the a an and or but if my our your his her their its we you he she it they this that i".split()
)
_SHORT_FAMILY = frozenset("do ha ma an le so to ho oh go yu no ko lo mo bo on".split())
# Labels and sign-offs of other languages, and sign-offs closed by "!" or a dash ("Thanks! — Ana Ruiz").
_CUE_INTL = re.compile(
    r"(?i)\b(?:nom|nome|naam|nombre|navn|namn|nimi|imię|jméno|titular|kontoinhaber|inhaber|empfänger|destinataire|destinatario|"
    r"destinatário|cliente|kunde|gast|huésped|ospite|paciente|paziente|patiënt|passagier|pasajero|passeggero|assicurato|"
    r"versicherungsnehmer|beneficiario|begünstigter|ansprechpartner|referente|contacto|contatto|policyholder|guest name|"
    r"cordialement|salutations|saludos|un saludo|atentamente|mit freundlichen grüßen|freundliche grüße|viele grüße|grüße|"
    r"cordiali saluti|distinti saluti|saluti|met vriendelijke groet|groeten|med vänliga hälsningar|hälsningar|venlig hilsen|"
    r"hilsen|mvh|pozdrawiam|s pozdravem|atenciosamente|abraços|obrigad[oa]|merci|gracias|grazie|danke|thanks|thank you|"
    r"cheers|regards)\b[\s,:;.!\-–—]*$"
)
_SURNAME_FIRST = re.compile(
    rf"(?<![\w'’\-])({_U}(?:['’]?{_U})+(?:[\-'’ ]{_U}{{2,}})?), ({_CAPW}(?: {_CAPW}){{0,2}})(?![\w'’\-])"
)
_MORE_TITLES = frozenset("ing dipl mag dott dottssa avv arch lic licda arq ir drs mgr bc ph.d phd".split())
_TITLE_CUE = re.compile(r"\b(?:Ing|Dipl\.-Ing|Dipl|Mag|Dott|Dott\.ssa|Avv|Arch|Lic|Licda|Arq|Ir|Drs|Mgr|Bc)\.\s*$")
_CONTRACTIONS = frozenset("i'm i've i'll i'd it's we're you're they're that's let's don't can't won't isn't".split())
_LABEL_LOWER = re.compile(
    r"(?i)(?:\b(?:name|full name|recipient|customer|guest name|guest|patient|passenger(?: name)?|policyholder|holder|"
    r"account holder|titular|nom|nome|naam|nombre|kontoinhaber|empfänger|destinataire|destinatario)\s*:\s*|"
    r"\b(?:ask for|addressed to|c/o|passenger name|guest name|my (?:" + lex.RELATIONS + r"))\s+|"
    r"\b(?:kind regards|best regards|regards|thanks|thank you|cheers|saludos|cordialement|mit freundlichen grüßen|"
    r"viele grüße|cordiali saluti|met vriendelijke groet|med vänliga hälsningar|venlig hilsen|pozdrawiam|atenciosamente)"
    r"[,!.]?(?:\s*[—–-])?\s+)([^\W\d_]+\.?(?:['’\-][^\W\d_]+)*(?: [^\W\d_]+(?:['’\-][^\W\d_]+)*){0,3})"
)
_LABEL_LOWER_KEYS = (
    "name",
    "recipient",
    "customer",
    "guest",
    "patient",
    "passenger",
    "holder",
    "titular",
    "nom",
    "naam",
    "nombre",
    "inhaber",
    "empfänger",
    "destinat",
    "ask for",
    "addressed to",
    "c/o",
    "my ",
    "regards",
    "thank",
    "cheers",
    "saludos",
    "cordialement",
    "grüß",
    "saluti",
    "groet",
    "hälsningar",
    "hilsen",
    "pozdrawiam",
    "atenciosamente",
)
# lower-case names before a role verb: "ogawa shota will sign for it"
_LOWER_BEFORE = re.compile(
    r"(?:^|[.!?;:\n—]\s*)([^\W\d_A-Z][^\W\d_]*(?:['’\-][^\W\d_]+)*(?: [^\W\d_]+(?:['’\-][^\W\d_]+)*){1,2})"
    r"(?= (?:will (?:collect|pick|sign|call)|here\b|speaking\b|from (?:accounts|your|the)\b))"
)
_LABEL = re.compile(
    r"(?i)\b(?:name|holder|customer|client|recipient|payee|beneficiary|from|to|attn|att|contact|passenger|"
    r"owner|signed|sender|addressee)\s*:\s*$"
)
_CUE_AFTER = re.compile(
    r"(?i)(?:['’]s)?[\s,]*(?:here\b|speaking\b|again\b|signed\b|said\b|says\b|wrote\b|called\b|calling\b|will (?:collect|pick|sign|call)|"
    r"is (?:the|my|our) (?:account |card |main |primary |authori[sz]ed )*(?:holder|owner|user|name|contact|beneficiary|"
    + lex.RELATIONS
    + r")|"
    r"(?:from|at|of) (?:your|the) (?:team|support|desk|store|branch|office|bank|call cent(?:er|re))|"
    r"was (?:very |really )?(?:helpful|rude|kind)|promised|told me|confirmed|approved|handled|signed for)"
)
_STRONG_LOWER = re.compile(
    r"(?i)(?:\b(?:my name is|my name's|name is|name:|full name:|call me|i am called|this is|it's|it is|i am|i'm)\s+)"
    r"([^\W\d_][^\W\d_'’\-]*(?:['’\-][^\W\d_]+)*\.?(?: [^\W\d_][^\W\d_'’\-]*(?:['’\-][^\W\d_]+)*){0,3})"
)
_HERE_LOWER = re.compile(
    r"(?i)(?:^|\n|[.!?] |(?:hi|hello|hey|good (?:morning|afternoon|evening)|it's|it is|this is)[,!.]? )"
    r"([^\W\d_]+(?:['’\-][^\W\d_]+)*(?: [^\W\d_]+(?:['’\-][^\W\d_]+)*){0,3})[,]? (?:here|speaking)\b"
)

# ---- street addresses --------------------------------------------------------------------------
_TYPE_BEFORE = _trie(
    {t for t in lex.STREET_TYPES_BEFORE}
    | {t.capitalize() for t in lex.STREET_TYPES_BEFORE}
    | {t.upper() for t in lex.STREET_TYPES_BEFORE if len(t) <= 3}
)
_TYPE_AFTER = _trie(
    {t for t in lex.STREET_TYPES_AFTER}
    | {t.capitalize() for t in lex.STREET_TYPES_AFTER}
    | {t.upper() for t in lex.STREET_TYPES_AFTER if len(t) <= 4}
)
_ENDINGS = _trie(lex.compound_street_endings())
_ST_PART = (
    r"(?:(?:de|del|della|delle|dei|degli|di|da|das|dos|do|du|des|la|le|les|los|las|el|al|of|the|van|von|der|den|na|"
    r"a|e|y|och|og|und|et|i|à|ad)\s|(?:d|l|dell|all|sull|dall|nell)['’])"
)
_ROMAN = r"(?:[IVX]{1,5}|\d{1,3}(?:st|nd|rd|th|º|ª|°|e|er|\.))"
_ST_NAME = rf"(?:{_ST_PART})*(?:{_CAPW}|{_ROMAN})(?:[ \-](?:{_ST_PART})*(?:{_CAPW}|{_ROMAN})){{0,4}}"
_HOUSE = r"\d{1,5}(?:[A-Za-z](?![\w]))?(?:[/-]\d{1,4}[A-Za-z]?)?"
_HNW = r"(?:(?i:no|nr|num|nº|n°|n|d|dom|č|house no|plot|bldg|block|blk|door no|h\.no)\.?:?\s?)"
_UNIT = (
    r"(?i:flat|apt|apartment|unit|suite|ste|room|rm|floor|fl|level|plot|house no|house|building|bldg|block|blk|door|"
    r"shop|office|po box)"
)
_UNIT_VALUE = r"(?:\d\w{0,5}|[A-Za-z]{1,2}-?\d\w{0,4}|[A-Z](?![\w]))"  # "4", "39B", "B-42", "C": not "was"
_ADDRESSES = [
    re.compile(p)
    for p in (
        # number first, type after the name: "300 Anna Salai Walk", "Apt 39B, 221B Baker Street"
        rf"(?<![\w./-])(?:{_UNIT}\.? ?(?:no\.? ?)?{_UNIT_VALUE}(?:, ?| |/))?{_HOUSE},? (?:{_CAPW}[ ]|{_ROMAN} |(?:{_ST_PART})){{1,5}}(?:{_TYPE_AFTER})\b\.?",
        # type before the name, number after or before: "Calle de la Paz 12", "12 bis rue de Rivoli", "Rua Augusta, 1008"
        rf"(?<![\w.@/-])(?:(?P<lead>{_HOUSE}(?: (?i:bis|ter|quater|[a-h]))?,? ))?(?:{_TYPE_BEFORE})\.? ?{_ST_NAME}"
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
    )
]
_ADDRESS_TAIL = re.compile(
    rf"(?:,? {_UNIT}\.? ?(?:no\.? ?)?\w{{1,6}}|,? (?i:apto|apt|piso|puerta|daire|kv|kat|etg|whg|top|stiege|int|interior|"
    rf"depto|dpto|bloco|andar|sala|esc|escalera)\.?:? ?\w{{1,5}}|,? \d{{1,2}}[º°ª]\.?(?: ?[A-Za-z](?!\w)| th\.| tv\.| mf\.)?|"
    rf" [A-Z](?: \d{{1,3}})?(?=,|$|\s)|,? (?:\d{{5}}(?:-\d{{3,4}})?|\d{{4}}(?: ?[A-Z]{{2}}(?!\w))?|\d{{2}}-\d{{3}}|\d{{3}} \d{{2}}|"
    rf"[A-Z]{{1,2}}\d[A-Z\d]? \d[A-Z]{{2}}|\d{{6}}) {_CAPW}(?: {_CAPW})?|,? (?:Col\.|Colonia|Bairro|Barrio|Quartier) {_CAPW}(?: {_CAPW})?|"
    rf" - \d{{4}}-\d{{3}} {_CAPW}|, {_CAPW}-(?:ku|shi|cho|machi|gun)|,? \d{{4,5}}-\d{{3}})"
)

_PLACE_TAIL = re.compile(
    rf", ((?:{_CAPW})(?: {_CAPW}){{0,2}})(?: \d{{4,6}}| [A-Z]{{1,2}}\d[A-Z\d]? \d[A-Z]{{2}})?(?![\w'’-])"
)

# ---- street addresses by structure ----------------------------------------------------------------
# A form list misses the next country's form, so addresses are also found from their structure:
# a house number next to a run of capitalised words (the street), in either order ("Ilica 242",
# "45 Lý Tự Trọng", "Teheran-ro 152", "No. 7, Sec. 5, Xinyi Rd."), taken when the context says
# it is an address: a locality after it (postcode and place, place and postcode, an
# administrative unit, a grid number "# 71-21"), an address cue before it ("Delivery address:",
# "we moved to", a JSON key "street"), or "is my address" after it. Ordinary numbered things
# ("Chapter 12", "Version 2", "Room 5", "Gate 23") and quantities ("Berlin 5 years ago") are not.
_LOW = r"[a-zß-öø-ÿā-ɏ]"
_S_WORD = rf"(?:{_U}{_L}{{0,4}}\.|(?:{_LOW}{{1,3}}-)?{_U}{_L}*(?:['’\-]{_L}+)*|\d{{1,3}}(?:st|nd|rd|th|º|ª)(?![\w])|\d{{1,3}}-{_LOW}{{2,4}}(?![\w]))"
_S_LOWW = rf"{_LOW}{{1,10}}\.?"  # a lower-case word inside or after the street's name: "kralja", "gate", "mnt", "g."
_S_RUN = rf"{_S_WORD}(?:[ \-](?:{_S_LOWW} ){{0,2}}{_S_WORD}){{0,5}}"
_S_NUM = (
    r"\d{1,5}(?:[A-Za-z]|[Bb]is)?(?:(?:/|-)(?:\d{1,4}[A-Za-z]?|[A-Z](?![\w])|Top ?\d{1,3}))*"
    r"(?: (?:bis|ter|quater)(?![\w]))?"
)
_S_MARK = r"(?:No\.?:?|Nr\.?|nr\.?|no\.?|N°|Nº|n\.?º|n°|Số|d\.|č\.|#)"
# street, then number: "Ilica 242", "ul. Pokrovka, d. 77", "Narva mnt 7", "Sejong-daero 23-gil 45"
_NAME_NUM = re.compile(
    rf"(?<![\w'’\-./#@])(?:{_LOW}{{1,6}}\. ?)?(?P<run>{_S_RUN})(?: (?P<low>{_S_LOWW}))?,? (?:{_S_MARK} ?)?"
    rf"(?P<num>{_S_NUM})(?:\.(?=[ ,]))?(?![\w/]|[:.,]\d)"
)
# number, then street: "45 Lý Tự Trọng", "No. 7, Sec. 5, Xinyi Rd.", "3 Chome-26-23 Tenjin", "283, Sejong-daero"
_NUM_NAME = re.compile(
    rf"(?<![\w'’\-./#@:])(?:{_S_MARK} ?)?(?P<num>\d{{1,2}} Chome-\d{{1,3}}(?:-\d{{1,3}})?|{_S_NUM}),? "
    rf"(?:{_U}{_L}{{0,6}}\.? \d{{1,4}}[A-Z]?,? ){{0,3}}(?:(?P<low>{_LOW}{{2,10}}\.?) )?(?P<run>{_S_RUN})"
    rf"(?: \d{{1,3}}(?:/\d{{1,3}})?(?=,))?"
)
_S_PW = rf"(?:{_U}{_L}{{0,3}}\.|(?>{_U}{_L}*(?:['’\-]{_L}+)*)(?!-?\d))"
_S_PLACE = rf"(?=[^\W\d_]{{2}}){_S_PW}(?:[ \-](?:{_LOW}{{1,4}} )?{_S_PW}){{0,3}}(?: \d{{1,2}}(?= *(?:$|[,\n;)])))?"
_S_POSTCODE = r"(?:[A-Z]{1,2}-)?\d{2,5}(?:[ -]\d{2,4})?(?: ?[A-Z]{2}(?![\w]))?|[A-Z]\d{4}[A-Z]{0,3}"
_S_CODE = (
    r"[A-Z]{1,2}-\d{4,5}(?![\w])|\d{3}-\d{4}(?![\w-])|\d{5}-\d{3}(?![\w-])|CEP \d{5}-?\d{3}|[A-Z]{1,2}\d[A-Z\d]? \d[A-Z]{2}(?![\w])"
    r"|[A-Z]\d[A-Z] ?\d[A-Z]\d(?![\w])|[A-Z]\d{2} [A-Z\d]{4}(?![\w])"
)
_S_ADMIN = (
    rf"{_U}{_L}+-(?:ku|gu|shi|si|cho|machi|gun|dong)(?![\w])|{_S_PLACE} (?:District|Dist\.|Ward|City|Prefecture|Province|"
    rf"County|Oblast|Township)(?![\w])|(?:Quận|Phường|Huyện|Xã|TP\.|Col\.|Colonia|Brgy\.|Barangay|Bairro|Barrio|Sector|sector|"
    rf"Kota|Distrito|Co\.) ?(?:{_S_PLACE}|\d{{1,3}})|{_S_PLACE}/{_S_PLACE}|{_S_PLACE} \({_S_PLACE}\)"
)
_S_UNIT = (
    r"(?i:apt|apto|apartment|depto|dpto|dept|piso|sala|int|of|lgh|bte|bus|bl|sc|et|ap|kv|kat|daire|fsz|lok|m|unit|suite|ste|"
    r"flat|room|floor|fl|block|blk|bloco|andar|esc|puerta|top|stiege|tr|whg|bldg|building|tower|d)(?![^\W\d_])\.?:? ?[\w/-]{1,6}"
    r"|\d{1,2}\. ?(?:th|tv|mf|sal|OG|em)\.?(?: (?:links|rechts)| \d{1,3}\.?(?=[ ,]|$))?|st\. ?(?:tv|th|mf)\.?|\d{1,2} ?[ºª°]\.? ?(?:[A-Za-z]{1,5}\.?)?"
    r"|\d{1,2}\.º (?:Esq|Dto|Dir)\.?|\d{1,2}r \d{1,2}a|#\d{1,3}-\d{1,5}|\d{1,3}/F|[IVX]{1,4}/\d{1,3}|[A-Z](?: \d{1,3})?(?=[,\s]|$)"
    r"|bajo|r/c|(?:izq|dcha|izda|esq|dto)\.?"
)
_S_UNIT = rf"(?:{_S_UNIT})\.?"
_S_TAIL = re.compile(
    rf"(?P<sep>,\s*|\s+-\s+|\n|\s+|\s*/\s*)(?:"
    rf"(?P<mark>(?:N°|Nº|No\.?|No:|#) ?\d{{1,5}}(?:-\d{{1,4}})?(?![\w]))"
    rf"|(?P<pc>(?:{_S_POSTCODE}) {_S_PLACE})"
    rf"|(?P<code>{_S_CODE})"
    rf"|(?P<pp>{_S_PLACE}(?:,? [A-Z]{{2,3}})?,? (?:\d{{4,7}}(?:-\d{{4}})?|[A-Z]{{1,2}}\d[A-Z\d]? \d[A-Z]{{2}}|[A-Z]\d[A-Z] ?\d[A-Z]\d)(?![\w-]))"
    rf"|(?P<admin>{_S_ADMIN})"
    rf"|(?P<state>[A-Z]{{2}}(?=$|[\s,.;)!?]))"
    rf"|(?P<bare>\d{{4,6}}(?=$|[\s.,;!?)\"]))"
    rf"|(?P<unit>{_S_UNIT})"
    rf"|(?P<place>[A-Z]-\d{{1,2}}(?:/\d)?(?![\w])|\d{{1,3}}(?:st|nd|rd|th) {_S_PLACE}|{_S_PLACE})"
    rf")"
)
_S_UNIT_BEFORE = re.compile(rf"(?<![\w])(?:{_UNIT}\.? ?(?:no\.? ?)?{_UNIT_VALUE}(?:, ?| |/))$")
_S_UNIT_OF = re.compile(rf"(?<![\w])(?:{_UNIT}\.? ?(?:no\.? ?)?)$")  # "Flat 924, Shanti Kunj Apartments"
_ADDR_NOUNS = (
    r"address(?:es)?|adres|adresse|addr|anschrift|direcci[oó]n|indirizzo|endere[cç]o|domicilio|domicile|postadress?e?|"
    r"lieferadresse|rechnungsadresse|wohnadresse|adresa|osoite|adressi|címe?|diachi"
)
_ADDR_HEAD = re.compile(rf"(?i)(?:{_ADDR_NOUNS})")  # "Postadresse Narva mnt 29": the label is not the street
_ADDR_CUE = re.compile(
    r"(?i)\b(?:" + _ADDR_NOUNS + r"|"
    r"street|home|office|warehouse|store|shop|branch|flat|apartment|house|meter|premises|site|residence|location|located|"
    r"lives?|living|lived|moved?|moving|stay(?:ing|ed)?|based|deliver(?:y|ed|ing)?|ship(?:ping|ped)?|send|sent|post(?:ed)?|"
    r"mail(?:ed)?|collect(?:ed|ion)?|pick(?:ed)?[ -]?up|left|come|came|bring|drop(?:ped)?|return(?:ed)?|visit|invoice|"
    r"bill(?:ing|ed)?|registered|correspondence|lieferadresse|livraison|env[ií]o|consegna|entrega|wohne|wohnhaft)\b"
    r"[^.!?\n]{0,32}$"
)
_ADDR_PREP = re.compile(r"(?i)(?:^|[\s(\"'])(?:at|to|from|into|an|nach|bei|à|au|em|naar|op|till|på)\s+$")
_ADDR_JSON = re.compile(
    r"(?i)\"[a-z_]*(?:street|address|addr|line_?[12]|road|house|location|residence|domicile)[a-z_0-9]*\"\s*:\s*\"[^\"\n]{0,40}$"
)
_ADDR_AFTER = re.compile(
    r"(?i)[\s,]*(?:\d{1,3}\s+)?(?:is|was|will be)\s+(?:the|my|our|your|his|her|their)\s+(?:\w+\s+){0,2}"
    r"(?:address|home|office|flat|apartment|house)\b"
)
_QUANTITY_AFTER = re.compile(
    r"[ \t]?(?:%|EUR\b|USD\b|GBP\b|CHF\b|PLN\b|SEK\b|NOK\b|DKK\b|KB\b|MB\b|GB\b|TB\b|x\b|years?|yrs?|days?|weeks?|months?|hours?|hrs?|minutes?|mins?|seconds?|secs?|times?|people|persons?|"
    r"items?|pieces?|pcs|units?|euros?|eur|usd|dollars?|pounds?|gbp|km|miles?|kg|mb|gb|tb|pages?|nights?|rooms?|guests?|"
    r"adults?|children|kids|tickets?|seats?|bags?|boxes?|orders?|points?|stars?|am|pm|h)\b"
)
# Things written with a number that are not streets ("Chapter 12", "Version 2", "Room 5").
_WORD_RE = re.compile(rf"{_L}+")
_LAST_WORD = re.compile(rf"(\s+)({_L}+)( \d{{1,3}})?$")
_RUN_WORD = re.compile(rf"{_L}+(?:['’\-]{_L}+)*")
_PLACE_WORDS = frozenset(
    "city district ward county province central centre center north south east west sul norte".split()
)
_NUMBERED_THINGS = frozenset(
    """
chapter chap version ver release rel room rm gate terminal platform level floor step stage phase page pg section sec
paragraph para article art clause part item line table figure fig question issue episode ep season series volume vol
book model type class grade size group team round week day year month hour minute order invoice ticket case booking
flight train bus seat row track channel slot tier plan option error code windows iphone ipad android ios macos ubuntu
python java galaxy pixel note covid euro top number account policy claim reference ref serial pin batch unit suite
apartment apt flat block building bldg office house box tower level lot test exam lesson module unit task sprint
figure appendix annex exhibit schedule form note slide sheet tab column cell question answer score player match game
""".split()
)

# Lower-case words kept as they are inside a stand-in (their kind of word, not personal data);
# of an address's street-type words only one is kept (see _kept_type_word): "Via del Corso".
_KEEP_ADDRESS = (
    frozenset(lex.fold(w) for w in lex.UNIT_WORDS + lex.HOUSE_NUMBER_WORDS)
    | lex.PARTICLES
    | frozenset("bis ter quater no nr kv d col colonia bairro apto piso daire".split())
)
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
    if lex.fold(parts[words[-1]]) in _TYPES_AFTER and lex.fold(parts[words[0]]) not in (
        "am",
        "an",
        "auf",
        "im",
        "in",
        "zum",
        "zur",
        "unter",
    ):
        return (words[-1],)
    return ()


_SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ren",
    "dor",
    "vel",
    "tis",
    "bra",
    "quo",
    "zen",
    "fal",
    "mor",
    "rin",
    "sta",
    "wex",
    "yol",
    "pa",
    "ne",
    "ru",
    "vi",
    "sel",
    "tan",
    "gor",
    "hal",
    "ix",
    "ost",
    "um",
    "ber",
    "cal",
    "dri",
)


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

    def __init__(
        self,
        key: bytes | None = None,
        categories: tuple[str, ...] = CATEGORIES,
        cache_entries: int = 200_000,
        tokenizer=None,
    ):
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
                found += [
                    Span(m.start(), m.end(), "CREDIT_CARD")
                    for m in _CARD.finditer(text)
                    if 13 <= len(d := re.sub(r"\D", "", m.group())) <= 19 and luhn_ok(d)
                ]
            if "US_SSN" in cats:
                found += [
                    Span(m.start(), m.end(), "US_SSN")
                    for m in _SSN.finditer(text)
                    if _ssn_ok(m.group(1), m.group(3), m.group(4))
                ]
                found += [
                    Span(m.start(1), m.end(1), "US_SSN")
                    for m in _SSN_BARE.finditer(text)
                    if _ssn_ok(m.group(1)[:3], m.group(1)[3:5], m.group(1)[5:])
                ]
            if "NATIONAL_ID" in cats:
                found += self._national_ids(text)
            if "IP_ADDRESS" in cats:
                found += [Span(m.start(), m.end(), "IP_ADDRESS") for m in _IPV4.finditer(text)]
            if "PHONE" in cats:
                found += [
                    Span(m.start(), m.end(), "PHONE")
                    for m in _PHONE.finditer(text)
                    if 7 <= len(re.sub(r"\D", "", m.group())) <= 15
                ]
                found += self._national_phones(text)
            if "STREET_ADDRESS" in cats:
                found += self._addresses(text)
        if "IP_ADDRESS" in cats and text.count(":") >= 2:
            found += [Span(m.start(), m.end(), "IP_ADDRESS") for m in _IPV6.finditer(text) if _ipv6_ok(m.group())]
        if "PERSON" in cats:
            found += self._persons(text)
        return _resolve(found, text)

    def _national_ids(self, text: str) -> list[Span]:
        out = []
        if _ID_HINT.search(text) is None:
            return out
        for rx, ok, needs_cue in _NATIONAL_IDS:
            for m in rx.finditer(text):
                if needs_cue and _ID_CUE.search(text, max(0, m.start() - 40), m.start()) is None:
                    continue
                if _id_check(ok, m.group()):
                    out.append(Span(m.start(), m.end(), "NATIONAL_ID"))
        return out

    def _national_phones(self, text: str) -> list[Span]:
        out = []
        for m in _PHONE_GROUPS.finditer(text):
            value = m.group()
            digits = re.sub(r"\D", "", value)
            if not 7 <= len(digits) <= 15:
                continue
            groups = re.findall(r"\d+", value)
            shaped = (
                value[0] in "+("
                or "(" in value[:3]
                or (
                    value[0] == "0"
                    and value[1:2] != "0"
                    and len(digits) >= 9
                    and len(groups) >= 2
                    and not _SSN_SHAPE.fullmatch(value)
                )
            )
            if (
                len(groups) == 3
                and (re.fullmatch(r"(?:19|20)\d\d", groups[0]) or re.fullmatch(r"(?:19|20)\d\d", groups[2]))
                and len(groups[1]) <= 2
            ):
                continue  # a date: 2026-05-12, 12.05.2026
            lo = max(0, m.start() - 32)
            cue, not_cue = _PHONE_CUE.search(text, lo, m.start()), _PHONE_NOT.search(text, lo, m.start())
            cued = cue is not None and (not_cue is None or not_cue.start() < cue.start())
            if cued or shaped:
                out.append(Span(m.start(), m.end(), "PHONE"))
        return out

    def _ibans(self, text: str) -> list[Span]:
        out = []
        pos = 0
        while (m := _IBAN.search(text, pos)) is not None:
            value, pos = m.group(), m.end()
            while (
                len(value.replace(" ", "").replace("-", "")) >= 15
            ):  # trailing words may have been swallowed: trim back
                if iban_ok(value.replace("-", "")):
                    out.append(Span(m.start(), m.start() + len(value), "IBAN"))
                    pos = m.start() + len(
                        value
                    )  # "IBAN: LV59... IBAN NO66 ...": the next one may start in the swallowed part
                    break
                value = value[:-1].rstrip(" -")
            else:
                pos = m.start() + 1
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
        out += self._structural_addresses(text)
        return [self._trim_address(text, span) for span in out]

    def _trim_address(self, text: str, span: Span) -> Span:
        """Drop prose after an address: "..., 01001 Our team", "2000 Antwerpen The Premium"."""
        end = span.end
        while True:
            m = _LAST_WORD.search(text, span.start, end)
            if (
                not m
                or m.start() <= span.start
                or not m.group(2)[0].isupper()
                or not self._prose(lex.fold(m.group(2)))
                or (m.group(3) and lex.fold(m.group(2)) not in _NUMBERED_THINGS)
            ):
                break
            end = m.start()
        return span if end == span.end else Span(span.start, end, span.category)

    def _structural_addresses(self, text: str) -> list[Span]:
        """Street addresses found from their structure (see ``_NAME_NUM``): a street-like run of
        capitalised words and a house number, in either order, with a locality or a cue."""
        out: list[Span] = []
        prose = self._prose
        for number_first, rx in ((False, _NAME_NUM), (True, _NUM_NAME)):
            pos = 0
            while (m := rx.search(text, pos)) is not None:
                # a rejected candidate gives its number back: "14 people. Bitte an Flat 861, Shanti Kunj ..."
                pos = max(m.start() + 1, m.end("num") if number_first else m.start("num"))
                start, end = m.start(), m.end()
                run_s, run_e = m.span("run")
                words = [
                    (w.start(), w.end(), w.group(), lex.fold(w.group())) for w in _RUN_WORD.finditer(text, run_s, run_e)
                ]
                if not number_first and len(words) > 1 and words[-1][3] in ("no", "nr", "nro", "num"):
                    words.pop()  # "Jalan Pemuda No. 44": the house-number word is not the street's
                # prose splits the run: lower-case common words ("I'm at Ilica 242", "We upgraded to"),
                # capitalised function words inside it ("Antwerpen The Premium 12")
                cut = [
                    i
                    for i, w in enumerate(words)
                    if (w[2][0].islower() and prose(w[3]))
                    or (
                        i > 0
                        and w[3] in lex.FUNCTION_WORDS
                        and w[3] not in lex.PARTICLES
                        and w[3] not in _TYPES_BEFORE
                        and w[3] not in _TYPES_AFTER
                    )
                ]
                n_words = len(words)
                if cut:
                    words = words[: cut[0]] if number_first else words[cut[-1] + 1 :]
                if number_first:  # "45 Lý Tự Trọng Thanks": the run ends before prose words
                    while words and prose(words[-1][3]):
                        words.pop()
                    if (
                        not words
                        or words[0][3] in _NUMBERED_THINGS
                        or (prose(words[0][3]) and words[0][3] != "the")
                        or _QUANTITY_AFTER.match(text, m.end("num"))
                        or (m.group("low") and prose(lex.fold(m.group("low").rstrip("."))))
                    ):
                        continue  # "49, please. We ...", "3 Nights", "14 March"
                    if len(words) < n_words:
                        end = words[-1][1]
                        if text[end : end + 1] == "." and end - words[-1][0] <= 4:
                            end += 1  # "Rd."
                else:  # "Thanks Ilica 242": the run starts after prose words
                    while len(words) > 1 and (
                        prose(words[0][3]) or not words[0][2][0].isupper() or _ADDR_HEAD.fullmatch(words[0][2])
                    ):
                        words.pop(0)
                    if (
                        not words
                        or prose(words[0][3])
                        or words[0][3] in _NUMBERED_THINGS
                        or words[-1][3] in _NUMBERED_THINGS
                    ):
                        continue  # "Chapter 12", "Bogotá Section 4"
                    prefix = lex.fold(text[start:run_s].strip(" ."))
                    if words[0][0] > run_s or (start < run_s and prefix not in _TYPES_BEFORE):
                        start = words[0][0]  # "time. Postadresse ..." is not "ul. Piękna"
                    if m.group("low") and prose(lex.fold(m.group("low").rstrip("."))):
                        continue  # "Bitte an 1/111", "FAQ page 3"
                    if _QUANTITY_AFTER.match(text, m.end("num")):
                        continue  # "moved to Berlin 5 years ago"
                tail_end, strong, weak = self._locality(text, end)
                unit = (_S_UNIT_OF if number_first and start == m.start() else _S_UNIT_BEFORE).search(
                    text, max(0, start - 24), start
                )
                if unit:
                    start = unit.start()
                lo = max(0, start - 60)
                if not (
                    strong
                    or weak >= 2
                    or _ADDR_CUE.search(text, lo, start)
                    or _ADDR_JSON.search(text, lo, start)
                    or _ADDR_AFTER.match(text, tail_end)
                    or (_ADDR_PREP.search(text, lo, start) and len(re.sub(r"\D", "", m.group("num"))) <= 5)
                ):
                    continue
                out.append(Span(start, tail_end, "STREET_ADDRESS"))
                pos = max(pos, m.end())
        return out

    def _prose(self, folded: str) -> bool:
        """An ordinary English word (not a street-type word, particle or place word)."""
        return (
            (folded in self._common or folded in _NUMBERED_THINGS)
            and folded not in _TYPES_BEFORE
            and folded not in _TYPES_AFTER
            and folded not in lex.PARTICLES
            and folded not in _PLACE_WORDS
        )

    def _locality(self, text: str, pos: int) -> tuple[int, int, int]:
        """(end, strong, weak) of the locality after an address: postcodes, places, units."""
        strong = weak = 0
        end = pos
        for _ in range(6):
            t = _S_TAIL.match(text, end)
            if not t:
                break
            kind, sep = t.lastgroup, t.group("sep")
            if kind in ("place", "admin", "state", "bare") and not any(c in sep for c in ",\n-/"):
                break
            if (
                kind == "place"
                and "," not in sep
                and "\n" in sep
                and not re.match(r"\s*(?:$|\n|,)", text[t.end() : t.end() + 3])
            ):
                break  # a next line of chat, not the address's next line
            seg_end, last = t.end(), False
            if kind in ("place", "pc", "pp", "admin"):
                ws = list(_RUN_WORD.finditer(text, t.start(kind), seg_end))
                bad = [
                    i
                    for i, w in enumerate(ws)
                    if len(w.group()) > 1 and w.group()[0].isupper() and self._prose(lex.fold(w.group()))
                ]
                if bad:  # "1017 Budapest I stayed", "Trondheim Season 2": the place ends before prose
                    if kind in ("pp", "admin") or bad[0] == 0:
                        break
                    seg_end, last = ws[bad[0] - 1].end(), True
            if kind == "place":
                weak += 1
            elif kind == "bare":
                if 1900 <= int(t.group(kind)) <= 2099:
                    break
                strong += 1
            elif kind != "unit":
                strong += 1
            end = seg_end
            if last:
                break
        return end, strong, weak

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
                if (f in lex.TITLES or f in _MORE_TITLES) and (w[0].isupper()):
                    segs.append([])
                    titled.append(True)
                    continue
                if (
                    f in lex.FUNCTION_WORDS or f in lex.COMMON_WORDS or f in _CONTRACTIONS or f in _NUMBERED_THINGS
                ) and not (len(w) == 2 and w[1] == "."):
                    k = words.index((ws, we, w))
                    if (
                        not segs[-1]
                        and w[0].isupper()
                        and k + 1 < len(words)
                        and (
                            f in _names_all()
                            or f in _SHORT_FAMILY
                            or _LABEL.search(text, max(0, base + ws - 32), base + ws) is not None
                        )
                        and lex.fold(words[k + 1][2]) not in lex.FUNCTION_WORDS
                        and _CUE_BEFORE.search(text, max(0, base + ws - 48), base + ws) is not None
                    ):
                        segs[-1].append((base + ws, base + we, w))  # "Name: Do Duc", "my name is May Chen"
                        continue
                    if (
                        segs[-1]
                        and w[0].isupper()
                        and (ws, we, w) == words[-1]
                        and f in _names_all()
                        and f not in _NEVER_SURNAME
                    ):
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
                cue = (
                    title
                    or _CUE_BEFORE.search(text, max(0, s - 48), s) is not None
                    or _JSON_KEY.search(text, max(0, s - 40), s) is not None
                    or _CUE_AFTER.match(text, e) is not None
                    or _CUE_INTL.search(text, max(0, s - 40), s) is not None
                    or _TITLE_CUE.search(text, max(0, s - 12), s) is not None
                )
                known = [n for n in names if (n in first or n in last or n.replace("'", "") in last)]
                if cue:
                    ok = not all(n in common for n in names) or len(names) > 1 or title
                elif known:
                    plain = [n for n in names if n not in common]
                    ok = bool(plain) and (len(names) > 1 or names[0] in first) and any(n not in common for n in known)
                    if ok and len(names) == 1 and (re.match(r" \d", text[e : e + 2]) or text[e : e + 1] == ":"):
                        ok = False  # "Berlin 2 : Munich 1", "Handy: 0171 ...": a lone listed name before a number or a colon
                else:
                    ok = False
                if ok:
                    out.append(Span(s, e, "PERSON"))
        # surname first in capitals, then a comma: "VLACHOS, Giorgos" (forms, passenger lists)
        if ", " in text:
            for m in _SURNAME_FIRST.finditer(text):
                sur, given = m.group(1), m.group(2)
                parts = given.split(" ")
                while len(parts) > 1 and (lex.fold(parts[-1]) in common or lex.fold(parts[-1]) in _NUMBERED_THINGS):
                    parts.pop()  # "ARRIETA, Xoán The heater"
                given = " ".join(parts)
                if not sur.isupper() or len(sur) < 2 or lex.fold(sur) in common or lex.fold(given.split()[0]) in common:
                    continue
                s, e = m.start(), m.start(2) + len(given)
                if (
                    _CUE_BEFORE.search(text, max(0, s - 48), s)
                    or _CUE_INTL.search(text, max(0, s - 40), s)
                    or _JSON_KEY.search(text, max(0, s - 40), s)
                    or _CUE_AFTER.match(text, e)
                    or lex.fold(given.split()[0]) in first
                    or lex.fold(sur) in last
                ):
                    out.append(Span(s, e, "PERSON"))
        # lower-case names after a label ("Recipient: katarzyna tamm", "ask for kimura shota")
        low = text.lower()
        pos = 0 if any(k in low for k in _LABEL_LOWER_KEYS) else len(text)
        while (m := _LABEL_LOWER.search(text, pos)) is not None:
            span = self._lower_name(text, m.start(1), m.group(1), strong=True)
            if span is not None:
                out.append(span)
            pos = m.start(1)  # "Passenger name R. O'Rourke my colleague obiora nwankwo": cues may follow in the group
        # names typed in lower case after the strongest cues ("my name is aarav sharma")
        if " will " in text or " from " in text or "here" in text or "speaking" in text:
            for m in _LOWER_BEFORE.finditer(text):
                span = self._lower_name(text, m.start(1), m.group(1), strong=True)
                if span is not None:
                    out.append(span)
        if (
            "here" in text
            or "speaking" in text
            or "name" in text.lower()
            or " am " in text
            or "'m " in text
            or "'s " in text
            or " is " in text
        ):
            for rx in (_STRONG_LOWER, _HERE_LOWER):
                for m in rx.finditer(text):
                    span = self._lower_name(text, m.start(1), m.group(1))
                    if span is not None:
                        out.append(span)
        return out

    def _lower_name(self, text: str, start: int, group: str, strong: bool = False) -> Span | None:
        first, last, common = self._first, self._last, self._common
        words = group.split(" ")
        strong = (
            strong
            or re.search(r"(?i)(?:name(?: is|'s|:)|call me|called)\s+$", text[max(0, start - 16) : start]) is not None
        )
        take = []
        for k, w in enumerate(words):
            f = lex.fold(w.rstrip("."))
            if k == 0 and (f in lex.TITLES or f in _MORE_TITLES or (len(w) == 2 and w[1] == ".")) and len(words) > 1:
                take.append(w)  # "dr châu wongsakul", "d. konstantinidis"
                continue
            if w[0].isupper():
                break  # "juhani lindgren Kontoinhaber: ...": the name ends before the next capitalised word
            if f in lex.FUNCTION_WORDS or f in common or f in lex.COMMON_WORDS:
                # East Asian family names that are also English words ("my name is do minh", "ha eun")
                if not (
                    strong
                    and k == 0
                    and f in _SHORT_FAMILY
                    and len(words) > 1
                    and lex.fold(words[1]) not in common
                    and lex.fold(words[1]) not in lex.FUNCTION_WORDS
                ):
                    break
            take.append(w)
        if take and take[-1].endswith(".") and len(take[-1]) > 2:
            take[-1] = take[-1][:-1]  # "my name is sourav.": the full stop is not part of the name
        if (
            take
            and (lex.fold(take[0].rstrip(".")) in lex.TITLES or (len(take[0]) == 2 and take[0][1] == "."))
            and len(take) == 1
        ):
            return None
        if not take or any(w[0].isupper() for w in take):  # capitalised ones are the main pass's job
            return None
        here = re.match(r"[,]? (?:here|speaking|from)\b", text[start + len(" ".join(take)) :]) is not None
        strong = strong or (
            here and re.search(r"(?i)\b(?:this is|it's|it is)\s+$", text[max(0, start - 12) : start]) is not None
        )
        after = text[start + len(" ".join(take)) : start + len(" ".join(take)) + 1]
        if (
            len(take) >= 2
            and after in ("", ",", ".", "!", "\n")
            and re.search(r"(?i)\b(?:i'm|i am|this is|it's|it is)\s+$", text[max(0, start - 10) : start])
        ):
            strong = True  # "I'm giorgos georgiou, booking for two"
        known = any(lex.fold(w) in first or lex.fold(w) in last for w in take)
        here = re.match(r"[,]? (?:here|speaking)\b", text[start + len(" ".join(take)) :]) is not None
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
        for attempt in range(40 if category in ("IP_ADDRESS", "EMAIL", "IBAN", "NATIONAL_ID") else 8):
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
                out = out[:i] + "9" + out[i + 1 :]
            if category == "CREDIT_CARD" and luhn_ok(re.sub(r"\D", "", out)):  # never emit a valid card number
                i = max(i for i, c in enumerate(out) if c.isdigit())
                out = out[:i] + str((int(out[i]) + 1) % 10) + out[i + 1 :]
            return out
        if category == "NATIONAL_ID":  # same characters classes and case; never a valid number
            for _ in range(20):
                out = "".join(
                    str(rng.randrange(10))
                    if c.isdigit()
                    else (
                        rng.choice("ABCDEFGHJKLMNPRSTUVWXYZ") if c.isupper() else rng.choice("abcdefghjkmnprstuvwxyz")
                    )
                    if c.isalpha()
                    else c
                    for c in value
                )
                if not national_id_ok(out):
                    return out
            return out
        if category == "IBAN":
            body = "".join(
                str(rng.randrange(10))
                if c.isdigit()
                else (
                    (rng.choice("ABCDEFGHJKLMNPRSTUVWXYZ") if c.isupper() else rng.choice("abcdefghjkmnprstuvwxyz"))
                    if c.isalpha()
                    else c
                )
                for c in value[4:]
            )
            fake = f"{value[:2]}00{body}"
            if iban_ok(fake):  # never emit a valid IBAN
                i = max(i for i, c in enumerate(fake) if c.isdigit())
                fake = fake[:i] + str((int(fake[i]) + 1) % 10) + fake[i + 1 :]
            return fake
        if category == "IP_ADDRESS":
            if ":" in value:
                out = "".join(
                    rng.choice("0123456789") if c.isdigit() else (rng.choice("abcdef") if c.isalpha() else c)
                    for c in value
                )
                return out  # same character classes (digits, a-f), so the same token count
            octets = value.split(".")
            first = {1: "0", 2: "10"}.get(
                len(octets[0]), "24" + str(rng.randrange(10))
            )  # 0/8, 10/8, 240/4: never public
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
                out.append(
                    "".join(
                        str(rng.randrange(1, 10)) if j == 0 and len(part) > 1 else str(rng.randrange(10))
                        for j in range(len(part))
                    )
                )
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
            w = case(
                rng.choice(pieces["head"]) + "".join(rng.choice(pieces["tail"]) for _ in range(max(0, target - 1)))
            )
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
            head = sorted(h for h in head if self._count(h.capitalize(), True) == 1 and self._count(h, True) <= 2)[
                :3000
            ]
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
            parts.append(text[pos : s.start])
            lead = s.start > 0 and text[s.start - 1] == " "
            parts.append(self.replacement(s.category, text[s.start : s.end], lead))
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
                m2["content"] = [
                    (
                        {**p, "text": self.redact_text(p["text"])}
                        if isinstance(p, dict) and isinstance(p.get("text"), str)
                        else p
                    )
                    for p in content
                ]
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
