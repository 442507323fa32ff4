"""Word lists behind the person and street-address recognisers of ``replay.redact``.

- Person names: every Latin-script first and last name of all of Faker's person providers
  (80+ locales, including en_NG/yo_NG/ig_NG/ha_NG, en_KE/sw, zu_ZA, tw_GH, en_IN/en_PK, vi_VN,
  id_ID, fil, romanised ja_JP/zh_CN/ko_KR where Faker has them), folded for lookup: about 21k
  first and 23k last names. Lists alone miss most of the world's names, so the recogniser leans
  on cues (``CUE_WORDS``) and on name shape; the lists only decide names that come with no cue.
- Street addresses: street-type words of many countries, as separate words before or after the
  name (``Calle``, ``rue``, ``Via``, ``Rua``, ``ul.``, ``Street``, ``Caddesi``) and as endings of
  compounded names (``-straße``, ``-straat``, ``-gatan``, ``-vej``, ``-katu``), written for this
  module from national address conventions plus Faker's per-locale street suffixes.
- Common English words (Faker's en_US lorem list plus function words) so that ordinary
  capitalised words are not taken for names.
"""

from __future__ import annotations

import importlib
import pkgutil
import unicodedata
from functools import lru_cache


def fold(word: str) -> str:
    """Lower case without diacritics (``Łukasz`` -> ``lukasz``): the key of every lookup."""
    w = word.lower().replace("ł", "l").replace("ø", "o").replace("ß", "ss").replace("đ", "d").replace("ı", "i")
    w = w.replace("’", "'")
    if w.isascii():
        return w
    return unicodedata.normalize("NFKD", w).encode("ascii", "ignore").decode()


def _latin(s: str) -> bool:
    return len(s) > 1 and all((c.isalpha() and (ord(c) < 0x250 or 0x1E00 <= ord(c) < 0x1F00)) or c in "-'’ " for c in s)


@lru_cache(maxsize=2)
def person_names(keep_common: bool = False) -> tuple[frozenset[str], frozenset[str]]:
    """(first names, last names), folded, from every Faker person provider with Latin script
    (without those that are common English words unless ``keep_common``)."""
    import faker.providers.person as person

    first: set[str] = set()
    last: set[str] = set()
    for mod in pkgutil.iter_modules(person.__path__):
        prov = importlib.import_module(f"faker.providers.person.{mod.name}").Provider
        for attr in dir(prov):
            if not attr.startswith(("first_name", "last_name", "first_romanized", "last_romanized", "middle_name")):
                continue
            values = getattr(prov, attr)
            if not isinstance(values, (tuple, list, dict, set, frozenset)):
                continue
            target = last if attr.startswith("last") else first
            for v in values:
                if isinstance(v, str) and _latin(v):
                    for part in v.split():
                        if len(part) > 1:
                            target.add(fold(part))
    stop = frozenset() if keep_common else COMMON_WORDS | FUNCTION_WORDS
    return frozenset(first - stop), frozenset(last - stop)


@lru_cache(maxsize=1)
def compound_street_endings() -> tuple[str, ...]:
    """Endings of compounded street names (``Hauptstraße``, ``Kerkstraat``, ``Storgatan``)."""
    import faker.providers.address as address

    found = set(STREET_ENDINGS)
    for mod in pkgutil.iter_modules(address.__path__):
        prov = importlib.import_module(f"faker.providers.address.{mod.name}").Provider
        for attr in ("street_suffixes", "street_suffix"):
            values = getattr(prov, attr, None)
            if isinstance(values, (tuple, list)):
                found.update(
                    v.strip()
                    for v in values
                    if isinstance(v, str)
                    and v.strip().islower()
                    and _latin(v.strip())
                    and len(v.strip()) >= 3
                    and " " not in v.strip()
                )
    return tuple(sorted(found, key=len, reverse=True))


