"""Fake personal data for sample logs and for redaction tests (planted PII with known values).

Every value is valid for its kind (cards pass Luhn, IBANs pass mod-97, SSNs have a legal area
number) so a detector cannot score by rejecting junk. Names come from Faker's per-locale lists;
``held_out_name`` makes names that are in no list, to measure what context rules alone catch.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from replay.pii_validators import luhn_ok

CATEGORIES = ("EMAIL", "PHONE", "CREDIT_CARD", "IBAN", "US_SSN", "IP_ADDRESS", "STREET_ADDRESS", "PERSON")

NAME_LOCALES = ("en_US", "en_GB", "en_IE", "en_IN", "de_DE", "fr_FR", "es_ES", "it_IT", "nl_NL", "sv_SE", "pt_BR")
STREET_SUFFIXES = (
    "Street",
    "St",
    "Avenue",
    "Ave",
    "Road",
    "Rd",
    "Boulevard",
    "Blvd",
    "Lane",
    "Ln",
    "Drive",
    "Dr",
    "Court",
    "Ct",
    "Way",
    "Place",
    "Pl",
    "Terrace",
    "Parkway",
    "Circle",
)
_STREET_NAMES = (
    "Maple",
    "Oak",
    "Cedar",
    "Pine",
    "Elm",
    "Washington",
    "Lake",
    "Hill",
    "Sunset",
    "Park",
    "Main",
    "Church",
    "Highland",
    "Mill",
    "River",
    "Spring",
    "Ridge",
    "Meadow",
    "Forest",
    "Harbor",
    "Baker",
    "Willow",
    "Chestnut",
    "Lincoln",
    "Franklin",
    "Jefferson",
    "Madison",
    "Walnut",
    "Birch",
    "Aspen",
)
_CITIES = (
    ("Springfield", "IL", "62704"),
    ("Austin", "TX", "78701"),
    ("Portland", "OR", "97205"),
    ("Denver", "CO", "80202"),
    ("Columbus", "OH", "43215"),
    ("Raleigh", "NC", "27601"),
)
_DOMAINS = ("gmail.com", "yahoo.com", "outlook.com", "proton.me", "acme-mail.net", "fastmail.fm", "icloud.com")
_IBAN_FORMATS = {"DE": 18, "GB": None, "FR": 23, "NL": None, "ES": 20, "IT": None}


@lru_cache(maxsize=1)
def name_lists() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(first names, last names) from Faker's person providers for NAME_LOCALES, ASCII letters only."""
    import importlib

    first: set[str] = set()
    last: set[str] = set()
    for loc in NAME_LOCALES:
        prov = importlib.import_module(f"faker.providers.person.{loc}").Provider
        for attr in ("first_names", "first_names_male", "first_names_female"):
            first.update(getattr(prov, attr, ()) or ())
        last.update(getattr(prov, "last_names", ()) or ())
    ok = lambda s: s.isascii() and s.replace("-", "").replace("'", "").isalpha() and len(s) > 1 and s[0].isupper()
    return tuple(sorted(n for n in first if ok(n))), tuple(sorted(n for n in last if ok(n)))


def _luhn_complete(prefix: str) -> str:
    for last in "0123456789":
        if luhn_ok(prefix + last):
            return prefix + last
    raise AssertionError("unreachable")


def _iban(rng: random.Random, country: str) -> str:
    bban_len = {"DE": 18, "GB": 18, "FR": 23, "NL": 14, "ES": 20, "IT": 23}[country]
    if country == "GB":
        bban = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(4)) + "".join(
            rng.choice("0123456789") for _ in range(14)
        )
    elif country == "NL":
        bban = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(4)) + "".join(
            rng.choice("0123456789") for _ in range(10)
        )
    else:
        bban = "".join(rng.choice("0123456789") for _ in range(bban_len))
    moved = bban + country + "00"
    check = 98 - int("".join(str(int(c, 36)) for c in moved)) % 97
    return f"{country}{check:02d}{bban}"


