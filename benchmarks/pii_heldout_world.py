"""A second held-out PII corpus: the world's street-address forms, and the other kinds in the
forms people really type them, in chat request logs.

Written apart from ``replay.redact`` (and before its structural address detector was tuned):
this module imports nothing from ``replay``, shares no word list, template or phrasing with the
redactor, with ``replay.pii_fixtures`` or with the first held-out corpus
(``benchmarks/pii_heldout_corpus.py``), and uses no Faker. Every street, district, city and name
below was written by hand for this file.

Address forms, one generator per country (45 countries), follow the per-country formats of
published address-format references: the UPU's "Postal addressing systems in member countries"
sheets, the per-country section of Wikipedia's "Address" article ("Format by country and area")
and the country pages of Frank's Compulsive Guide to Postal Addresses. Among them: number
before or after the street, street-type words before, after or glued to the name, streets with
no type word at all (Damrak, Meir, Ilica, Zeil, Florida, Merced), unit/stair/door notations
(``12/3/14``, ``3. th.``, ``B 17``, ``#08-1234``, ``12/F``, ``bte 3``, ``lgh 1102``), Korean road
names (``Teheran-ro``, ``Sejong-daero 23-gil``), Japanese chōme (``1 Chome-9-1 Marunouchi``),
Colombian grid numbers (``Carrera 7 # 71-21``), Brasília superquadras, Taiwanese sections and
lanes, Vietnamese streets named after people with no type word, and postcode/city tails of each
country (``1620 København V``, ``LV-1050``, ``LT-01103``, ``C1043ABN``, ``160-0023``, ``D02 X285``).

Other kinds: names of many traditions with titles, surname-first forms and lower-case chat;
e-mails; national phone formats of 20 countries with and without the country code; cards;
IBANs printed, electronic and lower-case; US SSNs; and national identity numbers of 14 countries
with valid check digits (``NATIONAL_ID``); IPv4/IPv6 with ports, CIDR and mapped forms.

Every planted value is recorded with the identifiers whose survival in its redacted request
counts as a leak (the whole value; a person's name words; an address's street line and street
name; the digits of a number), and with its country where it has one. ``FILLER`` holds ordinary
sentences with numbers in them ("Chapter 12", "Gate 23, Terminal 2"); the eval checks that they
come through redaction unchanged (precision).

    .venv/bin/python benchmarks/pii_heldout_world.py --lines 2000 --seed 5 --out /tmp/world
"""

from __future__ import annotations

import argparse
import json
import random
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path

KINDS = ("EMAIL", "PHONE", "CREDIT_CARD", "IBAN", "US_SSN", "NATIONAL_ID", "IP_ADDRESS", "STREET_ADDRESS", "PERSON")


def _pick(r: random.Random, s: str) -> str:
    return r.choice(s.split("|"))


# ---- street addresses, by country -------------------------------------------------------------
# Each returns (address as written, street line, street name) for the leak identifiers.


def _gb(r):
    name = _pick(r, "Fenwick|Cavendish|Harcourt|Wellesley|Ormonde|Tennyson|Beaumont|Lansdowne|Pevensey|Whitstable")
    kind = _pick(r, "Crescent|Lane|Road|Drive|Close|Gardens|Place|Avenue|Street|Mews")
    num = r.randint(1, 240)
    town, pc = r.choice(
        [
            ("Leeds", "LS6 2QT"),
            ("Bristol", "BS8 4RD"),
            ("Norwich", "NR2 3HL"),
            ("Cardiff", "CF10 1EP"),
            ("Edinburgh", "EH3 9JN"),
            ("York", "YO1 7HH"),
            ("Brighton", "BN1 6AF"),
        ]
    )
    line = f"{num} {name} {kind}"
    form = r.random()
    if form < 0.3:
        v = f"Flat {r.randint(1, 12)}, {line}, {town} {pc}"
    elif form < 0.45:
        v = f"{_pick(r, 'Rosebank Cottage|The Old Forge|Hillcrest House')}, {line}, {town.upper()} {pc}"
    elif form < 0.6:
        v = f"{line}\n{town}\n{pc}"
    else:
        v = f"{line}, {town} {pc}"
    return v, line, name


def _ie(r):
    name = _pick(r, "Ashgrove|Glenageary|Kilbarrack|Rathgar|Castleknock|Shanakiel")
    kind = _pick(r, "Park|Road|Avenue|Grove|Lawn|Drive")
    line = f"{r.randint(1, 160)} {name} {kind}"
    tail = r.choice([", Ballincollig, Co. Cork, P31 K2W8", ", Dublin 6, D06 F2C9", ", Galway H91 E2T4", ", Dublin 15"])
    return line + tail, line, name


def _us(r):
    num = r.randint(100, 9899)
    if r.random() < 0.3:
        k = r.randint(2, 118)
        nth = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
        street = f"{_pick(r, 'W|E|N|S')} {k}{nth} {_pick(r, 'St|Street|Ave')}"
        core = None
    else:
        core = _pick(r, "Lakewood|Sycamore|Peachtree|Magnolia|Juniper|Bluebonnet|Cottonwood|Hemlock|Larkspur|Saguaro")
        street = f"{_pick(r, '|N |S |E |W ')}{core} {_pick(r, 'Ave|Rd|Blvd|St|Dr|Ln|Way|Ct|Pkwy|Terrace')}"
    line = f"{num} {street}"
    unit = r.choice(
        [
            "",
            "",
            f" Apt {r.randint(1, 40)}{_pick(r, 'A|B|C')}",
            f" Suite {r.randint(100, 990)}",
            f" #{r.randint(2, 60)}",
        ]
    )
    city = r.choice(
        [
            "Chicago, IL 60640",
            "Austin, TX 78704",
            "Portland, OR 97214",
            "Tucson, AZ 85719",
            "Savannah, GA 31401",
            "Burlington, VT 05401",
            "Madison, WI 53703",
            "Boise, ID 83702",
        ]
    )
    v = f"{line}{unit}, {city}" if r.random() < 0.8 else f"{line}{unit}\n{city}"
    return v, line, core


def _ca(r):
    if r.random() < 0.45:
        name = _pick(r, "Saint-Denis|Sherbrooke|Laurier|Saint-Laurent|des Érables|Papineau")
        num = r.randint(10, 8900)
        kind = _pick(r, "rue|boulevard|avenue")
        line = f"{num}, {kind} {name}"
        return f"{line}, Montréal (Québec) {_pick(r, 'H2J 2L3|H3A 1B9|H2T 1S6')}", line, name.replace("des ", "")
    name = _pick(r, "Rideau|Bathurst|Dufferin|Okanagan|Wellington|Bloor")
    unit = r.choice(["", f"{r.randint(101, 2409)}-"])
    line = f"{unit}{r.randint(10, 4000)} {name} {_pick(r, 'Terrace|Street|Avenue|Drive|Crescent')}"
    return (
        f"{line}, {_pick(r, 'Ottawa ON K1M 2A3|Toronto ON M5R 2E3|Vancouver BC V6E 1G4|Halifax NS B3H 1Y6')}",
        line,
        name,
    )


def _au(r):
    name = _pick(r, "Wattle|Banksia|Jacaranda|Coolabah|Waratah|Ironbark|Bottlebrush")
    kind = _pick(r, "Street|St|Parade|Pde|Road|Avenue|Close|Crescent")
    num = r.randint(1, 300)
    unit = r.randint(1, 24)
    line = r.choice([f"{num} {name} {kind}", f"{unit}/{num} {name} {kind}", f"Unit {unit}, {num} {name} {kind}"])
    tail = r.choice(
        [" Ultimo NSW 2007", ", Fitzroy VIC 3065", ", Mermaid Beach QLD 4218", " Subiaco WA 6008", ", Glenelg SA 5045"]
    )
    return line + tail, line.split(", ")[-1], name


def _nz(r):
    name = _pick(r, "Kowhai|Pohutukawa|Tui|Matai|Rimu|Karaka")
    line = f"{r.choice(['', f'{r.randint(1, 9)}/'])}{r.randint(1, 220)} {name} {_pick(r, 'Road|Street|Terrace|Place')}"
    return (
        f"{line}, {_pick(r, 'Mairangi Bay, Auckland 0630|Thorndon, Wellington 6011|Riccarton, Christchurch 8041')}",
        line,
        name,
    )


def _de(r):
    x = r.random()
    if x < 0.5:
        name = _pick(r, "Kastanien|Holunder|Lerchen|Fichten|Brunnen|Ulmen|Tannen|Kirschen|Wiesen|Hirsch") + _pick(
            r, "allee|weg|straße|str.|gasse|steig|pfad|ring"
        )
    elif x < 0.8:
        name = _pick(
            r,
            "Zeil|Lange Reihe|Hohe Bleichen|Kurfürstendamm|Jungfernstieg|Neuer Wall|Domkloster|Rathausmarkt|Sendlinger Tor",
        )
    else:
        name = f"{_pick(r, 'Dresdner|Leipziger|Bremer|Kasseler|Mainzer')} {_pick(r, 'Straße|Str.|Weg|Allee')}"
    line = f"{name} {r.randint(1, 220)}{r.choice(['', '', '', 'a', 'b', 'c'])}"
    tail = r.choice(
        [
            "",
            ", 10119 Berlin",
            ", 60313 Frankfurt am Main",
            ", 20099 Hamburg",
            ", 80331 München",
            ", D-50667 Köln",
            "\n04109 Leipzig",
            ", 3. OG links, 70173 Stuttgart",
        ]
    )
    return line + tail, line, name


def _at(r):
    name = _pick(r, "Mariahilfer Straße|Graben|Tuchlauben|Getreidegasse|Herrengasse|Freyung|Kohlmarkt|Linzer Gasse")
    line = f"{name} {r.randint(1, 120)}{r.choice(['', f'/{r.randint(1, 9)}/{r.randint(1, 30)}', f'/Top {r.randint(1, 20)}', f'/{r.randint(2, 18)}'])}"
    tail = r.choice([", 1060 Wien", ", 1010 Wien", ", 5020 Salzburg", ", A-8010 Graz", ""])
    return line + tail, line, name