@lru_cache(maxsize=1)
def common_words() -> frozenset[str]:
    from faker.providers.lorem.en_US import Provider

    return frozenset(w.lower() for w in Provider.word_list) | FUNCTION_WORDS | COMMON_WORDS


FUNCTION_WORDS = frozenset(
    """
a an the and or but nor so yet if then than that this these those there here where when what which who whom whose why how
i me my mine we us our you your yours he him his she her hers it its they them their theirs one
am is are was were be been being do does did done have has had having will would shall should can could may might must
not no yes ok okay please thanks thank hi hello hey dear sorry sure just also still very too really only even
in on at to for from by with about into onto over under after before since until of off up down out per via
all any some every each both either neither other another more most less few many much own same such
new old good great fine best better bad last next first second third
monday tuesday wednesday thursday friday saturday sunday january february march april may june july august
september october november december today tomorrow yesterday morning afternoon evening night week month year
""".split()
)

# Capitalised words of support traffic that are not names (products, roles, things).
COMMON_WORDS = frozenset(
    """
account address agent app apt apartment bank billing card cards charge chat code company contact courier customer
customers delivery department desk details driver email error help id iban invoice issue item login manager member
mobile number office order orders package parcel password payment phone plan premium pro refund reply request
return sales service services shipping sim ssn status store street subscription support team technician ticket tracking
transfer update user visa mastercard amex paypal amazon netflix samsung iphone android apple google microsoft whatsapp
otp pin ip url wifi router modem internet website web online offline app system assistant bot ai api json
note notes question answer message subject re fw fwd cc bcc attn regards cheers sincerely best wishes kind warm
name full holder owner recipient payee beneficiary passenger guest client patient sender signed signature
eur usd gbp inr ngn kes zar cad aud
""".split()
)

# Words that announce a person's name next to them (before it unless marked "after").
TITLES = frozenset(
    fold(t)
    for t in """
mr mrs ms mx miss mister madam madame sir dr doctor prof professor rev reverend fr father sister brother herr frau
mme mlle m sr sra srta don dona doña sig sig.ra dott chief alhaji alhaja shri smt sri kumari sheikh sheikha hon engr
pastor imam rabbi capt captain sgt officer lady lord dame
""".split()
)

RELATIONS = (
    "wife|husband|son|daughter|brother|sister|mother|mom|mum|mama|father|dad|papa|partner|friend|colleague|boss|"
    "manager|neighbou?r|cousin|uncle|aunt|auntie|grandmother|grandfather|grandma|grandpa|granny|fianc[eé]e?|"
    "girlfriend|boyfriend|landlord|landlady|tenant|flatmate|roommate|assistant|child|kid|nephew|niece|"
    "in-law|spouse|sibling|employer|employee|lawyer|accountant|caretaker|nanny|guardian"
)

# Role nouns: "<role> X" or "<role>: X" (label) name a person.
ROLE_NOUNS = (
    "name|names|holder|account holder|card ?holder|customer|client|recipient|payee|beneficiary|contact(?: person)?|"
    "sender|addressee|passenger|owner|patient|guest|member|tenant|applicant|signatory|signed|signature|"
    "attn|att|attention|driver|agent|representative|rep|advisor|adviser|technician|courier|"
    "consultant|officer|operator|employee|insured|policyholder|subscriber|user|authori[sz]ed user|"
    "account name|full name|first name|last name|surname|given name|family name|legal name|name on (?:the )?(?:account|card)|"
    "customer name|client name|contact name|recipient name|cardholder name|ordered by|placed by|booked by|paid by|"
    "requested by|submitted by|prepared by|approved by|handled by|registered to|registered under|in the name of|"
    "under the name(?: of)?|made out to|payable to|on behalf of|care of|c/o|spoke (?:to|with)|talked (?:to|with)|"
    "speak (?:to|with)|speaking (?:to|with)|chatted with|ask for|asked for|call(?:ed)? me|called|named|"
    "addressed to|deliver(?:ed)? to|send (?:it )?to|sent (?:it )?to|ship(?:ped)? (?:it )?to|hand(?:ed)? (?:it )?to|"
    "collected by|picked up by|signed for by|transfer(?:red)? to|payment to|pay|paid|refund(?:ed)? to|wire(?:d)? to|"
    "beneficiary is|holder is|owner is|name is|name's|my name is|i am|i'm|im|this is|it's|it is|here is|meet|"
    "regards|kind regards|best regards|warm regards|warmest regards|many thanks|thanks|thank you|thx|cheers|"
    "sincerely|yours sincerely|yours truly|yours faithfully|yours|best|best wishes|all the best|take care|"
    "respectfully|love|signed|hi|hello|hey|dear|good morning|good afternoon|good evening|greetings|"
    "regards from|with thanks|ta|rgds|br"
)