def fake_value(category: str, rng: random.Random) -> str:
    """One realistic, valid value of ``category``, formatted the way people type it."""
    if category == "EMAIL":
        first, last = rng.choice(name_lists()[0]).lower(), rng.choice(name_lists()[1]).lower().replace("'", "")
        local = rng.choice([f"{first}.{last}", f"{first[0]}{last}", f"{first}{rng.randint(1, 99)}", f"{last}.{first}"])
        return f"{local}@{rng.choice(_DOMAINS)}"
    if category == "PHONE":
        a, b, c = rng.randint(201, 989), rng.randint(200, 999), rng.randint(0, 9999)
        forms = [
            f"({a}) {b}-{c:04d}",
            f"{a}-{b}-{c:04d}",
            f"+1 {a} {b} {c:04d}",
            f"{a}.{b}.{c:04d}",
            f"+1-{a}-{b}-{c:04d}",
            f"+44 20 {rng.randint(7000, 8999)} {rng.randint(1000, 9999)}",
            f"+49 30 {rng.randint(100000, 999999)}",
            f"+33 1 {rng.randint(10, 99)} {rng.randint(10, 99)} {rng.randint(10, 99)} {rng.randint(10, 99)}",
        ]
        return rng.choice(forms)
    if category == "CREDIT_CARD":
        kind = rng.choice(["visa", "mc", "amex", "visa"])
        if kind == "amex":
            d = _luhn_complete(rng.choice(["34", "37"]) + "".join(rng.choice("0123456789") for _ in range(12)))
            return rng.choice([f"{d[:4]} {d[4:10]} {d[10:]}", d, f"{d[:4]}-{d[4:10]}-{d[10:]}"])
        head = "4" if kind == "visa" else str(rng.randint(51, 55))
        d = _luhn_complete(head + "".join(rng.choice("0123456789") for _ in range(15 - len(head))))
        groups = [d[i : i + 4] for i in range(0, 16, 4)]
        return rng.choice([" ".join(groups), "-".join(groups), d])
    if category == "IBAN":
        raw = _iban(rng, rng.choice(list(_IBAN_FORMATS)))
        return rng.choice([raw, " ".join(raw[i : i + 4] for i in range(0, len(raw), 4))])
    if category == "US_SSN":
        area = rng.choice([n for n in range(1, 900) if n != 666])
        a, b, c = f"{area:03d}", f"{rng.randint(1, 99):02d}", f"{rng.randint(1, 9999):04d}"
        return rng.choice([f"{a}-{b}-{c}", f"{a} {b} {c}", f"{a}-{b}-{c}"])
    if category == "IP_ADDRESS":
        if rng.random() < 0.8:
            return ".".join(
                str(x) for x in [rng.randint(11, 223), rng.randint(0, 255), rng.randint(0, 255), rng.randint(1, 254)]
            )
        groups = [f"{rng.randint(0, 0xFFFF):x}" for _ in range(8)]
        return rng.choice([":".join(groups), "2001:db8:" + ":".join(groups[:2]) + "::" + groups[7]])
    if category == "STREET_ADDRESS":
        num = rng.randint(1, 9999)
        street = rng.choice(_STREET_NAMES) + ("" if rng.random() < 0.7 else " " + rng.choice(_STREET_NAMES))
        return f"{num} {street} {rng.choice(STREET_SUFFIXES)}"
    if category == "PERSON":
        first, last = name_lists()
        return f"{rng.choice(first)} {rng.choice(last)}"
    raise ValueError(f"unknown PII category {category!r}; known: {CATEGORIES}")


def held_out_name(rng: random.Random) -> str:
    """A made-up 'First Last' that is in no name list (for measuring context-only detection)."""
    syll = ("ka", "zo", "ri", "vel", "tan", "mor", "quin", "dra", "lis", "bex", "ny", "sur", "oth", "ael", "pim")
    word = lambda n: "".join(rng.choice(syll) for _ in range(n)).capitalize()
    return f"{word(2)} {word(3)}"


# Sentences a customer might write; {v} is the personal value. PERSON templates carry the
# cues people actually use (introductions, sign-offs, titles) plus bare mentions.
TEMPLATES: dict[str, tuple[str, ...]] = {
    "EMAIL": (
        "You can reach me at {v} if the chat drops.",
        "My account email is {v}.",
        "please send the receipt to {v} thanks",
        "Email: {v}",
    ),
    "PHONE": (
        "Call me back on {v} after 5pm.",
        "My phone number is {v}.",
        "text {v} when the technician is on the way",
        "Phone: {v}",
    ),
    "CREDIT_CARD": (
        "I paid with the card {v} and got charged twice.",
        "card number {v}, exp 09/28",
        "Can you refund to {v}?",
    ),
    "IBAN": ("Please wire the refund to IBAN {v}.", "my bank account is {v}", "IBAN: {v} (account holder is me)"),
    "US_SSN": ("For verification my SSN is {v}.", "social security number {v}", "SSN {v}"),
    "IP_ADDRESS": (
        "The router shows the public address {v} right now.",
        "I keep getting blocked from {v}",
        "my IP is {v} if that helps",
    ),
    "STREET_ADDRESS": (
        "Ship it to {v}, Springfield, IL 62704.",
        "I moved to {v} last month.",
        "The package was left at {v} but I live next door.",
        "Address: {v}, Apt 4B",
    ),
    "PERSON": (
        "Hi, my name is {v} and I need help.",
        "This is {v} again about my order.",
        "Thanks,\n{v}",
        "I'm {v}, the account owner.",
        "My wife {v} placed the order.",
        "Please ask for {v} at the front desk.",
        "Regards, {v}",
        "The account is under {v}.",
        "Can {v} pick it up instead?",
        "{v} said you would call back.",
    ),
}


def pii_sentence(category: str, rng: random.Random, value: str | None = None) -> tuple[str, str]:
    """(sentence, value): a sentence carrying one fresh value of ``category``."""
    value = value if value is not None else fake_value(category, rng)
    return rng.choice(TEMPLATES[category]).format(v=value), value


@dataclass(frozen=True)
class Planted:
    line: int  # 1-based line number in the generated log
    category: str
    value: str

    def leaked_in(self, text: str) -> bool:
        """Whether any identifying part of this value survives in ``text``."""
        import re

        if self.value in text:
            return True
        if self.category == "PERSON":
            last = self.value.split()[-1]
            return re.search(rf"(?<![A-Za-z]){re.escape(last)}(?![A-Za-z])", text) is not None
        if self.category in ("CREDIT_CARD", "US_SSN", "IBAN", "PHONE"):
            compact = re.sub(r"[\s.\-()+]", "", self.value)
            return len(compact) >= 9 and compact in re.sub(r"[\s.\-()+]", "", text)
        return False