def _ch(r):
    x = r.random()
    if x < 0.5:
        name = _pick(r, "Limmatquai|Spalenberg|Marktgasse|Kramgasse|Rennweg|Seefeldstrasse|Löwenstrasse")
        tail = _pick(r, "8001 Zürich|4051 Basel|3011 Bern|8008 Zürich|CH-6003 Luzern")
    elif x < 0.8:
        name = _pick(r, "Rue du Rhône|Rue de Carouge|Avenue de la Gare|Rue du Marché|Chemin des Crêts")
        tail = _pick(r, "1204 Genève|1003 Lausanne|1227 Carouge|2000 Neuchâtel")
    else:
        name = _pick(r, "Via Nassa|Via Pessina|Contrada di Verla")
        tail = "6900 Lugano"
    line = f"{name} {r.randint(1, 140)}"
    return f"{line}, {tail}", line, name


def _nl(r):
    x = r.random()
    if x < 0.45:
        name = _pick(
            r, "Damrak|Rokin|Spui|Kalverstraat|Oudegracht|Lijnbaan|Coolsingel|Nieuwendijk|Vismarkt|Lange Voorhout"
        )
    else:
        name = _pick(r, "Keizers|Brouwers|Bloem|Lauriers|Egelantiers|Witte de With") + _pick(
            r, "gracht|straat|kade|laan|steeg"
        )
    num = f"{r.randint(1, 480)}{r.choice(['', '', '-H', '-1', 'A', ' bis', '-III'])}"
    line = f"{name} {num}"
    tail = r.choice(
        [", 1015 CJ Amsterdam", ", 3012 BN Rotterdam", ", 2514 EE Den Haag", ", 3511 AD Utrecht", "", " te Leiden"]
    )
    return line + tail, line, name


def _be(r):
    x = r.random()
    if x < 0.35:
        name = _pick(r, "Rue Neuve|Chaussée de Waterloo|Rue des Bouchers|Avenue Louise|Rue Haute")
    elif x < 0.7:
        name = _pick(r, "Veldstraat|Meir|Grote Markt|Vrijdagmarkt|Kouter|Steenhouwersvest|Brusselsesteenweg")
    else:
        name = _pick(r, "Lange Nieuwstraat|Korte Gasthuisstraat|Hoogstraat")
    line = (
        f"{name} {r.randint(1, 300)}{r.choice(['', '', f' bus {r.randint(1, 12)}', f' bte {r.randint(1, 12)}', '/2'])}"
    )
    tail = r.choice([", 1000 Bruxelles", ", 2000 Antwerpen", ", 9000 Gent", ", B-8000 Brugge", ", 1050 Ixelles"])
    return line + tail, line, name


def _lu(r):
    name = _pick(r, "rue du Fossé|boulevard Royal|avenue de la Liberté|rue de l'Eau|Grand-Rue")
    line = f"{r.randint(1, 90)}, {name}"
    return (
        f"{line}, L-{r.randint(1011, 2999)} Luxembourg",
        line,
        name.split(" ", 1)[-1].replace("du ", "").replace("de la ", "").replace("de l'", ""),
    )


def _dk(r):
    name = _pick(
        r,
        "Vesterbrogade|Nørrebrogade|Jægergårdsgade|Store Kongensgade|Amagertorv|Istedgade|Frederiksberg Allé|"
        "Classensgade|Sankt Hans Torv|Gothersgade|Enghave Plads|Toldbodgade",
    )
    floor = r.choice(
        ["", "", f", {r.randint(1, 5)}. th.", f", {r.randint(1, 5)}. tv.", " st. tv.", f", {r.randint(1, 4)}. mf."]
    )
    line = f"{name} {r.randint(1, 180)}{r.choice(['', '', 'A', 'B'])}"
    tail = r.choice(
        [", 1620 København V", ", 2200 København N", ", 8000 Aarhus C", ", 1264 København K", ", 5000 Odense C", ""]
    )
    return line + floor + tail, line, name


def _se(r):
    name = _pick(
        r,
        "Drottninggatan|Sveavägen|Kungsportsavenyen|Stora Nygatan|Götgatan|Hornsgatan|Odengatan|Linnégatan|"
        "Västerlånggatan|Järntorget",
    )
    unit = r.choice(["", "", f" lgh {r.randint(1001, 1405)}", f", {r.randint(1, 6)} tr"])
    line = f"{name} {r.randint(1, 140)}{r.choice(['', '', ' A', ' B'])}"
    tail = r.choice([", 111 21 Stockholm", ", 411 36 Göteborg", ", 211 34 Malmö", ", SE-753 20 Uppsala", ""])
    return line + unit + tail, line, name


def _no(r):
    name = _pick(
        r,
        "Markveien|Bryggen|Olav Tryggvasons gate|Torggata|Thorvald Meyers gate|Grünerløkka|Kongens gate|Nedre Slottsgate|"
        "Strandkaien|Bygdøy allé",
    )
    line = f"{name} {r.randint(1, 120)}{r.choice(['', '', ' B', ' C', 'A'])}"
    tail = r.choice([", 0554 Oslo", ", 5003 Bergen", ", 7011 Trondheim", ", N-4006 Stavanger", ""])
    return line + tail, line, name


def _fi(r):
    name = _pick(
        r,
        "Aleksanterinkatu|Hämeenkatu|Yliopistonkatu|Fredrikinkatu|Pohjoisesplanadi|Runeberginkatu|Kauppiaankatu|"
        "Itäinen Pitkäkatu|Norra esplanaden",
    )
    line = f"{name} {r.randint(1, 90)}"
    stair = r.choice(["", f" {_pick(r, 'A|B|C')} {r.randint(1, 40)}", f" {_pick(r, 'A|B')}"])
    tail = r.choice([", 00100 Helsinki", ", 33100 Tampere", ", 20100 Turku", ", FI-90100 Oulu", ""])
    return line + stair + tail, line, name


def _is(r):
    name = _pick(r, "Laugavegur|Skólavörðustígur|Hafnarstræti|Bankastræti|Hverfisgata|Túngata|Vesturgata|Njálsgata")
    line = f"{name} {r.randint(1, 120)}"
    tail = r.choice([", 101 Reykjavík", ", 600 Akureyri", ", 220 Hafnarfjörður", ""])
    return line + tail, line, name


def _ee(r):
    name = _pick(r, "Narva mnt|Pikk|Rüütli|Pärnu mnt|Tartu mnt|Vene|Lai|Kalamaja")
    line = f"{name} {r.randint(1, 90)}{r.choice(['', '', f'-{r.randint(1, 40)}', 'a'])}"
    tail = r.choice([", 10117 Tallinn", ", 10123 Tallinn", ", 51007 Tartu", ", Tallinn 10130", ""])
    return line + tail, line, name.split(" ")[0]


def _lv(r):
    name = _pick(r, "Brīvības iela|Tērbatas iela|Elizabetes iela|Miera iela|Krišjāņa Barona iela|Ganību dambis")
    line = f"{name} {r.randint(1, 140)}{r.choice(['', f'-{r.randint(1, 60)}', ' k-2'])}"
    tail = r.choice([", Rīga, LV-1050", ", Rīga, LV-1011", ", Jelgava, LV-3001", ", LV-1010 Rīga"])
    return line + tail, line, name.rsplit(" ", 1)[0]


def _lt(r):
    name = _pick(r, "Gedimino pr.|Pilies g.|Laisvės al.|Vokiečių g.|Konstitucijos pr.|Didžioji g.")
    line = f"{name} {r.randint(1, 90)}{r.choice(['', f'-{r.randint(1, 60)}'])}"
    tail = r.choice([", LT-01103 Vilnius", ", LT-44309 Kaunas", ", 01123 Vilnius", ", Klaipėda LT-91247"])
    return line + tail, line, name.split(" ")[0]


def _pl(r):
    x = r.random()
    if x < 0.6:
        name = f"{_pick(r, 'ul.|ul.|al.|os.|pl.')} {_pick(r, 'Piękna|Jerozolimskie|Tysiąclecia|Mokotowska|Grunwaldzka|Świętokrzyska|Kościuszki')}"
    else:
        name = _pick(r, "Rynek Główny|Nowy Świat|Krakowskie Przedmieście|Stary Rynek")
    line = f"{name} {r.randint(1, 200)}{r.choice(['', f'/{r.randint(1, 90)}', f' m. {r.randint(1, 60)}', f' lok. {r.randint(1, 30)}'])}"
    tail = r.choice([", 00-549 Warszawa", ", 31-008 Kraków", ", 40-871 Katowice", ", 80-244 Gdańsk", ", 61-772 Poznań"])
    return line + tail, line, name.split(" ", 1)[1] if name[:3] in ("ul.", "al.", "os.", "pl.") else name


def _cz(r):
    name = _pick(r, "Václavské náměstí|Masarykova|Dlouhá|Vinohradská|Lidická|Husova|Údolní|Nerudova")
    line = f"{name} {r.randint(1, 2200)}/{r.randint(1, 60)}" if r.random() < 0.6 else f"{name} {r.randint(1, 90)}"
    tail = r.choice([", 110 00 Praha 1", ", 602 00 Brno", ", 120 00 Praha 2", ", 301 00 Plzeň", ""])
    return line + tail, line, name


def _sk(r):
    name = _pick(r, "Obchodná|Hlavná|Michalská|Štúrova|Panská|Mlynská")
    line = f"{name} {r.randint(1, 120)}"
    return line + r.choice([", 811 06 Bratislava", ", 040 01 Košice", ", 949 01 Nitra"]), line, name


def _hu(r):
    name = _pick(
        r, "Andrássy út|Váci utca|Király utca|Kossuth Lajos tér|Dob u.|Rákóczi út|Bartók Béla út|Széchenyi rakpart"
    )
    num = r.randint(1, 120)
    if r.random() < 0.35:
        line = f"{name} {num}."
        return (
            f"Budapest, {line} {r.choice(['II/4', '3. em. 12.', 'fsz. 2.'])}, {r.randint(1011, 1239)}",
            line,
            name.rsplit(" ", 1)[0],
        )
    line = f"{name} {num}{r.choice(['', '.', '-3'])}"
    return f"{line}, {r.randint(1011, 1239)} Budapest", line, name.rsplit(" ", 1)[0]