# Person-name particles (lower case inside a name).
PARTICLES = frozenset(
    """
van von der den de del della dello degli dei di da das do dos du la le les los las lo bin ibn bint ben bat al el ul ad
as ash abu abd umm wa ter ten te zu zum zur y e af av auf mac mc st ste ó ní nic mhic ui ua ap
""".split()
)

# Street types written before the name (any case); "." optional after abbreviations.
STREET_TYPES_BEFORE = (
    # Spanish, Catalan, Galician
    "calle",
    "c/",
    "cl",
    "avenida",
    "avda",
    "av",
    "avd",
    "paseo",
    "pº",
    "pso",
    "plaza",
    "pza",
    "pl",
    "plaça",
    "carrer",
    "camino",
    "travesía",
    "travesia",
    "ronda",
    "glorieta",
    "carretera",
    "ctra",
    "rambla",
    "passeig",
    "avinguda",
    "rúa",
    "callejón",
    "pasaje",
    "calzada",
    "cerrada",
    "privada",
    "prolongación",
    "bulevar",
    "boulevard",
    "urbanización",
    "urb",
    "vía",
    # French
    "rue",
    "avenue",
    "ave",
    "boulevard",
    "bd",
    "bld",
    "blvd",
    "place",
    "impasse",
    "imp",
    "chemin",
    "ch",
    "allée",
    "allee",
    "quai",
    "cours",
    "route",
    "rte",
    "square",
    "sentier",
    "passage",
    "faubourg",
    "fbg",
    "rond-point",
    "esplanade",
    "voie",
    "ruelle",
    "montée",
    "parvis",
    "promenade",
    "villa",
    "cité",
    "hameau",
    "lieu-dit",
    "résidence",
    "residence",
    # Italian
    "via",
    "viale",
    "v.le",
    "piazza",
    "p.za",
    "piazzale",
    "corso",
    "c.so",
    "largo",
    "vicolo",
    "strada",
    "lungomare",
    "lungotevere",
    "contrada",
    "borgo",
    "salita",
    "traversa",
    "rotonda",
    "località",
    "loc",
    # Portuguese
    "rua",
    "r",
    "avenida",
    "travessa",
    "tv",
    "praça",
    "pç",
    "alameda",
    "al",
    "estrada",
    "est",
    "ladeira",
    "largo",
    "beco",
    "rodovia",
    "quadra",
    "setor",
    "praia",
    # Central/Eastern Europe, Balkans, Baltics, Greece, Turkey (prefix forms)
    "ul",
    "ulica",
    "ulitsa",
    "al",
    "aleja",
    "aleje",
    "pl",
    "plac",
    "os",
    "osiedle",
    "prospekt",
    "pr",
    "pr-t",
    "pereulok",
    "per",
    "bulvar",
    "bulevardul",
    "bd-ul",
    "calea",
    "strada",
    "str",
    "șoseaua",
    "soseaua",
    "splaiul",
    "intrarea",
    "aleea",
    "ulitsa",
    "vulytsia",
    "vul",
    "prosp",
    "naberezhnaya",
    "nab",
    "shosse",
    "ploshchad",
    "pl",
    "trg",
    "náměstí",
    "nám",
    "nábřeží",
    "třída",
    "ulice",
    "utca",
    "út",
    "tér",
    "iela",
    "gatvė",
    "gatve",
    "tänav",
    "odos",
    "odós",
    "leoforos",
    "rruga",
    "bulevardi",
    "sokak",
    "cadde",
    # South/South-East Asia, Africa, Middle East
    "jalan",
    "jl",
    "jln",
    "lorong",
    "lrg",
    "soi",
    "thanon",
    "đường",
    "duong",
    "phố",
    "pho",
    "ngõ",
    "ngo",
    "hẻm",
    "hem",
    "barangay",
    "brgy",
    "shari",
    "sharia",
    "shareh",
    "tariq",
    "zanqa",
    "rehov",
    "derech",
    "sderot",
    "kuche",
    "khiaban",
)
# Street types written after the name (English and others), as separate words.
STREET_TYPES_AFTER = (
    "street",
    "st",
    "road",
    "rd",
    "avenue",
    "ave",
    "av",
    "boulevard",
    "blvd",
    "lane",
    "ln",
    "drive",
    "dr",
    "court",
    "ct",
    "way",
    "place",
    "pl",
    "terrace",
    "tce",
    "parkway",
    "pkwy",
    "circle",
    "cir",
    "highway",
    "hwy",
    "square",
    "sq",
    "trail",
    "trl",
    "crescent",
    "cres",
    "close",
    "cl",
    "mews",
    "rise",
    "gardens",
    "gdns",
    "row",
    "quay",
    "grove",
    "gr",
    "hill",
    "walk",
    "parade",
    "pde",
    "esplanade",
    "alley",
    "heights",
    "hts",
    "view",
    "green",
    "wharf",
    "broadway",
    "expressway",
    "freeway",
    "loop",
    "path",
    "pike",
    "plaza",
    "point",
    "ridge",
    "run",
    "vale",
    "wynd",
    "gate",
    "mall",
    "marg",
    "nagar",
    "salai",
    "chowk",
    "estate",
    "layout",
    "cross",
    "main",
    "bagh",
    "colony",
    "sector",
    "enclave",
    "pathway",
    "promenade",
    "approach",
    "bypass",
    "causeway",
    "circuit",
    "concourse",
    "corner",
    "cove",
    "crest",
    "dale",
    "dell",
    "end",
    "fairway",
    "glade",
    "glen",
    "grange",
    "haven",
    "hollow",
    "landing",
    "lea",
    "manor",
    "meadow",
    "meadows",
    "mount",
    "oval",
    "passage",
    "reach",
    "retreat",
    "ride",
    "ring",
    "round",
    "spur",
    "strand",
    "track",
    "turn",
    "villas",
    "vista",
    "extension",
    "ext",
    "junction",
    "link",
    "lane",
    "gully",
    "brae",
    "chase",
    "copse",
    "field",
    "fields",
    "park",
    # German/Nordic/Dutch/Turkish/Indonesian as separate words
    "straße",
    "strasse",
    "str",
    "allee",
    "platz",
    "weg",
    "gasse",
    "damm",
    "ufer",
    "chaussee",
    "steig",
    "markt",
    "gate",
    "gata",
    "gaten",
    "veien",
    "vegen",
    "vei",
    "gade",
    "vej",
    "allé",
    "torv",
    "katu",
    "tie",
    "caddesi",
    "cad",
    "cd",
    "sokak",
    "sokağı",
    "sok",
    "sk",
    "bulvarı",
    "blv",
    "mahallesi",
    "mah",
    "raya",
    "street",
    "utca",
    "út",
    "tér",
    "iela",
    "prospekt",
    "prospekti",
    "pr",
    "shosse",
    "ulitsa",
    "rasta",
    "peth",
    "wadi",
)
# Endings of compounded street names (German, Dutch, Scandinavian, Finnish, Estonian, Hungarian).
STREET_ENDINGS = (
    "straße",
    "strasse",
    "str.",
    "weg",
    "gasse",
    "allee",
    "platz",
    "ring",
    "damm",
    "ufer",
    "chaussee",
    "steig",
    "pfad",
    "markt",
    "graben",
    "berg",
    "hof",
    "garten",
    "zeile",
    "kai",
    "wall",
    "brücke",
    "tor",
    "feld",
    "grund",
    "stieg",
    "twiete",
    "straat",
    "gracht",
    "laan",
    "plein",
    "kade",
    "dijk",
    "singel",
    "dreef",
    "pad",
    "steeg",
    "hof",
    "markt",
    "wal",
    "burgwal",
    "gatan",
    "vägen",
    "torget",
    "gränd",
    "backen",
    "stigen",
    "allén",
    "plan",
    "gång",
    "leden",
    "kajen",
    "stråket",
    "gade",
    "vej",
    "torv",
    "allé",
    "stræde",
    "plads",
    "gata",
    "gate",
    "veien",
    "vegen",
    "veg",
    "bakken",
    "stien",
    "plassen",
    "katu",
    "tie",
    "kuja",
    "polku",
    "tori",
    "väylä",
    "ranta",
    "kaari",
    "rinne",
    "puistikko",
    "tee",
    "maantee",
    "põik",
    "utca",
    "körút",
    "útja",
    "gatve",
    "iela",
    "ova",
    "ová",
    "ská",
    "ska",
    "ego",
    "owa",
    "cesta",
    "ulice",
)
# German preposition streets: "Am Markt 4", "An der Alster 3", "Unter den Linden 77".
STREET_PREPOSITIONS = (
    "am",
    "an der",
    "an den",
    "an dem",
    "auf dem",
    "auf der",
    "auf den",
    "im",
    "in der",
    "in den",
    "in dem",
    "zum",
    "zur",
    "unter den",
    "unter der",
    "hinter dem",
    "hinter der",
    "vor dem",
    "vor der",
    "bei der",
    "beim",
    "über dem",
    "op de",
    "op het",
    "aan de",
    "aan het",
    "in de",
    "in het",
    "na",
    "u",
    "pod",
    "nad",
    "v",
    "k",
    "za",
    "przy",
    "pri",
    "na příkopě",
)
# Words before a house number in some formats ("No. 12", "No: 12", "d. 12", "Nr. 4").
HOUSE_NUMBER_WORDS = (
    "no",
    "nr",
    "num",
    "nº",
    "n°",
    "n",
    "d",
    "dom",
    "číslo",
    "č",
    "house no",
    "house number",
    "plot",
    "plot no",
    "bldg",
    "building",
    "block",
    "blk",
    "door no",
    "h.no",
    "h no",
    "flat no",
)
UNIT_WORDS = (
    "flat",
    "apt",
    "apartment",
    "unit",
    "suite",
    "ste",
    "room",
    "rm",
    "floor",
    "fl",
    "level",
    "lvl",
    "plot",
    "house no",
    "house",
    "building",
    "bldg",
    "block",
    "blk",
    "door",
    "piso",
    "puerta",
    "escalera",
    "esc",
    "apto",
    "andar",
    "sala",
    "bloco",
    "lote",
    "interior",
    "int",
    "depto",
    "dpto",
    "daire",
    "kat",
    "kv",
    "m",
    "lok",
    "etg",
    "étage",
    "bât",
    "bat",
    "porte",
    "scala",
    "interno",
    "int",
    "stg",
    "whg",
    "wohnung",
    "top",
    "stiege",
    "leil",
    "c/o",
    "po box",
    "p.o. box",
    "postfach",
    "bus",
    "boîte",
)