def _balkan(r):
    x = r.random()
    if x < 0.4:
        name, tail = (
            _pick(r, "Ilica|Vukovarska|Savska cesta|Tkalčićeva|Frankopanska"),
            _pick(r, "10000 Zagreb|21000 Split|51000 Rijeka"),
        )
    elif x < 0.7:
        name, tail = _pick(r, "Slovenska cesta|Trubarjeva|Čopova|Mestni trg"), _pick(r, "1000 Ljubljana|2000 Maribor")
    else:
        name, tail = (
            _pick(r, "Knez Mihailova|Bulevar kralja Aleksandra|Terazije|Cara Dušana"),
            _pick(r, "11000 Beograd|21000 Novi Sad"),
        )
    line = f"{name} {r.randint(1, 240)}{r.choice(['', '', 'a', '/3'])}"
    return f"{line}, {tail}", line, name


def _ro(r):
    name = _pick(r, "Str. Lipscani|Bd. Unirii|Calea Victoriei|Strada Memorandumului|Șoseaua Kiseleff|Aleea Teiului")
    line = f"{name} nr. {r.randint(1, 200)}" if r.random() < 0.7 else f"{name} {r.randint(1, 200)}"
    extra = r.choice(
        ["", f", bl. {_pick(r, 'A3|M12|C4')}, sc. {r.randint(1, 4)}, et. {r.randint(1, 10)}, ap. {r.randint(1, 90)}"]
    )
    tail = r.choice([", sector 3, București", ", 030833 București", ", 400095 Cluj-Napoca", ", Iași"])
    return line + extra + tail, line, name.split(" ", 1)[1]


def _gr(r):
    name = _pick(r, "Ermou|Tsimiski|Kifisias|Panepistimiou|Egnatia|Mitropoleos|Akadimias")
    lead = r.choice(["", "", "Odos ", "Leof. "])
    line = f"{lead}{name} {r.randint(1, 300)}"
    tail = r.choice([", 105 63 Athina", ", 546 23 Thessaloniki", ", 115 26 Athina", ", 262 21 Patra"])
    return line + tail, line, name


def _tr(r):
    x = r.random()
    if x < 0.5:
        name = f"{_pick(r, 'Moda|Bahariye|Tunalı Hilmi|Abdi İpekçi|Kazım Özalp')} {_pick(r, 'Cad.|Caddesi|Cd.')}"
        line = f"{name} No:{r.randint(1, 200)}"
        tail = f" D:{r.randint(1, 20)}, {_pick(r, '34710 Kadıköy/İstanbul|06680 Çankaya/Ankara|34367 Şişli/İstanbul')}"
        return line + tail, line, name.rsplit(" ", 1)[0]
    mah = _pick(r, "Kavaklıdere|Caferağa|Alsancak|Teşvikiye")
    sk = f"{r.randint(100, 1990)}. Sk."
    line = f"{mah} Mah. {sk} No: {r.randint(1, 90)}/{r.randint(1, 20)}"
    return f"{line}, {_pick(r, 'Çankaya/Ankara|Konak/İzmir|Kadıköy/İstanbul')}", line, mah


def _es(r):
    x = r.random()
    if x < 0.35:
        name = f"C/ {_pick(r, 'Toledo|Hortaleza|Fuencarral|Sagasta|Ibiza|Atocha')}"
        line = f"{name}, {r.randint(1, 180)}"
        extra = r.choice([f", {r.randint(1, 8)}º izq.", f", {r.randint(1, 8)}º {_pick(r, 'A|B|C|D')}", ", bajo"])
        return f"{line}{extra}, {_pick(r, '28005 Madrid|28004 Madrid|28010 Madrid')}", line, name[3:]
    if x < 0.6:
        name = _pick(r, "Avinguda Diagonal|Carrer de Mallorca|Passeig de Sant Joan|Carrer del Bruc|Via Augusta")
        line = f"{name} {r.randint(1, 600)}"
        return (
            f"{line}, {r.randint(1, 7)}r {r.randint(1, 4)}a, {_pick(r, '08017 Barcelona|08037 Barcelona|08008 Barcelona')}",
            line,
            name,
        )
    if x < 0.8:
        name = _pick(r, "Kale Nagusia|Gran Vía|Rúa do Franco|Calle Larios")
        line = f"{name} {r.randint(1, 90)}"
        return (
            f"{line}, {_pick(r, '20003 Donostia|28013 Madrid|15705 Santiago de Compostela|29005 Málaga')}",
            line,
            name,
        )
    name = _pick(r, "Calle Feria|Calle Sierpes|Avenida de la Constitución")
    line = f"{name}, {r.randint(1, 120)}"
    return f"{line}, {r.randint(1, 6)}º {_pick(r, 'dcha.|izda.')}, 41003 Sevilla", line, name.split(" ", 1)[1]


def _pt(r):
    name = _pick(
        r,
        "Rua Augusta|Av. da Boavista|Rua de Santa Catarina|Rua do Carmo|Avenida Almirante Reis|Travessa do Fala-Só|"
        "Rua Garrett|Largo do Chiado",
    )
    line = f"{name} {r.randint(1, 1400)}" if r.random() < 0.7 else f"{name}, n.º {r.randint(1, 400)}"
    extra = r.choice(["", f", {r.randint(1, 6)}.º Esq.", f", {r.randint(1, 6)}.º Dto.", ", r/c"])
    tail = r.choice([", 1100-053 Lisboa", ", 4100-130 Porto", ", 4000-442 Porto", ", 3000-143 Coimbra"])
    return line + extra + tail, line, name.split(" ", 1)[1].replace("da ", "").replace("de ", "").replace("do ", "")


def _br(r):
    if r.random() < 0.2:
        q = f"SQS {r.randint(102, 316)} Bloco {_pick(r, 'A|B|C|D|E')}"
        line = f"{q} apto {r.randint(101, 606)}"
        return f"{line}, Asa Sul, Brasília - DF, 70{r.randint(100, 399)}-0{r.randint(10, 99)}", line, None
    name = _pick(
        r,
        "Rua Haddock Lobo|Av. Atlântica|Rua Visconde de Pirajá|Rua Oscar Niemeyer|Av. Brigadeiro Faria Lima|"
        "Rua dos Pinheiros|Alameda Santos",
    )
    line = f"{name}, {r.randint(1, 3900)}"
    extra = r.choice(
        ["", f", apto {r.randint(11, 1804)}", f", sala {r.randint(1, 40)}", f", bloco B, ap. {r.randint(11, 99)}"]
    )
    tail = r.choice(
        [
            " - Cerqueira César, São Paulo - SP, 01414-001",
            " - Copacabana, Rio de Janeiro - RJ, 22021-001",
            " - Savassi, Belo Horizonte - MG",
            ", Ipanema, Rio de Janeiro/RJ, CEP 22410-003",
        ]
    )
    return line + extra + tail, line, name.split(" ", 1)[1]


def _ar(r):
    x = r.random()
    if x < 0.4:
        name = _pick(r, "Av. Corrientes|Av. Santa Fe|Av. Callao|Av. Rivadavia|Av. Pueyrredón")
        line = f"{name} {r.randint(100, 6000)}"
        return (
            f"{line}, piso {r.randint(1, 14)}, depto {_pick(r, 'A|B|C|D')}, C{r.randint(1000, 1440)}{_pick(r, 'ABN|AAZ|ACD')} CABA",
            line,
            name[4:],
        )
    if x < 0.7:
        name = _pick(r, "Florida|Lavalle|Tucumán|Uriburu|Gorriti|Bonpland")
        line = f"{name} {r.randint(100, 5800)}"
        floor = r.choice(["", f", {r.randint(1, 9)}º {_pick(r, 'A|B')}"])
        return f"{line}{floor}, C{r.randint(1000, 1440)} Buenos Aires", line, name
    line = f"Calle {r.randint(1, 72)} N° {r.randint(100, 1900)}"
    return f"{line}, B1900 La Plata", line, None


def _mx(r):
    name = _pick(r, "Calle Durango|Av. Vallarta|Calle Amsterdam|Av. Chapultepec|Calle Tonalá|Calle Orizaba|Av. Hidalgo")
    line = f"{name} {r.randint(1, 2400)}{r.choice(['', f' Int. {r.randint(1, 30)}', f' Depto. {r.randint(101, 902)}'])}"
    tail = r.choice(
        [
            ", Col. Roma Norte, 06700 Ciudad de México, CDMX",
            ", Col. Americana, 44160 Guadalajara, Jal.",
            ", Col. Hipódromo, Cuauhtémoc, 06100 CDMX",
            ", Centro, 68000 Oaxaca de Juárez, Oax.",
        ]
    )
    return line + tail, line, name.split(" ", 1)[1]


def _cl(r):
    if r.random() < 0.5:
        name = _pick(r, "Av. Providencia|Av. Apoquindo|Av. Vicuña Mackenna")
        line = f"{name} {r.randint(100, 9000)}"
        return (
            f"{line}, depto {r.randint(101, 2305)}, {_pick(r, 'Providencia|Las Condes|Ñuñoa')}, Santiago",
            line,
            name[4:],
        )
    name = _pick(r, "Merced|Huérfanos|Agustinas|Monjitas|Compañía de Jesús")
    line = f"{name} {r.randint(100, 1500)}"
    return f"{line}{r.choice(['', f', of. {r.randint(101, 1204)}'])}, Santiago Centro", line, name


def _co(r):
    kind = _pick(r, "Carrera|Calle|Cra.|Cl.|Avenida Calle|Transversal|Diagonal")
    line = f"{kind} {r.randint(1, 140)}{r.choice(['', 'A', 'B', 'Bis'])} # {r.randint(1, 120)}-{r.randint(1, 99):02d}"
    tail = r.choice(
        [", Bogotá", ", Chapinero, Bogotá D.C.", ", Medellín, Antioquia", ", apto 502, Bogotá", " Sur, Cali"]
    )
    return line + tail, line, None


def _pe(r):
    name = _pick(r, "Av. Larco|Jr. de la Unión|Av. José Pardo|Calle Schell|Jr. Ucayali|Av. Benavides")
    line = f"{name} {r.randint(100, 1800)}"
    tail = r.choice(
        [", Miraflores, Lima 15074", ", Cercado de Lima, Lima 15001", ", Barranco, Lima", ", Arequipa 04001"]
    )
    return line + tail, line, name.split(" ", 1)[1].replace("de la ", "")


def _it(r):
    name = _pick(
        r,
        "Corso Buenos Aires|Via Toledo|Piazza Navona|Via dei Calzaiuoli|Calle Larga XXII Marzo|Borgo Pinti|"
        "Viale Monza|Via Etnea|Fondamenta degli Ormesini|Salita San Nicola da Tolentino",
    )
    num = r.randint(1, 3200 if name.startswith(("Calle", "Fondamenta")) else 280)
    line = f"{name} {num}{r.choice(['', '', '/A', ' int. 5'])}" if r.random() < 0.75 else f"{name}, {num}"
    tail = r.choice(
        [
            ", 20124 Milano MI",
            ", 80132 Napoli NA",
            ", 00186 Roma RM",
            ", 30124 Venezia VE",
            ", 50121 Firenze FI",
            ", 95131 Catania (CT)",
        ]
    )
    return line + tail, line, name.split(" ", 1)[1]


def _fr(r):
    _ = r.random()  # a draw the recorded held-out world was made with: kept so the world stays the same
    kind = _pick(r, "rue|allée|quai|cours|impasse|place|avenue|boulevard|chemin")
    name = _pick(
        r, "des Tanneurs|des Cèdres|de Bourbon|Mirabeau|des Capucins|du Vieux-Port|Sainte-Catherine|des Carmes|Gambetta"
    )
    num = f"{r.randint(1, 140)}{r.choice(['', '', ' bis', ' ter'])}"
    line = f"{num}, {kind} {name}" if r.random() < 0.3 else f"{num} {kind} {name}"
    tail = r.choice(
        [
            ", 67000 Strasbourg",
            "\n33600 PESSAC",
            ", 75004 Paris",
            " 13100 Aix-en-Provence",
            ", 69002 Lyon Cedex 02",
            ", 31000 Toulouse",
        ]
    )
    lead = r.choice(
        ["", "", "Bât. B, ", f"Résidence les Pins, Apt {r.randint(1, 40)}, ", f"{r.randint(1, 6)}e étage, "]
    )
    return lead + line + tail, line, name.split(" ", 1)[-1] if name.startswith(("des ", "de ", "du ")) else name


def _jp(r):
    x = r.random()
    a, b, c = r.randint(1, 6), r.randint(1, 30), r.randint(1, 25)
    area, ward, city = r.choice(
        [
            ("Marunouchi", "Chiyoda City", "Tokyo 100-0005"),
            ("Nishi-Shinjuku", "Shinjuku-ku", "Tokyo 160-0023"),
            ("Shibakoen", "Minato-ku", "Tokyo 105-0011"),
            ("Kita-Aoyama", "Minato-ku", "Tokyo 107-0061"),
            ("Meieki", "Nakamura-ku", "Nagoya, Aichi 450-0002"),
            ("Sakae", "Naka Ward", "Nagoya 460-0008"),
            ("Umeda", "Kita-ku", "Osaka 530-0001"),
            ("Tenjin", "Chuo-ku", "Fukuoka 810-0001"),
            ("Hakataekimae", "Hakata-ku", "Fukuoka-shi 812-0011"),
        ]
    )
    if x < 0.35:
        line = f"{a} Chome-{b}-{c} {area}"
    elif x < 0.7:
        line = f"{a}-{b}-{c} {area}"
    else:
        line = f"{area} {a}-{b}-{c}"
    lead = r.choice(
        [
            "",
            "",
            f"Room {r.randint(201, 1510)}, ",
            f"{_pick(r, 'Sakura|Hikari|Midori')} Mansion {r.randint(101, 808)}, ",
        ]
    )
    return f"{lead}{line}, {ward}, {city}", line, area


def _kr(r):
    road = _pick(
        r, "Teheran-ro|Sejong-daero|Yeoksam-ro|Haeundaehaebyeon-ro|Dongil-ro|Olympic-ro|Dosan-daero|Toegye-ro|Wausan-ro"
    )
    if r.random() < 0.35:
        road = f"{road} {r.randint(1, 60)}-gil"
    num = r.randint(1, 520)
    x = r.random()
    line = f"{num}, {road}" if x < 0.4 else (f"{num} {road}" if x < 0.75 else f"{road} {num}")
    gu = _pick(r, "Gangnam-gu|Jongno-gu|Haeundae-gu|Mapo-gu|Songpa-gu|Jung-gu")
    city = _pick(r, "Seoul 06236|Seoul 03187|Busan 48094|Seoul|Seoul 04053")
    return f"{line}, {gu}, {city}", line, road.split(" ")[0]


def _cn(r):
    road = _pick(r, "Jianguo|Xinyuan|Huaihai|Zhongshan|Jiefang|Dongzhimen|Tianhe|Wenyi")
    kind = _pick(r, "Road|Rd.|Street|Avenue|Lu|Dajie")
    part = _pick(r, "| West| East| North| South| Middle")
    num = r.randint(1, 2200)
    line = f"No. {num} {road}{part} {kind}" if r.random() < 0.5 else f"{num} {road}{part} {kind}"
    lead = r.choice(
        [
            "",
            "",
            f"Room {r.randint(101, 2808)}, Building {r.randint(1, 12)}, ",
            f"Unit {r.randint(1, 30)}0{r.randint(1, 9)}, ",
        ]
    )
    tail = r.choice(
        [
            ", Chaoyang District, Beijing 100022",
            ", Xuhui District, Shanghai 200031",
            ", Tianhe District, Guangzhou",
            ", Xihu District, Hangzhou 310012",
        ]
    )
    return lead + line + tail, line, road


def _tw(r):
    road = _pick(r, "Zhongxiao|Minsheng|Heping|Roosevelt|Dunhua|Nanjing")
    part = _pick(r, " E.| W.| S.| N.|")
    sec = r.choice(["", f"Sec. {r.randint(1, 5)}, "])
    lane = r.choice(["", f"Ln. {r.randint(10, 300)}, ", f"Aly. {r.randint(1, 30)}, Ln. {r.randint(10, 300)}, "])
    num = r.randint(1, 400)
    line = f"No. {num}, {lane}{sec}{road}{part} Rd."
    tail = r.choice(
        [", Da'an Dist., Taipei City 106", ", Songshan Dist., Taipei City 105", ", Zhongzheng Dist., Taipei City 100"]
    )
    return f"{r.choice(['', f'{r.randint(2, 15)}F., '])}{line}{tail}", line, road


def _hk(r):
    road = _pick(r, "Hoi Fai|Des Voeux|Hennessy|Nathan|Lockhart|Pok Fu Lam")
    kind = _pick(r, "Road|Road Central|Street")
    line = f"{r.randint(1, 400)} {road} {kind}"
    lead = f"Flat {_pick(r, 'A|B|C|D')}, {r.randint(2, 48)}/F, {_pick(r, 'Tower 2, |Block 5, |')}"
    return (
        f"{lead}{line}, {_pick(r, 'Tai Kok Tsui, Kowloon|Central, Hong Kong|Wan Chai, Hong Kong|Mong Kok, Kowloon')}",
        line,
        road,
    )


def _sg(r):
    if r.random() < 0.5:
        town = _pick(r, "Ang Mo Kio|Tampines|Bedok North|Jurong West|Toa Payoh")
        line = f"Blk {r.randint(101, 899)} {town} {_pick(r, 'Avenue|Street|Ave')} {r.randint(1, 9)}"
        return (
            f"{line}, #{r.randint(2, 20):02d}-{r.randint(1, 1999):02d}, Singapore {r.randint(310000, 650999)}",
            line,
            town,
        )
    road = _pick(r, "Anson|Tanjong Pagar|Cecil|Keppel|Telok Ayer|Amoy")
    line = f"{r.randint(1, 200)} {road} {_pick(r, 'Road|Street')}"
    return f"{line}, #{r.randint(2, 40):02d}-{r.randint(1, 30):02d}, Singapore 0{r.randint(68000, 89999)}", line, road


def _my(r):
    if r.random() < 0.5:
        line = f"No. {r.randint(1, 80)}, Jalan SS {r.randint(1, 24)}/{r.randint(1, 40)}"
        return f"{line}, 47300 Petaling Jaya, Selangor", line, None
    name = _pick(r, "Tun Razak|Bukit Bintang|Ampang Hilir|Sultan Ismail|Tuanku Abdul Rahman")
    line = f"{_pick(r, 'Lot|No.|No')} {r.randint(1, 300)}, Jalan {name}"
    return f"{line}, {r.randint(50000, 50490)} Kuala Lumpur", line, name


def _id(r):
    name = _pick(r, "Kemang Raya|Malioboro|Dago|Cikini Raya|Pemuda|Gajah Mada")
    kind = _pick(r, "Jl.|Jalan|JL.")
    line = f"{kind} {name} No. {r.randint(1, 220)}" if r.random() < 0.8 else f"{kind} {name} {r.randint(1, 220)}"
    extra = r.choice(["", f", RT {r.randint(1, 12):02d}/RW {r.randint(1, 9):02d}"])
    tail = r.choice(
        [", Jakarta Selatan 12730", ", Yogyakarta 55213", ", Bandung 40135", ", Kota Semarang, Jawa Tengah"]
    )
    return line + extra + tail, line, name


def _ph(r):
    name = _pick(r, "Kalayaan|Ayala|Katipunan|Mabini|Aguinaldo|Roxas")
    kind = _pick(r, "St.|Avenue|Ave.|Street|Blvd.")
    line = f"{r.randint(1, 9800)} {name} {kind}"
    lead = r.choice(["", "", f"Unit {r.randint(101, 4010)}, {_pick(r, 'Tower One, |')}"])
    tail = r.choice(
        [
            ", Brgy. Bel-Air, Makati City 1209",
            ", Makati City 1226",
            ", Loyola Heights, Quezon City 1108",
            ", Cebu City 6000",
        ]
    )
    return lead + line + tail, line, name


def _th(r):
    if r.random() < 0.5:
        soi = f"Soi Sukhumvit {r.randint(2, 71)}"
        line = f"{r.randint(1, 199)}/{r.randint(1, 40)} {soi}"
        return f"{line}, Khlong Tan, Khlong Toei, Bangkok 10110", line, None
    name = _pick(r, "Chang Khlan|Nimmanhaemin|Charoen Krung|Ratchadamri|Thanon Silom")
    line = f"{r.randint(1, 2400)}{r.choice(['', f'/{r.randint(1, 30)}'])} {r.choice(['Moo 5, ', ''])}{name}{r.choice([' Road', ''])}"
    return f"{line}, {_pick(r, 'Chiang Mai 50100|Bang Rak, Bangkok 10500|Pathum Wan, Bangkok 10330')}", line, name


def _vn(r):
    name = _pick(r, "Lý Tự Trọng|Phố Huế|Tràng Tiền|Nguyễn Thị Minh Khai|Hai Bà Trưng|Lê Thánh Tôn|Pasteur|Đồng Khởi")
    num = r.randint(1, 320)
    x = r.random()
    if x < 0.3:
        line = f"Số {num} {name}"
    elif x < 0.5:
        line = f"{num}/{r.randint(1, 30)} {name}"
    elif x < 0.65:
        line = f"{num} Ngõ {r.randint(2, 120)} {name}"
    else:
        line = f"{num} {name}"
    tail = r.choice(
        [", Phường Bến Nghé, Quận 1, TP. Hồ Chí Minh", ", Hoàn Kiếm, Hà Nội", ", Quận 3, TP.HCM", ", Hai Châu, Đà Nẵng"]
    )
    return line + tail, line, name


def _in(r):
    x = r.random()
    if x < 0.3:
        line = f"Flat {r.randint(101, 1204)}, {_pick(r, 'Sai Krupa|Shanti Kunj|Gulmohar')} Apartments"
        tail = f", {r.randint(1, 20)}th Cross Road, {_pick(r, 'Indiranagar|Jayanagar|Koramangala')}, Bengaluru 5600{r.randint(10, 99)}"
        return line + tail, line, line.split(", ")[1].split(" Apartments")[0]
    if x < 0.55:
        line = f"{_pick(r, 'B|C|D|H')}-{r.randint(1, 480)}, Sector {r.randint(1, 80)}"
        return (
            f"{line}, {_pick(r, 'Noida, Uttar Pradesh 201301|Dwarka, New Delhi 110075|Gurugram, Haryana 122001')}",
            line,
            None,
        )
    if x < 0.8:
        name = _pick(r, "Gariahat|Lenin Sarani|Park Street|Linking|Hill")
        line = f"{r.randint(1, 90)}/{r.randint(1, 9)} {name} Road"
        return f"{line}, {_pick(r, 'Kolkata 700019|Bandra West, Mumbai 400050')}", line, name
    line = (
        f"Door No. {r.randint(1, 9)}-{r.randint(1, 9)}-{r.randint(1, 300)}, {_pick(r, 'Abids|Ameerpet|Banjara Hills')}"
    )
    return f"{line}, Hyderabad 5000{r.randint(10, 99)}", line, None


def _pk(r):
    line = f"House {r.randint(1, 90)}, Street {r.randint(1, 60)}, {_pick(r, 'F-7/2|G-9/3|E-11/1|I-8/4')}"
    return f"{line}, Islamabad {r.choice(['44000', ''])}".rstrip(), line, None


def _za(r):
    name = _pick(r, "Protea|Vilakazi|Kloof|Jan Hofmeyr|Oxford|Bree|Long")
    line = f"{r.randint(1, 400)} {name} {_pick(r, 'Road|Street|Avenue|Drive')}"
    lead = r.choice(["", "", f"Unit {r.randint(1, 40)}, "])
    tail = r.choice(
        [", Claremont, Cape Town, 7708", ", Orlando West, Soweto 1804", ", Gardens, Cape Town 8001", ", Umhlanga, 4320"]
    )
    return lead + line + tail, line, name


def _eg(r):
    name = _pick(r, "Talaat Harb|El Tahrir|Mohamed Mahmoud|Qasr El Nil|El Gomhoreya")
    line = r.choice(
        [f"{r.randint(1, 90)} {name} St", f"{r.randint(1, 90)} Sharia {name}", f"{r.randint(1, 90)} Shar'a {name}"]
    )
    return f"{line}, {_pick(r, 'Downtown, Cairo|Dokki, Giza|Zamalek, Cairo')}", line, name


def _il(r):
    name = _pick(r, "Dizengoff|Herzl|Allenby|Ben Yehuda|Rothschild|Jabotinsky")
    line = r.choice(
        [f"Rehov {name} {r.randint(1, 240)}", f"{name} St {r.randint(1, 240)}", f"{r.randint(1, 240)} {name} Street"]
    )
    return f"{line}, {_pick(r, 'Tel Aviv 6433222|Haifa 3303012|Jerusalem 9414201|Tel Aviv-Yafo')}", line, name


def _ru(r):
    if r.random() < 0.6:
        name = _pick(r, "Bolshaya Sadovaya|Tverskaya-Yamskaya|Malaya Bronnaya|Pokrovka|Sretenka")
        line = f"ul. {name}, d. {r.randint(1, 120)}"
        return f"{line}, kv. {r.randint(1, 300)}, {_pick(r, 'Moskva, 123001|Moscow 101000')}", line, name
    name = _pick(r, "Nevsky|Liteyny|Kamennoostrovsky|Moskovsky")
    line = f"{name} pr., {r.randint(1, 200)}"
    return f"{line}, {_pick(r, 'Sankt-Peterburg, 191186|St Petersburg 197022')}", line, name


def _ua(r):
    name = _pick(r, "Khreshchatyk|Sahaidachnoho|Deribasivska|Shevchenka|Velyka Vasylkivska")
    line = r.choice(
        [f"vul. {name}, {r.randint(1, 140)}", f"vul. {name} {r.randint(1, 140)}", f"prosp. {name} {r.randint(1, 140)}"]
    )
    return (
        f"{line}{r.choice(['', f', kv. {r.randint(1, 90)}'])}, {_pick(r, 'Kyiv, 01001|Odesa 65044|Lviv 79000')}",
        line,
        name,
    )


ADDRESS_COUNTRIES = {
    "GB": _gb,
    "IE": _ie,
    "US": _us,
    "CA": _ca,
    "AU": _au,
    "NZ": _nz,
    "DE": _de,
    "AT": _at,
    "CH": _ch,
    "NL": _nl,
    "BE": _be,
    "LU": _lu,
    "DK": _dk,
    "SE": _se,
    "NO": _no,
    "FI": _fi,
    "IS": _is,
    "EE": _ee,
    "LV": _lv,
    "LT": _lt,
    "PL": _pl,
    "CZ": _cz,
    "SK": _sk,
    "HU": _hu,
    "HR/SI/RS": _balkan,
    "RO": _ro,
    "GR": _gr,
    "TR": _tr,
    "ES": _es,
    "PT": _pt,
    "BR": _br,
    "AR": _ar,
    "MX": _mx,
    "CL": _cl,
    "CO": _co,
    "PE": _pe,
    "IT": _it,
    "FR": _fr,
    "JP": _jp,
    "KR": _kr,
    "CN": _cn,
    "TW": _tw,
    "HK": _hk,
    "SG": _sg,
    "MY": _my,
    "ID": _id,
    "PH": _ph,
    "TH": _th,
    "VN": _vn,
    "IN": _in,
    "PK": _pk,
    "ZA": _za,
    "EG": _eg,
    "IL": _il,
    "RU": _ru,
    "UA": _ua,
}

# ---- people ---------------------------------------------------------------------------------------
# (given names, family names) per tradition, written for this file.
PEOPLE = {
    "de": (
        "Henrike Matthias Jörg Ulrike Friederike Wolfgang Annelie Torsten Gesine Benedikt",
        "Baumgartner Schmidtke Köhler Wagenknecht Oberholzer Eichhorn Brandauer Pfeiffer",
    ),
    "nl": ("Sanne Joost Maarten Femke Wouter Lieke Sjoerd", "Bakker Visser Mulder Dijkstra Brouwer Hoekstra"),
    "nordic": (
        "Mette Kasper Freja Magnus Tuva Aino Juhani Sigrún Ólafur Ingvild",
        "Kristensen Mortensen Lindgren Virtanen Korhonen Halvorsen Sigurðardóttir Nyström",
    ),
    "baltic_slavic": (
        "Rūta Jānis Mārtiņš Kęstutis Katarzyna Grzegorz Tereza Vojtěch Milica Nenad",
        "Ozoliņš Kazlauskas Tamm Wójcik Szymańska Procházková Jovanović Kovačević",
    ),
    "greek": ("Eleni Giorgos Dimitra Stavros Katerina", "Papadopoulou Georgiou Konstantinidis Vlachos"),
    "iberian": (
        "Itziar Iñaki Rocío Nuno Gonçalo Begoña Xoán",
        "Etxeberria Carvalho Magalhães Arrieta Figueiredo Vázquez",
    ),
    "latam": (
        "Valeria Santino Renata Emiliano Ximena Dayana Yamileth",
        "Zambrano Oyarzún Huamán Quintero Betancourt Ramírez",
    ),
    "korean": ("Min-seo Ha-neul Seung-woo Ji-ho Da-eun", "Jeon Hwang Baek Shin Oh"),
    "chinese": ("Xiaoyan Junjie Meiling Zihao Yuting", "Guo Deng Tang Feng Cai"),
    "japanese": ("Haruka Takumi Riko Shota Naoki", "Ogawa Matsumoto Inoue Fujiwara Kimura"),
    "sea": (
        "Châu Khoa Supachai Nattaya Putri Bayu Maricris",
        "Phạm Thongchai Ayuningtyas Saputra Dimaculangan Wongsakul",
    ),
    "south_asian": (
        "Anjali Venkata Tanvir Lakshmi Harpreet Farzana Sandeep",
        "Menon Subrahmanyam Ahmed Bhattacharya Dhillon Raghunathan",
    ),
    "mena": ("Yasmin Omid Noa Avraham Karim Leila Hamza", "El-Masri Rezaei Ben-David Cohen Haddadin Tahiri"),
    "african": (
        "Tendai Chipo Aïssatou Mamadou Nokwanda Kwabena Wanjiku Obiora",
        "Moyo Banda Diallo Sow Mabaso Asamoah Kariuki Nwankwo",
    ),
    "anglo": (
        "Rhys Imogen Declan Mackenzie Tamsin Lachlan",
        "Pritchard Fairclough O'Rourke Tremblay Ashdown McAllister",
    ),
}
FAMILY_FIRST = ("korean", "chinese", "japanese")
TITLES = ("Mr", "Mrs", "Ms", "Dr", "Dr.", "Prof.", "Herr", "Frau", "Sr.", "Sra.", "M.", "Mme", "Dott.", "Ing.")


def _person(r: random.Random) -> tuple[str, list[str]]:
    trad = r.choice(list(PEOPLE))
    given, family = PEOPLE[trad]
    g, f = r.choice(given.split()), r.choice(family.split())
    x = r.random()
    if trad in FAMILY_FIRST and x < 0.5:
        return f"{f} {g}", [f, g]
    if x < 0.12:
        return f"{f.upper()}, {g}", [f.upper(), g]
    if x < 0.22:
        return f"{r.choice(TITLES)} {g} {f}", [g, f]
    if x < 0.3:
        return f"{g} {r.choice(given.split())} {f}", [g, f]
    if x < 0.36:
        return f"{g[0]}. {f}", [f]
    return f"{g} {f}", [g, f]


# ---- numbers ----------------------------------------------------------------------------------------
def _digits(r: random.Random, n: int) -> str:
    return "".join(str(r.randrange(10)) for _ in range(n))


def _phone(r: random.Random) -> tuple[str, str]:
    d = lambda n: _digits(r, n)  # noqa: E731
    forms = {
        "GB": [
            lambda: f"020 7{d(3)} {d(4)}",
            lambda: f"+44 20 7{d(3)} {d(4)}",
            lambda: f"07{d(3)} {d(6)}",
            lambda: f"(0161) {d(3)} {d(4)}",
        ],
        "US": [
            lambda: f"({r.randint(201, 989)}) {r.randint(200, 999)}-{d(4)}",
            lambda: f"{r.randint(201, 989)}.{r.randint(200, 999)}.{d(4)}",
            lambda: f"+1 {r.randint(201, 989)} {r.randint(200, 999)} {d(4)}",
        ],
        "DE": [
            lambda: f"030 {r.randint(2, 9)}{d(7)}",
            lambda: f"+49 30 {r.randint(2, 9)}{d(7)}",
            lambda: f"0151 {d(8)}",
            lambda: f"+49 (0)89 {r.randint(2, 9)}{d(6)}",
        ],
        "FR": [
            lambda: f"06 {d(2)} {d(2)} {d(2)} {d(2)}",
            lambda: f"+33 1 {d(2)} {d(2)} {d(2)} {d(2)}",
            lambda: f"01.{d(2)}.{d(2)}.{d(2)}.{d(2)}",
        ],
        "ES": [lambda: f"6{d(2)} {d(2)} {d(2)} {d(2)}", lambda: f"+34 91{d(1)} {d(3)} {d(3)}"],
        "IT": [lambda: f"+39 06 {d(4)} {d(4)}", lambda: f"3{d(2)} {d(3)} {d(4)}"],
        "NL": [lambda: f"06-{r.randint(1, 9)}{d(7)}", lambda: f"+31 20 {d(3)} {d(4)}"],
        "SE": [lambda: f"070-{d(3)} {d(2)} {d(2)}", lambda: f"+46 8 {d(3)} {d(3)} {d(2)}"],
        "DK": [lambda: f"+45 {d(2)} {d(2)} {d(2)} {d(2)}", lambda: f"{r.randint(20, 99)} {d(2)} {d(2)} {d(2)}"],
        "PL": [lambda: f"+48 {r.randint(500, 899)} {d(3)} {d(3)}", lambda: f"{r.randint(500, 899)}-{d(3)}-{d(3)}"],
        "JP": [lambda: f"03-{d(4)}-{d(4)}", lambda: f"090-{d(4)}-{d(4)}", lambda: f"+81 3-{d(4)}-{d(4)}"],
        "KR": [lambda: f"010-{d(4)}-{d(4)}", lambda: f"+82 2-{d(3)}-{d(4)}"],
        "CN": [lambda: f"13{d(1)} {d(4)} {d(4)}", lambda: f"+86 10 {d(4)} {d(4)}"],
        "IN": [
            lambda: f"{r.randint(70000, 99999)} {d(5)}",
            lambda: f"+91 {r.randint(70000, 99999)} {d(5)}",
            lambda: f"080-{d(4)} {d(4)}",
        ],
        "BR": [lambda: f"(11) 9{d(4)}-{d(4)}", lambda: f"+55 21 {r.randint(2, 3)}{d(3)}-{d(4)}"],
        "MX": [lambda: f"55 {d(4)} {d(4)}", lambda: f"+52 1 55 {d(4)} {d(4)}"],
        "AU": [
            lambda: f"04{d(2)} {d(3)} {d(3)}",
            lambda: f"(02) {r.randint(8, 9)}{d(3)} {d(4)}",
            lambda: f"+61 4{d(2)} {d(3)} {d(3)}",
        ],
        "RU": [lambda: f"+7 (495) {d(3)}-{d(2)}-{d(2)}", lambda: f"8 (9{d(2)}) {d(3)}-{d(2)}-{d(2)}"],
        "ZA": [lambda: f"08{r.randint(2, 4)} {d(3)} {d(4)}", lambda: f"+27 21 {d(3)} {d(4)}"],
        "TR": [lambda: f"+90 5{d(2)} {d(3)} {d(2)} {d(2)}", lambda: f"0 (5{d(2)}) {d(3)} {d(2)} {d(2)}"],
    }
    country = r.choice(sorted(forms))
    return r.choice(forms[country])(), country


def _luhn_digit(body: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(body)):
        v = int(ch) * (2 if i % 2 == 0 else 1)
        total += v // 10 + v % 10
    return str((10 - total % 10) % 10)


def _card(r: random.Random) -> str:
    prefix, n = r.choice(
        [
            ("4", 16),
            ("51", 16),
            ("2221", 16),
            ("34", 15),
            ("37", 15),
            ("6011", 16),
            ("3530", 16),
            ("6250", 16),
            ("36", 14),
        ]
    )
    body = prefix + _digits(r, n - len(prefix) - 1)
    num = body + _luhn_digit(body)
    if n == 15:
        groups = [num[:4], num[4:10], num[10:]]
    elif n == 14:
        groups = [num[:4], num[4:10], num[10:]]
    else:
        groups = [num[i : i + 4] for i in range(0, n, 4)]
    return r.choice([" ", "-", "", " "]).join(groups)


BBAN = {
    "DE": "8n10n",
    "FR": "10n11c2n",
    "ES": "20n",
    "IT": "1a10n12c",
    "NL": "4a10n",
    "BE": "12n",
    "AT": "16n",
    "CH": "5n12c",
    "GB": "4a14n",
    "IE": "4a14n",
    "PT": "21n",
    "PL": "24n",
    "SE": "20n",
    "DK": "14n",
    "NO": "11n",
    "FI": "14n",
    "GR": "7n16c",
    "HR": "17n",
    "RO": "4a16c",
    "CZ": "20n",
    "HU": "24n",
    "LT": "16n",
    "LV": "4a13c",
    "EE": "16n",
    "TR": "5n1n16c",
    "SA": "2n18c",
    "BR": "23n1a1c",
    "IS": "22n",
    "LU": "3n13c",
}


def _iban(r: random.Random) -> tuple[str, str]:
    cc = r.choice(sorted(BBAN))
    bban = ""
    for count, cls in re.findall(r"(\d+)([nac])", BBAN[cc]):
        pool = {"n": "0123456789", "a": "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "c": "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"}[cls]
        bban += "".join(r.choice(pool) for _ in range(int(count)))
    numeric = "".join(str(int(c, 36)) for c in bban + cc + "00")
    raw = f"{cc}{98 - int(numeric) % 97:02d}{bban}"
    x = r.random()
    if x < 0.45:
        v = " ".join(raw[i : i + 4] for i in range(0, len(raw), 4))
    elif x < 0.85:
        v = raw
    elif x < 0.93:
        v = " ".join(raw[i : i + 4] for i in range(0, len(raw), 4)).lower()
    else:
        v = raw.lower()
    return v, cc


def _ssn(r: random.Random) -> str:
    area = r.choice([a for a in range(1, 900) if a != 666])
    a, g, s = f"{area:03d}", f"{r.randint(1, 99):02d}", f"{r.randint(1, 9999):04d}"
    return r.choice([f"{a}-{g}-{s}", f"{a} {g} {s}", f"{a}{g}{s}"])


def _mod11_weights(digits: str, weights) -> int:
    return sum(int(c) * w for c, w in zip(digits, weights))


def _national_id(r: random.Random) -> tuple[str, str, str]:
    """(value as written, country, phrase label) with the country's check digits."""
    c = r.choice(["GB", "CA", "ES", "BR", "IN", "KR", "CN", "SE", "IT", "FR", "PL", "NL", "FI", "NO"])
    if c == "GB":
        first = r.choice("ABCEGHJKLMNOPRSTWXYZ")
        second = r.choice("ABCEGHJKLMNPRSTWXYZ")
        while first + second in ("GB", "NK", "KN", "TN", "NT", "ZZ", "BG"):
            second = r.choice("ABCEGHJKLMNPRSTWXYZ")
        n = _digits(r, 6)
        v = r.choice(
            [f"{first}{second} {n[:2]} {n[2:4]} {n[4:]} {r.choice('ABCD')}", f"{first}{second}{n}{r.choice('ABCD')}"]
        )
        return v, c, "National Insurance number"
    if c == "CA":
        body = str(r.choice([1, 2, 3, 4, 5, 6, 7, 9])) + _digits(r, 7)
        n = body + _luhn_digit(body)
        return r.choice([f"{n[:3]} {n[3:6]} {n[6:]}", f"{n[:3]}-{n[3:6]}-{n[6:]}"]), c, "SIN"
    if c == "ES":
        if r.random() < 0.7:
            n = r.randint(1000000, 99999999)
            return f"{n:08d}{'TRWAGMYFPDXBNJZSQVHLCKE'[n % 23]}", c, "DNI"
        lead = r.choice("XYZ")
        n = r.randint(0, 9999999)
        return f"{lead}{n:07d}{'TRWAGMYFPDXBNJZSQVHLCKE'[int(str('XYZ'.index(lead)) + f'{n:07d}') % 23]}", c, "NIE"
    if c == "BR":
        base = _digits(r, 9)
        d1 = (_mod11_weights(base, range(10, 1, -1)) * 10) % 11 % 10
        d2 = (_mod11_weights(base + str(d1), range(11, 1, -1)) * 10) % 11 % 10
        n = f"{base}{d1}{d2}"
        return r.choice([f"{n[:3]}.{n[3:6]}.{n[6:9]}-{n[9:]}", n]), c, "CPF"
    if c == "IN":
        # Verhoeff check digit
        d_t = [
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
        p_t = [
            [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
            [1, 5, 7, 6, 2, 8, 3, 0, 9, 4],
            [5, 8, 0, 3, 7, 9, 6, 1, 4, 2],
            [8, 9, 1, 6, 0, 4, 3, 5, 2, 7],
            [9, 4, 5, 3, 1, 2, 6, 8, 7, 0],
            [4, 2, 8, 6, 5, 7, 3, 9, 0, 1],
            [2, 7, 9, 3, 8, 0, 6, 4, 1, 5],
            [7, 0, 4, 6, 9, 1, 3, 2, 5, 8],
        ]
        inv = [0, 4, 3, 2, 1, 5, 6, 7, 8, 9]
        base = str(r.randint(2, 9)) + _digits(r, 10)
        chk = 0
        for i, ch in enumerate(reversed(base)):
            chk = d_t[chk][p_t[(i + 1) % 8][int(ch)]]
        n = base + str(inv[chk])
        return r.choice([f"{n[:4]} {n[4:8]} {n[8:]}", n]), c, "Aadhaar"
    if c == "KR":
        yy, mm, dd = r.randint(50, 99), r.randint(1, 12), r.randint(1, 28)
        body = f"{yy:02d}{mm:02d}{dd:02d}{r.choice('12')}{_digits(r, 5)}"
        chk = (11 - _mod11_weights(body, [2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5]) % 11) % 10
        n = body + str(chk)
        return f"{n[:6]}-{n[6:]}", c, "resident registration number"
    if c == "CN":
        body = (
            r.choice(["110105", "310104", "440106", "330106"])
            + f"{r.randint(1960, 2004)}{r.randint(1, 12):02d}{r.randint(1, 28):02d}"
            + _digits(r, 3)
        )
        s = _mod11_weights(body, [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2])
        return body + "10X98765432"[s % 11], c, "ID card number"
    if c == "SE":
        body = f"{r.randint(40, 99):02d}{r.randint(1, 12):02d}{r.randint(1, 28):02d}{_digits(r, 3)}"
        n = body + _luhn_digit(body)
        return r.choice([f"{n[:6]}-{n[6:]}", f"19{n[:6]}-{n[6:]}"]), c, "personnummer"
    if c == "IT":
        odd = {
            **{str(i): v for i, v in enumerate([1, 0, 5, 7, 9, 13, 15, 17, 19, 21])},
            **dict(
                zip(
                    "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
                    [1, 0, 5, 7, 9, 13, 15, 17, 19, 21, 2, 4, 18, 20, 11, 3, 6, 8, 12, 14, 16, 10, 22, 25, 24, 23],
                )
            ),
        }
        even = {**{str(i): i for i in range(10)}, **{ch: i for i, ch in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZ")}}
        L = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        body = (
            "".join(r.choice("BCDFGHLMNPRSTVZ") for _ in range(6))
            + f"{r.randint(40, 99)}"
            + r.choice("ABCDEHLMPRST")
            + f"{r.randint(1, 71):02d}"
            + r.choice("ABCDEFGHLM")
            + f"{r.randint(100, 999)}"
        )
        s = sum(odd[ch] if i % 2 == 0 else even[ch] for i, ch in enumerate(body))
        return body + L[s % 26], c, "codice fiscale"
    if c == "FR":
        body = f"{r.choice('12')}{r.randint(40, 99):02d}{r.randint(1, 12):02d}{r.randint(1, 95):02d}{r.randint(1, 990):03d}{r.randint(1, 999):03d}"
        key = 97 - int(body) % 97
        n = f"{body}{key:02d}"
        return (
            r.choice([f"{n[0]} {n[1:3]} {n[3:5]} {n[5:7]} {n[7:10]} {n[10:13]} {n[13:]}", n]),
            c,
            "numéro de sécurité sociale",
        )
    if c == "PL":
        body = f"{r.randint(40, 99):02d}{r.randint(1, 12):02d}{r.randint(1, 28):02d}{_digits(r, 4)}"
        chk = (10 - _mod11_weights(body, [1, 3, 7, 9, 1, 3, 7, 9, 1, 3]) % 10) % 10
        return body + str(chk), c, "PESEL"
    if c == "NL":
        while True:
            body = str(r.randint(1, 9)) + _digits(r, 7)
            rest = _mod11_weights(body, [9, 8, 7, 6, 5, 4, 3, 2]) % 11
            if rest < 10:
                n = body + str(rest)
                break
        return r.choice([n, f"{n[:4]}.{n[4:6]}.{n[6:]}"]), c, "BSN"
    if c == "FI":
        dd, mm, yy = r.randint(1, 28), r.randint(1, 12), r.randint(40, 99)
        ind = r.randint(2, 899)
        num = int(f"{dd:02d}{mm:02d}{yy:02d}{ind:03d}")
        return f"{dd:02d}{mm:02d}{yy:02d}-{ind:03d}{'0123456789ABCDEFHJKLMNPRSTUVWXY'[num % 31]}", c, "henkilötunnus"
    # NO fødselsnummer: two mod-11 check digits
    while True:
        base = f"{r.randint(1, 28):02d}{r.randint(1, 12):02d}{r.randint(40, 99):02d}{_digits(r, 3)}"
        k1 = 11 - _mod11_weights(base, [3, 7, 6, 1, 8, 9, 4, 5, 2]) % 11
        k1 = 0 if k1 == 11 else k1
        if k1 == 10:
            continue
        k2 = 11 - _mod11_weights(base + str(k1), [5, 4, 3, 2, 7, 6, 5, 4, 3, 2]) % 11
        k2 = 0 if k2 == 11 else k2
        if k2 == 10:
            continue
        return f"{base}{k1}{k2}", "NO", "fødselsnummer"


def _ip(r: random.Random) -> str:
    v4 = f"{r.choice([r.randint(1, 9), r.randint(11, 99), r.randint(100, 126), r.randint(128, 223)])}.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(1, 254)}"
    g = [f"{r.randint(1, 0xFFFF):x}" for _ in range(8)]
    return r.choice(
        [
            v4,
            v4,
            f"{v4}:{r.choice([443, 8080, 22, 3389, 51820])}",
            f"{v4}/32",
            ":".join(g),
            f"2a01:{g[1]}:{g[2]}::{g[3]}",
            f"[2001:{g[1]}:{g[2]}::{g[4]}]:443",
            f"::ffff:{v4}",
            f"2c0f:{g[2]}:{g[3]}:{g[5]}::{g[6]}",
        ]
    )


def _ascii(s: str) -> str:
    s = s.replace("ø", "o").replace("ł", "l").replace("ð", "d").replace("đ", "d").replace("ß", "ss").replace("æ", "ae")
    return unicodedata.normalize("NFKD", s).encode("ascii", "ignore").decode()


def _email(r: random.Random) -> str:
    trad = r.choice(list(PEOPLE))
    g, f = r.choice(PEOPLE[trad][0].split()), r.choice(PEOPLE[trad][1].split())
    g, f = _ascii(g).lower().replace("-", ""), _ascii(f).lower().replace("'", "").replace("-", "")
    local = r.choice(
        [
            f"{g}.{f}",
            f"{g[0]}{f}",
            f"{f}{r.randint(1, 99)}",
            f"{g}_{f}",
            f"{g}.{f}+orders",
            f"{f}.{g[0]}",
            f"{g.capitalize()}.{f.capitalize()}",
        ]
    )
    domain = r.choice(
        [
            "posteo.de",
            "gmx.ch",
            "orange.fr",
            "telenet.be",
            "ziggo.nl",
            "live.se",
            "online.no",
            "wp.pl",
            "seznam.cz",
            "virgilio.it",
            "terra.com.br",
            "prodigy.net.mx",
            "daum.net",
            "163.com",
            "yahoo.co.jp",
            "bigpond.com",
            "xtra.co.nz",
            "mweb.co.za",
            "students.uni-mainz.de",
            "mail.tu-berlin.de",
            "btinternet.com",
        ]
    )
    return f"{local}@{domain}"


# ---- phrasings (written for this corpus: a hotel chain, an airline, a utility, an insurer, a clinic) --------
PHRASES = {
    "STREET_ADDRESS": (
        "Delivery address: {v}",
        "Lieferadresse: {v}",
        "Adresse de livraison : {v}",
        "Dirección de envío: {v}",
        "shipping to {v}",
        "I'm at {v} until Friday",
        "{v} is the billing address",
        "our warehouse at {v} is closed on Sundays",
        "The parcel was left at {v} by mistake",
        "send the documents to {v}",
        "I moved out of {v} last month",
        "home address {v}",
        "correspondence address: {v}",
        "Bitte an {v} schicken.",
        "please collect from {v}",
        "registered office: {v}",
        "the technician should come to {v}",
        "Address line 1: {v}",
        "Postadresse {v}",
        "the meter is at {v}",
        "my old flat was {v}",
        "Endereço: {v}",
        "Indirizzo di consegna: {v}",
        "Adres: {v}",
        "we're staying at {v} for the conference",
        "invoice to {v}, please",
    ),
    "PERSON": (
        "Name: {v}",
        "I'm {v}, booking for two",
        "this is {v} from accounts",
        "please ask for {v} at reception",
        "{v} will sign for it",
        "Regards, {v}",
        "Mit freundlichen Grüßen\n{v}",
        "Saludos,\n{v}",
        "Cordialement,\n{v}",
        "Recipient: {v}",
        "my colleague {v} made the booking",
        "the invoice should be addressed to {v}",
        "c/o {v}",
        "Kontoinhaber: {v}",
        "Titular: {v}",
        "Guest name: {v}",
        "Policyholder: {v}",
        "Patient: {v}",
        "Passenger name {v}",
        "Kind regards,\n{v}",
        "Thanks! — {v}",
    ),
    "EMAIL": (
        "Email: {v}",
        "write to {v}",
        "my address is {v} for the receipt",
        "Kontakt: {v}",
        "reply to <{v}>",
        "mailto:{v}",
        "the confirmation went to {v}",
    ),
    "PHONE": (
        "Tel.: {v}",
        "phone {v}",
        "call me on {v}",
        "Mobile {v}",
        "Handy: {v}",
        "Teléfono: {v}",
        "my number: {v}",
        "ring {v} when you arrive",
        "contact number {v}",
    ),
    "CREDIT_CARD": (
        "Card number: {v}",
        "paid with {v}",
        "the card {v} expires 11/28",
        "Kartennummer {v}",
        "charge {v} please",
    ),
    "IBAN": ("IBAN: {v}", "refund to {v}", "Kontoverbindung {v}", "my account is {v}", "IBAN {v} (joint account)"),
    "US_SSN": ("SSN: {v}", "social security number {v}", "SSN {v} for the background check"),
    "NATIONAL_ID": ("{label}: {v}", "my {label} is {v}", "{label} {v}"),
    "IP_ADDRESS": (
        "IP: {v}",
        "connecting from {v}",
        "the VPN gave me {v}",
        "server at {v} refuses the connection",
        "source address {v}",
    ),
}
# Ordinary sentences, with numbers in prose next to capitalised words: none may be changed by redaction.
FILLER = (
    "Chapter 12 of the manual does not cover this.",
    "We upgraded to Version 2 Release 3 last night.",
    "I stayed in Room 5 on the second floor.",
    "Boarding was at Gate 23, Terminal 2.",
    "The flight LH 440 was delayed by 90 minutes.",
    "It happens on Windows 11 and on macOS 14.",
    "The app shows Error 403 after login.",
    "Section 4, paragraph 2 of your terms says otherwise.",
    "Step 3 fails every time.",
    "Season 2 Episode 7 will not play.",
    "We waited at Platform 9 for an hour.",
    "My booking is for 3 nights in June.",
    "I called 4 times this week.",
    "The heater in Building 7 is broken again.",
    "Question 2 on the form is unclear.",
    "The Premium 12 plan was cheaper last year.",
    "The bill for March was 48 EUR higher than usual.",
    "Level 3 of the car park was closed.",
    "Our team has 14 people.",
    "I was born in 1987, if that matters.",
    "The meeting is on Monday 14 at 10:30.",
    "Please see Table 2 and Figure 5 in the attachment.",
    "Item 6 in the order was missing.",
    "Your FAQ page 3 has a broken link.",
    "The Model 3 charger does not fit.",
    "Berlin 2 : Munich 1 was the score.",
    "Invoice 2025-118 lists the wrong tax rate.",
    "I used code WELCOME10 at checkout.",
)
SYSTEMS = (
    "You are the reservations assistant of Northwind Hotels. Confirm dates and guest counts, never quote prices not in the rate table.",
    "You are Skyline Air's support agent. Rebook disrupted passengers first; baggage claims go to the claims form.",
    "You help customers of Helio Energy with meter readings, tariffs and moving house. Keep answers short.",
    "You are the claims assistant of Bastion Insurance. Collect the facts, do not admit liability, escalate injuries.",
    "You book appointments for Lindenhof Clinic. Never give medical advice; offer the next free slot.",
)
ASSISTANT = (
    "Noted, thank you.",
    "One moment please.",
    "Could you confirm that?",
    "I have updated the record.",
    "Let me check.",
)


@dataclass
class PlantedValue:
    line: int
    kind: str
    value: str
    identifiers: list[str] = field(default_factory=list)
    country: str = ""


def _ids(kind: str, value: str, extra: list[str | None]) -> list[str]:
    ids = [value]
    if kind == "STREET_ADDRESS":
        ids += [e for e in extra if e and len(e) >= 4]
    elif kind == "PERSON":
        ids += [w for w in extra if w and len(w.strip(".")) >= 3]
    elif kind in ("CREDIT_CARD", "IBAN", "PHONE", "US_SSN", "NATIONAL_ID"):
        compact = re.sub(r"[^0-9A-Za-z]", "", value).upper()
        ids.append(compact[-8:] if kind == "PHONE" else compact)
    return list(dict.fromkeys(ids))


def _value(kind: str, r: random.Random) -> tuple[str, list[str], str, str]:
    """(value, identifiers, country, national-id label)."""
    if kind == "STREET_ADDRESS":
        country = r.choice(sorted(ADDRESS_COUNTRIES))
        v, line, core = ADDRESS_COUNTRIES[country](r)
        return v, _ids(kind, v, [line, core]), country, ""
    if kind == "PERSON":
        v, words = _person(r)
        return v, _ids(kind, v, words), "", ""
    if kind == "PHONE":
        v, country = _phone(r)
        return v, _ids(kind, v, []), country, ""
    if kind == "IBAN":
        v, country = _iban(r)
        return v, _ids(kind, v, []), country, ""
    if kind == "NATIONAL_ID":
        v, country, label = _national_id(r)
        return v, _ids(kind, v, []), country, label
    v = {"EMAIL": _email, "CREDIT_CARD": _card, "US_SSN": _ssn, "IP_ADDRESS": _ip}[kind](r)
    return v, _ids(kind, v, []), ("US" if kind == "US_SSN" else ""), ""


def generate(
    n: int, seed: int = 5, values_per_request: tuple[int, int] = (2, 4), clean_share: float = 0.05
) -> tuple[list[str], list[PlantedValue]]:
    """``n`` request-log lines and their planted values (``clean_share`` of requests carry none)."""
    r = random.Random(seed)
    lines: list[str] = []
    planted: list[PlantedValue] = []
    t = 1_780_000_000.0
    weights = {
        "STREET_ADDRESS": 5,
        "PERSON": 2,
        "EMAIL": 1,
        "PHONE": 1.5,
        "CREDIT_CARD": 0.7,
        "IBAN": 0.8,
        "US_SSN": 0.4,
        "NATIONAL_ID": 1,
        "IP_ADDRESS": 0.7,
    }
    for i in range(1, n + 1):
        t += r.expovariate(1.5)
        turns = [" ".join(r.sample(FILLER, r.randint(1, 2))) for _ in range(r.randint(1, 3))]
        values: list[PlantedValue] = []
        tool_args = None
        if r.random() >= clean_share:
            for _ in range(r.randint(*values_per_request)):
                kind = r.choices(list(weights), weights=list(weights.values()))[0]
                value, ids, country, label = _value(kind, r)
                phrase = r.choice(PHRASES[kind])
                if kind == "PERSON" and r.random() < 0.06 and "," not in value:
                    value = value.lower()
                    ids = [w.lower() for w in ids]
                sentence = phrase.format(v=value, label=label)
                if not sentence.endswith((".", "!", "?")):  # people end a sentence, mostly
                    sentence += r.choice([".", ".", ".", "!", "\n", " —", ";", ""])
                j = r.randrange(len(turns))
                turns[j] = f"{sentence} {turns[j]}" if r.random() < 0.5 else f"{turns[j]} {sentence}"
                values.append(PlantedValue(i, kind, value, ids, country))
            if r.random() < 0.2:  # a form block
                who, who_ids, _, _ = _value("PERSON", r)
                where, where_ids, where_c, _ = _value("STREET_ADDRESS", r)
                tel, tel_ids, tel_c, _ = _value("PHONE", r)
                label = r.choice(
                    [
                        ("Name", "Address", "Phone"),
                        ("Nome", "Indirizzo", "Telefono"),
                        ("Naam", "Adres", "Telefoon"),
                        ("Name", "Anschrift", "Telefon"),
                        ("Nom", "Adresse", "Tél."),
                    ]
                )
                turns.append(f"{label[0]}: {who}\n{label[1]}: {where}\n{label[2]}: {tel}")
                values += [
                    PlantedValue(i, "PERSON", who, who_ids),
                    PlantedValue(i, "STREET_ADDRESS", where, where_ids, where_c),
                    PlantedValue(i, "PHONE", tel, tel_ids, tel_c),
                ]
            if r.random() < 0.2:  # a tool call with structured fields
                who, who_ids, _, _ = _value("PERSON", r)
                country = r.choice(sorted(ADDRESS_COUNTRIES))
                where, line, core = ADDRESS_COUNTRIES[country](r)
                args = {"guest_name": who, "street": line, "country": country.split("/")[0], "nights": r.randint(1, 9)}
                tool_args = json.dumps(args, ensure_ascii=False)
                values += [
                    PlantedValue(i, "PERSON", who, who_ids),
                    PlantedValue(i, "STREET_ADDRESS", line, _ids("STREET_ADDRESS", line, [line, core]), country),
                ]
        messages = [{"role": "system", "content": SYSTEMS[i % len(SYSTEMS)]}]
        for j, turn in enumerate(turns):
            if j:
                messages.append({"role": "assistant", "content": r.choice(ASSISTANT)})
            messages.append({"role": "user", "content": turn})
        if tool_args is not None:
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {"name": "save_guest", "arguments": tool_args},
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": '{"saved": true}'})
        body = {"model": "concierge", "messages": messages, "max_tokens": r.choice([96, 160, 256]), "temperature": 0.2}
        lines.append(
            json.dumps(
                {"timestamp": round(t, 3), "request": body, "usage": {"completion_tokens": r.randint(12, 140)}},
                ensure_ascii=False,
            )
        )
        planted += values
    _check(planted)
    return lines, planted


def _check(planted: list[PlantedValue]) -> None:
    """No identifier may occur in the corpus's own fixed text (a leak would be a false alarm)."""
    fixed = (
        " ".join(FILLER + SYSTEMS + ASSISTANT + tuple(p for ps in PHRASES.values() for p in ps))
        + " save_guest guest_name street country nights saved concierge Name Address Phone Nome Indirizzo Telefono Naam Adres "
        "Telefoon Anschrift Telefon Nom Adresse Tél"
    )
    for p in planted:
        for ident in p.identifiers[1:]:
            if re.search(rf"(?<!\w){re.escape(ident)}(?!\w)", fixed):
                raise AssertionError(f"identifier {ident!r} of a {p.kind} occurs in the corpus's own text")


def leaked(p: PlantedValue, text: str) -> bool:
    """Whether any identifier of ``p`` survives in ``text`` (whole words; digit strings compacted)."""
    compact = None
    for ident in p.identifiers:
        if p.kind in ("CREDIT_CARD", "IBAN", "PHONE", "US_SSN", "NATIONAL_ID") and ident.isalnum() and ident != p.value:
            if compact is None:
                compact = re.sub(r"[^0-9A-Za-z]", "", text).upper()
            if ident in compact:
                return True
        elif re.search(rf"(?<!\w){re.escape(ident)}(?!\w)", text):
            return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    lines, planted = generate(args.lines, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "world_logs.jsonl").write_text("\n".join(lines) + "\n")
    (args.out / "world_planted.json").write_text(json.dumps([asdict(p) for p in planted], ensure_ascii=False, indent=0))
    by = {k: sum(p.kind == k for p in planted) for k in KINDS}
    print(f"{len(lines)} lines, {len(planted)} planted values: {by}")


if __name__ == "__main__":
    main()
