"""A held-out PII corpus for measuring redaction on traffic it was never tuned on.

Written independently of ``replay.redact`` and ``replay.pii_fixtures``: this module imports
neither, shares no word list, name source, template or phrasing with them, and uses no Faker.
Its names were written by hand for this file from many naming traditions (West/East/Southern
African, South Asian, East and South-East Asian in romanisation, Arabic, Persian, Turkish,
Slavic, Latin American, Nordic, Celtic, Pacific), with diacritics, particles, hyphens and
apostrophes; its street addresses follow national formats (type word before the name, lowercase
particles, compounded street words, unit/plot/flat prefixes, postcodes). Frozen before the
recogniser was tuned (see git history); do not tune this file to the recogniser.

Every planted value is recorded with the *identifiers* whose survival anywhere in the redacted
request counts as a leak (the whole value, plus: each name token of a person; the street line
and its distinctive name of an address; the digit string of numbers).

    .venv/bin/python benchmarks/pii_heldout_corpus.py --lines 2000 --seed 7 --out /tmp/heldout
"""

from __future__ import annotations

import argparse
import json
import random
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path

KINDS = ("EMAIL", "PHONE", "CREDIT_CARD", "IBAN", "US_SSN", "IP_ADDRESS", "STREET_ADDRESS", "PERSON")

# ---- names, by tradition (given names, family names) -------------------------------------------
GIVEN = {
    "yoruba": "Adebayo Oluwaseun Folasade Temitope Olumide Abimbola Babatunde Funmilayo Ayodele Olufemi Kehinde Taiwo Yewande Damilola Oladipo Morenike",
    "igbo": "Chidinma Chukwuemeka Ngozi Obinna Adaeze Ifeanyi Chiamaka Nnamdi Uchenna Ebere Chinonso Obiageli Kelechi Amarachi Ikenna Nkiruka",
    "hausa_fulani": "Aminu Hadiza Abubakar Zainab Sadiq Hauwa Usman Binta Musa Aisha Garba Rukayya",
    "akan": "Kwame Akosua Kofi Ama Yaw Abena Kwabena Efua Kwaku Adwoa Kojo Esi",
    "swahili": "Baraka Neema Juma Rehema Amani Zawadi Jabari Imani Bahati Furaha Tumaini Mosi",
    "kikuyu_luo": "Wanjiru Kamau Njeri Otieno Achieng Wambui Ochieng Nyambura Kipchoge Wairimu",
    "zulu_xhosa": "Thandiwe Sipho Nomvula Themba Lindiwe Bongani Zanele Sibusiso Nokuthula Mandla Ayanda Lwazi",
    "amharic": "Abebe Tigist Hailu Meseret Dawit Selamawit Tesfaye Mekdes Yohannes Bethlehem",
    "hindi": "Aarav Priyanka Rohit Ananya Vikram Kavya Arjun Sneha Rajesh Pooja Siddharth Divya Aditya Nisha Harish Meenal",
    "tamil_telugu": "Karthik Lakshmi Senthil Divyabharathi Venkatesh Padmavathi Srinivas Anitha Murugan Kaveri Raghavendra Sowmya",
    "bengali": "Arnab Sharmistha Sourav Moumita Debashis Riya Anirban Tanushree Subhajit Poulami",
    "punjabi_urdu": "Gurpreet Harjit Manpreet Simranjit Imran Ayesha Faisal Sana Bilal Hina Zeeshan Mehwish",
    "chinese": "Xiuying Wei Jing Hao Yuxuan Zihan Jiahui Mingyu Xinyi Haoran Ruoxi Zhiwei Yifan Shuang",
    "japanese": "Haruto Yui Sota Hina Ren Aoi Yuto Sakura Daiki Misaki Kenta Ayaka",
    "korean": "Min-jun Seo-yeon Ji-hoon Ha-eun Do-yoon Soo-ah Jae-won Eun-ji Hyun-woo Yeon-woo",
    "vietnamese": "Thi Mai Van Anh Duc Minh Huong Thanh Lan Phuong Quang Tuan",
    "thai_indo_fil": "Somchai Siriporn Niran Kanya Budi Siti Agus Dewi Wayan Ketut Maricel Jomar Rhea Jonalyn",
    "arabic": "Mohammed Fatima Omar Layla Youssef Mariam Khalid Noura Tariq Huda Rashid Samira Ibrahim Amal",
    "persian_turkish": "Dariush Shirin Kourosh Parisa Babak Golnaz Mehmet Elif Emre Zeynep Burak Ayşe Şükrü Gülşen",
    "slavic": "Łukasz Agnieszka Wojciech Małgorzata Dmitri Anastasia Sergei Yekaterina Oleksandr Olena Bohdan Zdeněk Jiří Dragana Miloš",
    "latin": "Joaquín Ximena Guadalupe Santiago Valentina Matías Camila Rodrigo Florencia Thiago Luana João Conceição Inês",
    "nordic_celtic": "Sigríður Bjørn Åsa Eirik Solveig Aoife Siobhán Niamh Tadhg Caoimhe Eilidh Dafydd Rhiannon Saoirse",
    "pacific_other": "Sione Mele Tavita Losana Moana Keanu Aroha Wiremu Tama Leilani",
    "english": "Shannon Trevor Bethany Gareth Courtney Darnell Latoya Tyrone Brianna Jamal",
}
FAMILY = {
    "yoruba": "Adeyemi Ogunleye Olawale Adewale Bankole Oyelaran Akinola Fashola Ogunbiyi Adeleke",
    "igbo": "Okonkwo Okafor Nwosu Eze Obi Uzor Nwachukwu Chukwu Okeke Onyeka Anyanwu Ezeh",
    "hausa_fulani": "Bello Danjuma Abdullahi Yakubu Suleiman Lawal",
    "akan": "Mensah Owusu Asante Boateng Appiah Osei Darko Agyeman",
    "east_african": "Mwangi Odhiambo Wanjala Kiprono Njoroge Omondi Mutua Kimani Otieno Chebet",
    "southern_african": "Dlamini Nkosi Mahlangu Khumalo Ndlovu Mthembu Zulu Molefe Mokoena Sithole",
    "amharic": "Bekele Tadesse Gebremedhin Alemu Haile Wolde Kebede Negash",
    "south_asian": "Sharma Iyer Reddy Chatterjee Banerjee Deshpande Kulkarni Nair Pillai Subramanian Venkataraman Mukherjee Gupta Chowdhury Sandhu Grewal Qureshi Siddiqui Rajapaksa Perera",
    "chinese": "Wang Zhang Liu Chen Yang Huang Zhao Zhou Xu Sun Zhu Guo Luo Liang",
    "japanese": "Sato Suzuki Takahashi Tanaka Watanabe Ito Yamamoto Nakamura Kobayashi Yoshida",
    "korean": "Kim Lee Park Choi Jung Kang Cho Yoon Jang Lim",
    "vietnamese": "Nguyen Tran Le Pham Hoang Phan Vu Dang Bui Do",
    "thai_indo_fil": "Srisawat Wongsuwan Rattanakul Santoso Wijaya Hartono Setiawan Dela Cruz Bautista Villanueva Mangubat",
    "arabic": "Haddad Khoury Mansour Nasser Hamdan Saleh Aziz Farouk Qasim Barakat",
    "persian_turkish": "Hosseini Rahimi Tehrani Moradi Yılmaz Kaya Demir Şahin Çelik Öztürk",
    "slavic": "Kowalczyk Wiśniewski Zieliński Nowakowska Ivanov Smirnova Kuznetsov Shevchenko Kovalenko Dvořák Horvat Petrović Novotná",
    "latin": "Gutiérrez Domínguez Figueroa Sepúlveda Quispe Mamani Cardoso Gonçalves Araújo Ximénez Echeverría Villalobos",
    "nordic_celtic": "Guðmundsdóttir Haugen Lindqvist Bergström Ó Súilleabháin MacGiolla Ní Bhriain Llewellyn Cadwaladr Þórsson",
    "pacific_other": "Tuilagi Fonoti Taufa Ngata Kealoha Mahoe Tupou Leavasa",
    "english": "Thornton Pemberton Whitfield Blackwood Fairweather Hollingsworth Ashworth Cartwright",
}
# Full names with the structure kept (particles, order, hyphens, apostrophes).
COMPOSED = (
    "Nguyễn Thị Mai",
    "Trần Văn Hùng",
    "Lê Thị Hồng",
    "Mohammed bin Salman Al-Harbi",
    "Fatima al-Zahra Benali",
    "Abdullah ibn Rashid",
    "Pieter van der Merwe",
    "Anouk van den Bosch",
    "Jan de Vries",
    "Maria de los Ángeles Ruiz",
    "José María de la Fuente",
    "Ana Sofía dos Santos",
    "Luís da Costa Pereira",
    "Giovanni di Stefano",
    "Ludwig von Hohenberg",
    "Ó Briain Seán",
    "Siobhán O'Sullivan",
    "Aoife Ní Dhomhnaill",
    "Dara Ó Conaill",
    "Jean-Baptiste N'Diaye",
    "Marie-Claire Dubois-Lefèvre",
    "Youssou N'Dour",
    "Kwame Nkrumah-Acheampong",
    "Ama Ata Boateng",
    "Kim Ji-woo",
    "Park Seo-joon",
    "Lee Hye-jin",
    "Tanaka Yūko",
    "Wang Xiaoming",
    "Zhang Wei-Lin",
    "D'Angelo Russo",
    "Ngũgĩ wa Thiong'o",
    "Oluwadamilare Ayodeji-Johnson",
    "Şebnem Ferah Yıldız",
    "Raúl Ñúñez",
    "Zoë Østergaard",
    "Ingrid Bjørnstad-Ødegaard",
    "Vo Nguyen Giap",
)
PARTICLES = frozenset("bin ibn al el van der den de la los las del dos da di von wa ni ní ó o le du".split())
TITLES = (
    "Mr",
    "Mrs",
    "Ms",
    "Dr",
    "Prof",
    "Mx",
    "Sr",
    "Sra",
    "Herr",
    "Frau",
    "Mme",
    "M.",
    "Chief",
    "Alhaji",
    "Shri",
    "Smt",
)


# ---- addresses, by national format ---------------------------------------------------------------
def _addr_es(r):
    kind = r.choice(["Calle", "Avenida", "Paseo", "Plaza", "Carrer", "Camino", "Travesía", "Ronda"])
    name = r.choice(
        [
            "de la Paz",
            "del Olmo",
            "de Alcalá",
            "Mayor",
            "de los Reyes Católicos",
            "de Gràcia",
            "del Prado",
            "de San Vicente",
            "Real",
            "de las Flores",
            "del Sol",
            "de Goya",
            "de Velázquez",
            "Nueva",
        ]
    )
    num = r.randint(1, 220)
    base = f"{kind} {name} {num}" if r.random() < 0.6 else f"{kind} {name}, {num}"
    extra = r.choice(
        [
            "",
            f", {r.randint(1, 8)}º {r.choice('ABCD')}",
            f", {r.randint(28001, 28080)} Madrid",
            f", {r.randint(8001, 8042):05d} Barcelona",
        ]
    )
    return base + extra, f"{kind} {name}", name


def _addr_fr(r):
    kind = r.choice(["rue", "avenue", "boulevard", "place", "impasse", "chemin", "allée", "quai", "Rue", "Avenue"])
    name = r.choice(
        [
            "du Faubourg Saint-Honoré",
            "de la République",
            "des Lilas",
            "Victor Hugo",
            "de Rivoli",
            "du Général Leclerc",
            "des Trois Frères",
            "Jean Jaurès",
            "de l'Église",
            "Saint-Michel",
            "des Acacias",
            "de la Gare",
            "Pasteur",
        ]
    )
    num = r.randint(1, 180)
    bis = r.choice(["", "", "", " bis", " ter"])
    tail = r.choice(
        [
            "",
            f", {r.randint(75001, 75020)} Paris",
            f", {r.randint(69001, 69009)} Lyon",
            f", {r.randint(13001, 13016)} Marseille",
        ]
    )
    return f"{num}{bis} {kind} {name}{tail}", f"{kind} {name}", name


def _addr_it(r):
    kind = r.choice(["Via", "Viale", "Piazza", "Corso", "Largo", "Vicolo", "via", "piazza"])
    name = r.choice(
        [
            "dei Mille",
            "Garibaldi",
            "del Corso",
            "della Spiga",
            "Roma",
            "delle Belle Arti",
            "San Gregorio",
            "Vittorio Emanuele II",
            "dei Tribunali",
            "Dante Alighieri",
            "del Popolo",
            "Cavour",
        ]
    )
    num = r.randint(1, 150)
    tail = r.choice(
        [
            "",
            f", {r.randint(20121, 20162)} Milano",
            f", {r.randint(100, 199):05d} Roma",
            f", {r.randint(80121, 80147)} Napoli",
        ]
    )
    return f"{kind} {name} {num}{tail}" if r.random() < 0.7 else f"{kind} {name}, {num}{tail}", f"{kind} {name}", name


def _addr_pt(r):
    kind = r.choice(["Rua", "Avenida", "Travessa", "Largo", "Praça", "Alameda", "R."])
    name = r.choice(
        [
            "Augusta",
            "da Liberdade",
            "das Flores",
            "Oscar Freire",
            "dos Bandeirantes",
            "Paulista",
            "do Ouvidor",
            "Barão de Itapetininga",
            "Sete de Setembro",
            "das Laranjeiras",
            "Garrett",
        ]
    )
    num = r.randint(1, 2500)
    tail = r.choice(
        [
            "",
            f", apto {r.randint(11, 154)}",
            f" - {r.randint(1000, 9999)}-{r.randint(100, 999)} Lisboa",
            f", São Paulo - SP, 0{r.randint(1000, 9999)}-{r.randint(0, 999):03d}",
        ]
    )
    return f"{kind} {name}, {num}{tail}" if r.random() < 0.7 else f"{kind} {name} {num}{tail}", f"{kind} {name}", name


def _addr_de(r):
    stem = r.choice(
        [
            "Haupt",
            "Bahnhof",
            "Linden",
            "Schiller",
            "Goethe",
            "Kirch",
            "Garten",
            "Berg",
            "Wald",
            "Rosen",
            "Friedrich",
            "Mozart",
            "Eichen",
            "Schloss",
            "Mühlen",
            "Sonnen",
        ]
    )
    kind = r.choice(["straße", "strasse", "str.", "weg", "gasse", "allee", "platz", "ring", "damm", "ufer"])
    num = f"{r.randint(1, 140)}{r.choice(['', '', '', 'a', 'b'])}"
    if r.random() < 0.2:
        street = r.choice(["Am Markt", "An der Alster", "Unter den Linden", "Auf dem Berg", "Im Winkel", "Zur Mühle"])
        core = street.split(" ", 1)[1]
    elif r.random() < 0.2:
        street = (
            r.choice(["Berliner", "Münchner", "Frankfurter", "Kölner", "Hamburger"])
            + " "
            + r.choice(["Straße", "Allee", "Platz", "Ring"])
        )
        core = street
    else:
        street = stem + kind
        core = street
    tail = r.choice(
        [
            "",
            f", {r.randint(10115, 14199)} Berlin",
            f", {r.randint(80331, 81929)} München",
            f", {r.randint(1010, 1230)} Wien",
            f", {r.randint(8001, 8099)} Zürich",
        ]
    )
    return f"{street} {num}{tail}", street, core


def _addr_nl_nordic(r):
    style = r.choice(["nl", "sv", "da", "no", "fi"])
    if style == "nl":
        street = r.choice(
            ["Kerk", "Dorps", "Molen", "Prinsen", "Keizers", "Heeren", "Oude", "Nieuwe", "Lange", "Stations"]
        ) + r.choice(["straat", "weg", "gracht", "laan", "plein", "kade", "dijk", "singel"])
        tail = r.choice(
            [
                "",
                f", {r.randint(1011, 9999)} {r.choice('ABCDEFGHJKLMNPRSTVWXZ')}{r.choice('ABCDEFGHJKLMNPRSTVWXZ')} Amsterdam",
                f"-{r.randint(1, 3)}",
            ]
        )
    elif style == "sv":
        street = r.choice(["Stor", "Drottning", "Kungs", "Skol", "Kyrko", "Hamn", "Öster", "Väster"]) + r.choice(
            ["gatan", "vägen", "torget", "gränd"]
        )
        tail = r.choice(
            [
                "",
                f", {r.randint(111, 199)} {r.randint(10, 99)} Stockholm",
                f", {r.randint(411, 418)} {r.randint(10, 99)} Göteborg",
            ]
        )
    elif style == "da":
        street = r.choice(["Nørre", "Vester", "Øster", "Strand", "Gammel", "Ny"]) + r.choice(
            ["gade", "vej", "brogade", "torv"]
        )
        tail = r.choice(["", f", {r.randint(1050, 2990)} København", f", {r.randint(1, 5)}. th."])
    elif style == "no":
        street = r.choice(
            ["Karl Johans gate", "Storgata", "Thereses gate", "Bogstadveien", "Kirkeveien", "Trondheimsveien"]
        )
        tail = r.choice(["", f", {r.randint(150, 1295):04d} Oslo"])
    else:
        street = r.choice(
            ["Mannerheimintie", "Aleksanterinkatu", "Hämeentie", "Kauppakatu", "Rautatienkatu", "Koulukatu"]
        )
        tail = r.choice(["", f" A {r.randint(1, 40)}", f", 00{r.randint(100, 990)} Helsinki"])
    return f"{street} {r.randint(1, 260)}{tail}", street, street


def _addr_anglo(r):
    name = r.choice(
        [
            "Awolowo",
            "Adeola Odeku",
            "Ngong",
            "Moi",
            "Jomo Kenyatta",
            "Rivonia",
            "Jan Smuts",
            "Marine Drive",
            "Linking",
            "Brigade",
            "Anna Salai",
            "Chowringhee",
            "Kwame Nkrumah",
            "Oxford",
            "Admiralty",
            "Ring",
            "Bishop Gate",
            "Tamarind",
            "Kingfisher",
            "Ponsonby",
            "Tay Son",
            "Orchard",
        ]
    )
    kind = r.choice(
        [
            "Road",
            "Street",
            "Way",
            "Crescent",
            "Close",
            "Avenue",
            "Mews",
            "Rise",
            "Gardens",
            "Terrace",
            "Row",
            "Quay",
            "Grove",
            "Hill",
            "Walk",
            "Parade",
            "Esplanade",
            "Highway",
            "Lane",
        ]
    )
    num = r.randint(1, 480)
    lead = r.choice(
        [
            "",
            "",
            "",
            f"Flat {r.randint(1, 30)}, ",
            f"Plot {r.randint(1, 900)}, ",
            f"Unit {r.randint(1, 20)}/",
            f"Apt {r.randint(2, 40)}B, ",
            f"House No. {r.randint(1, 99)}, ",
        ]
    )
    numtxt = f"{num}{r.choice(['', '', 'A', 'B'])}"
    core_line = f"{lead}{numtxt} {name} {kind}"
    tail = r.choice(
        [
            "",
            ", Ikeja, Lagos",
            ", Westlands, Nairobi",
            ", Sandton 2196",
            ", Bandra West, Mumbai 400050",
            ", Ponsonby, Auckland 1011",
            ", London EC2M 4NR",
            ", Accra",
            ", Kolkata 700016",
            ", Singapore 238858",
        ]
    )
    return core_line + tail, f"{name} {kind}", name


def _addr_other(r):
    style = r.choice(["pl", "cz", "tr", "jp", "ru", "mx"])
    if style == "pl":
        kind = r.choice(["ul.", "al.", "pl.", "ulica"])
        name = r.choice(["Marszałkowska", "Piotrkowska", "Długa", "Floriańska", "Mickiewicza", "Jana Pawła II"])
        return (
            f"{kind} {name} {r.randint(1, 200)}/{r.randint(1, 40)}, {r.randint(0, 99):02d}-{r.randint(100, 999)} Warszawa",
            f"{kind} {name}",
            name,
        )
    if style == "cz":
        name = r.choice(["Vodičkova", "Národní", "Karlova", "Na Příkopě", "Vinohradská"])
        return f"{name} {r.randint(1, 900)}/{r.randint(1, 40)}, Praha {r.randint(1, 10)}", name, name
    if style == "tr":
        name = r.choice(["Atatürk", "İstiklal", "Bağdat", "Cumhuriyet", "Halaskargazi"])
        kind = r.choice(["Caddesi", "Cad.", "Sokak", "Sok.", "Bulvarı"])
        return f"{name} {kind} No: {r.randint(1, 300)} Daire {r.randint(1, 30)}, Kadıköy", f"{name} {kind}", name
    if style == "jp":
        ward = r.choice(["Shibuya", "Minato", "Shinjuku", "Meguro", "Setagaya", "Chuo"])
        return (
            f"{r.randint(1, 9)}-{r.randint(1, 30)}-{r.randint(1, 20)} {r.choice(['Jingumae', 'Roppongi', 'Nishi-Shinjuku', 'Kamimeguro', 'Ginza'])}, {ward}-ku, Tokyo",
            f"{ward}-ku",
            None,
        )
    if style == "ru":
        name = r.choice(["Tverskaya", "Arbat", "Nevsky Prospekt", "Lenina", "Pushkinskaya"])
        return f"ul. {name}, d. {r.randint(1, 120)}, kv. {r.randint(1, 300)}", f"ul. {name}", name
    name = r.choice(["Insurgentes Sur", "Paseo de la Reforma", "Álvaro Obregón", "Madero", "Revolución"])
    return (
        f"Av. {name} {r.randint(1, 3000)}, Col. {r.choice(['Roma Norte', 'Condesa', 'Del Valle', 'Polanco'])}, CDMX",
        f"Av. {name}",
        name,
    )


ADDRESS_STYLES = (_addr_es, _addr_fr, _addr_it, _addr_pt, _addr_de, _addr_nl_nordic, _addr_anglo, _addr_other)

# ---- numbers ---------------------------------------------------------------------------------------
IBAN_LENGTHS = {
    "NO": 15,
    "BE": 16,
    "DK": 18,
    "FI": 18,
    "NL": 18,
    "AT": 20,
    "CH": 21,
    "LU": 20,
    "IE": 22,
    "GB": 22,
    "DE": 22,
    "SE": 24,
    "ES": 24,
    "RO": 24,
    "PK": 24,
    "SA": 24,
    "PT": 25,
    "TR": 26,
    "FR": 27,
    "IT": 27,
    "PL": 28,
    "HU": 28,
    "CY": 28,
    "AE": 23,
    "BR": 29,
    "MU": 30,
    "QA": 29,
}


def _mod97_checked(country: str, bban: str) -> str:
    num = "".join(str(int(c, 36)) for c in (bban + country + "00"))
    return f"{country}{98 - int(num) % 97:02d}{bban}"


def _iban(r: random.Random) -> str:
    country = r.choice(list(IBAN_LENGTHS))
    n = IBAN_LENGTHS[country] - 4
    letters = 4 if country in ("GB", "IE", "NL") else (1 if country in ("IT",) else 0)
    bban = "".join(r.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(letters)) + "".join(
        r.choice("0123456789") for _ in range(n - letters)
    )
    if country == "BR":
        bban = bban[:-2] + "C1"
    raw = _mod97_checked(country, bban)
    style = r.random()
    if style < 0.45:
        return " ".join(raw[i : i + 4] for i in range(0, len(raw), 4))
    if style < 0.9:
        return raw
    return "-".join(raw[i : i + 4] for i in range(0, len(raw), 4)) if r.random() < 0.3 else raw


def _luhn_finish(body: str) -> str:
    for d in "0123456789":
        s, alt = 0, False
        for ch in reversed(body + d):
            v = int(ch)
            if alt:
                v = v * 2 - 9 if v * 2 > 9 else v * 2
            s += v
            alt = not alt
        if s % 10 == 0:
            return body + d
    raise AssertionError


def _card(r: random.Random) -> str:
    brand = r.choice(["visa16", "mc2", "mc5", "amex", "discover", "jcb", "diners", "unionpay", "maestro19"])
    prefix, length = {
        "visa16": ("4", 16),
        "mc2": (str(r.randint(2221, 2720)), 16),
        "mc5": (str(r.randint(51, 55)), 16),
        "amex": (r.choice(["34", "37"]), 15),
        "discover": ("6011", 16),
        "jcb": (str(r.randint(3528, 3589)), 16),
        "diners": (r.choice(["36", "300", "305"]), 14),
        "unionpay": ("62" + str(r.randint(10, 99)), 16),
        "maestro19": ("6759", 19),
    }[brand]
    d = _luhn_finish(prefix + "".join(r.choice("0123456789") for _ in range(length - len(prefix) - 1)))
    if length == 15:
        groups = [d[:4], d[4:10], d[10:]]
    elif length == 14:
        groups = [d[:4], d[4:10], d[10:]]
    else:
        groups = [d[i : i + 4] for i in range(0, length, 4)]
    sep = r.choice([" ", " ", "-", "", " "])
    return sep.join(groups)


def _phone(r: random.Random) -> str:
    f = r.choice(
        [
            lambda: (
                f"+234 {r.choice(['803', '806', '813', '905', '701'])} {r.randint(100, 999)} {r.randint(1000, 9999)}"
            ),
            lambda: f"+254 7{r.randint(10, 99)} {r.randint(100, 999)} {r.randint(100, 999)}",
            lambda: f"+27 {r.randint(60, 84)} {r.randint(100, 999)} {r.randint(1000, 9999)}",
            lambda: f"+91 {r.randint(70000, 99999)} {r.randint(10000, 99999)}",
            lambda: f"+91-{r.randint(7000000000, 9999999999)}",
            lambda: f"+86 1{r.randint(30, 89)} {r.randint(1000, 9999)} {r.randint(1000, 9999)}",
            lambda: f"+81 90-{r.randint(1000, 9999)}-{r.randint(1000, 9999)}",
            lambda: f"+82 10-{r.randint(1000, 9999)}-{r.randint(1000, 9999)}",
            lambda: f"+33 6 {r.randint(10, 99)} {r.randint(10, 99)} {r.randint(10, 99)} {r.randint(10, 99)}",
            lambda: f"+49 (0) {r.randint(150, 179)} {r.randint(1000000, 99999999)}",
            lambda: f"+44 7{r.randint(100, 999)} {r.randint(100000, 999999)}",
            lambda: f"+971 50 {r.randint(100, 999)} {r.randint(1000, 9999)}",
            lambda: f"+55 11 9{r.randint(1000, 9999)}-{r.randint(1000, 9999)}",
            lambda: f"+1 ({r.randint(201, 989)}) {r.randint(200, 999)}-{r.randint(1000, 9999)}",
            lambda: f"{r.randint(201, 989)}-{r.randint(200, 999)}-{r.randint(1000, 9999)}",
            lambda: f"({r.randint(201, 989)}) {r.randint(200, 999)} {r.randint(1000, 9999)}",
            lambda: f"0044 20 {r.randint(7000, 8999)} {r.randint(1000, 9999)}",
            lambda: f"+61 4{r.randint(10, 99)} {r.randint(100, 999)} {r.randint(100, 999)}",
            lambda: f"+353 8{r.randint(3, 9)} {r.randint(100, 999)} {r.randint(1000, 9999)}",
        ]
    )
    return f()


def _ssn(r: random.Random) -> str:
    area = r.choice([a for a in range(1, 900) if a != 666])
    a, g, s = f"{area:03d}", f"{r.randint(1, 99):02d}", f"{r.randint(1, 9999):04d}"
    return r.choice([f"{a}-{g}-{s}", f"{a}-{g}-{s}", f"{a} {g} {s}", f"{a}.{g}.{s}"])


def _ip(r: random.Random) -> str:
    x = r.random()
    if x < 0.7:
        first = r.choice(
            [r.randint(1, 9), r.randint(11, 126), r.randint(128, 171), r.randint(173, 191), r.randint(193, 223)]
        )
        return f"{first}.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(1, 254)}"
    g = [f"{r.randint(0, 0xFFFF):x}" for _ in range(8)]
    return r.choice(
        [":".join(g), f"2a02:{g[1]}:{g[2]}::{g[3]}", f"2600:{g[1]}:{g[2]}:{g[3]}::1", f"fe80::{g[4]}:{g[5]}"]
    )


def _email(r: random.Random, person: str | None = None) -> str:
    base = (
        person or f"{r.choice(sorted(_all_given()))} {r.choice(sorted(_all_family()))}"
    )  # sorted: sets vary per process
    words = [p for p in re.split(r"[\s'-]+", _ascii_fold(base).lower()) if p]
    parts = [p for p in words if p not in PARTICLES] or words
    first, last = parts[0], parts[-1]
    local = r.choice(
        [
            f"{first}.{last}",
            f"{first}_{last}{r.randint(1, 99)}",
            f"{first[0]}{last}",
            f"{last}.{first[0]}",
            f"{first}{r.randint(1970, 2005)}",
            f"{first}.{last}+support",
        ]
    )
    domain = r.choice(
        [
            "yahoo.co.uk",
            "hotmail.fr",
            "web.de",
            "mail.ru",
            "qq.com",
            "naver.com",
            "rediffmail.com",
            "gmx.at",
            "libero.it",
            "uol.com.br",
            "telkomsa.net",
            "company.co.ke",
            "uni-heidelberg.de",
            "outlook.jp",
            "me.com",
        ]
    )
    return f"{local}@{domain}"


def _ascii_fold(s: str) -> str:
    s = s.replace("ß", "ss").replace("ø", "o").replace("Ø", "O").replace("ł", "l").replace("Ł", "L").replace("ı", "i")
    s = s.replace("æ", "ae").replace("þ", "th").replace("Þ", "Th").replace("ð", "d").replace("đ", "d")
    return unicodedata.normalize("NFKD", s).encode("ascii", "ignore").decode()


def _all_given() -> set[str]:
    return {w for v in GIVEN.values() for w in v.split()}


def _all_family() -> set[str]:
    return {w for v in FAMILY.values() for w in v.split()}


def _person(r: random.Random) -> tuple[str, str]:
    """(name as written, shape) for a person."""
    x = r.random()
    if x < 0.12:
        return r.choice(COMPOSED), "composed"
    tradition = r.choice(list(GIVEN))
    given = r.choice(GIVEN[tradition].split())
    fam_key = tradition if tradition in FAMILY else r.choice(list(FAMILY))
    family = r.choice(FAMILY[fam_key].split())
    if tradition in ("chinese", "korean", "vietnamese", "japanese") and r.random() < 0.5:
        return f"{family} {given}", "family-first"
    if x < 0.22:
        return given, "given-only"
    if x < 0.28:
        return f"{given} {r.choice(GIVEN[r.choice(list(GIVEN))].split())} {family}", "three-part"
    return f"{given} {family}", "given-family"


# ---- phrasings -------------------------------------------------------------------------------------
# {v} = the value. Written for this corpus: support chats of a bank, a courier, a telco, a marketplace.
PHRASES = {
    "PERSON": (
        "Account holder: {v}",
        "name on the account is {v}",
        "The holder of this card is {v}.",
        "Name on the account: {v}",
        "hello, {v} here, I can't log in",
        "Good morning, I am {v} and I ordered a kettle last week",
        "Dear support, my name is {v}.",
        "it's {v} speaking, we talked yesterday",
        "Signed, {v}",
        "Best wishes,\n{v}",
        "Many thanks\n{v}",
        "Warm regards — {v}",
        "Cheers, {v}",
        "Customer: {v}",
        "Full name: {v}",
        "the parcel is addressed to {v}",
        "please deliver to {v} at the reception",
        "my daughter {v} will collect it",
        "my husband {v} opened the account",
        "you can speak to my brother {v} if I'm not available",
        "the beneficiary is {v}",
        "transfer to {v} failed twice",
        "I'm writing on behalf of {v}",
        "the courier said {v} signed for it",
        "Recipient name: {v}",
        "contact person {v}",
        "Ordered by {v}",
        "it was registered under the name {v}",
        "Your agent {v} promised me a call back",
        "spoke to {v} from your team yesterday",
        "{v} is the authorised user on my plan",
        "Hi team, {v} again.",
        "Payee: {v}",
        "passenger {v}, booking ref QX7T2",
        "Mr {v}'s order never came",
        "Dr. {v} needs the invoice",
        "Att: {v}",
        "From: {v}",
    ),
    "STREET_ADDRESS": (
        "Delivery address: {v}",
        "I live at {v}",
        "please send it to {v}",
        "my new address is {v}",
        "Ship to {v}",
        "the courier went to {v} instead",
        "Billing address — {v}",
        "address on file should be {v}",
        "we moved to {v} in March",
        "can you update my address to {v}?",
        "it was delivered to {v} but nobody was home",
        "Pickup from {v}",
        "Address: {v}",
        "our office is at {v}",
        "the store at {v} refused the return",
    ),
    "EMAIL": (
        "my mail is {v}",
        "E-mail: {v}",
        "send the invoice to {v} please",
        "Contact: {v}",
        "login email {v} doesn't work",
        "you emailed {v} but that's my old address",
        "cc {v} on the reply",
    ),
    "PHONE": (
        "my number is {v}",
        "Mobile: {v}",
        "call me on {v}",
        "WhatsApp {v}",
        "tel. {v}",
        "reach me at {v} after 6",
        "the driver should ring {v}",
        "Phone number {v}",
        "my cell {v} isn't receiving the OTP",
    ),
    "CREDIT_CARD": (
        "card ending? the full number is {v}",
        "Card: {v}",
        "I was charged on {v} twice",
        "my card {v} was declined",
        "charge it to {v}, expiry 04/29",
        "payment card number {v}",
    ),
    "IBAN": (
        "IBAN {v}",
        "refund to my account {v} please",
        "Bank account (IBAN): {v}",
        "the transfer came from {v}",
        "my iban is {v}",
        "Account: {v}",
    ),
    "US_SSN": (
        "SSN {v}",
        "my social is {v}",
        "Social Security No. {v}",
        "tax id (ssn): {v}",
        "for the credit check, SSN: {v}",
    ),
    "IP_ADDRESS": (
        "my IP is {v}",
        "blocked from {v}",
        "the login came from {v}, not me",
        "IP address: {v}",
        "router WAN address {v}",
        "access log shows {v}",
    ),
}
# Neutral chat around the values: no personal data, and none of the name or street words above.
FILLER = (
    "I need help with my order.",
    "The app keeps crashing when I open the payments tab.",
    "Is there any update?",
    "I have been waiting for 3 weeks now.",
    "Please fix this as soon as possible.",
    "Thanks for your patience.",
    "The tracking page says it is stuck in transit.",
    "My plan renews on the 14th and I want to cancel before that.",
    "I paid with Visa through the website.",
    "The package from Amazon arrived damaged.",
    "I'm travelling next week.",
    "The refund hasn't shown up in my statement.",
    "Can you escalate this?",
    "It worked fine on my Samsung phone yesterday.",
    "The invoice number is INV-20931.",
    "Order #A78812 is the one I mean.",
    "Netflix charged me but I cancelled.",
    "I tried resetting the router but it did not help.",
    "Could you check whether the courier attempted delivery?",
    "I would like a replacement, not a refund.",
    "This is the third time I'm contacting you.",
    "OK, I will wait.",
)
SYSTEMS = (
    "You are the virtual assistant of Meridian Bank. Be concise, verify identity before discussing balances, never reveal internal notes.",
    "You are a courier support agent for SwiftParcel. Answer in the customer's language. Offer redelivery or pickup options.",
    "You help customers of Lumen Mobile with billing, roaming and SIM issues. Escalate fraud reports to a human.",
    "You are the help desk of Bazaarly, an online marketplace. Refunds up to 50 EUR may be approved without escalation.",
)
ASSISTANT = (
    "Thanks, I have noted that.",
    "Let me look into it.",
    "Could you confirm the details, please?",
    "I've opened a ticket for you.",
    "Understood. One moment while I check.",
)


@dataclass
class PlantedValue:
    line: int
    kind: str
    value: str
    identifiers: list[str] = field(default_factory=list)
    shape: str = ""


def _identifiers(kind: str, value: str, extra: tuple[str | None, ...] = ()) -> list[str]:
    ids = [value]
    if kind == "PERSON":
        for tok in value.split():
            t = tok.strip(".,")
            if t.lower() not in PARTICLES and len(t) >= 3 and t not in TITLES:
                ids.append(t)
    elif kind == "STREET_ADDRESS":
        ids += [e for e in extra if e and len(e) >= 4]
    elif kind in ("CREDIT_CARD", "IBAN", "PHONE", "US_SSN"):
        compact = re.sub(r"[^0-9A-Za-z]", "", value)
        if kind == "PHONE":
            compact = compact[-8:]  # the subscriber part is what identifies a line
        ids.append(compact)
    return list(dict.fromkeys(ids))


def _value(kind: str, r: random.Random) -> tuple[str, list[str], str]:
    if kind == "PERSON":
        v, shape = _person(r)
        return v, _identifiers(kind, v), shape
    if kind == "STREET_ADDRESS":
        style = r.choice(ADDRESS_STYLES)
        v, line, core = style(r)
        return v, _identifiers(kind, v, (line, core)), style.__name__
    gen = {"EMAIL": _email, "PHONE": _phone, "CREDIT_CARD": _card, "IBAN": _iban, "US_SSN": _ssn, "IP_ADDRESS": _ip}[
        kind
    ]
    v = gen(r)
    return v, _identifiers(kind, v), kind.lower()


def _casing(kind: str, value: str, phrase: str, r: random.Random) -> str:
    """People type names in forms in capitals, and in chats in lower case, now and then."""
    if kind != "PERSON":
        return value
    label = phrase.split("{v}")[0].rstrip().endswith(":")
    if label and r.random() < 0.08:
        return value.upper()
    if phrase.lower().startswith(("hello", "it's", "good morning", "dear support")) and r.random() < 0.08:
        return value.lower()
    return value


def generate(
    n: int, seed: int = 7, values_per_request: tuple[int, int] = (2, 4), clean_share: float = 0.05
) -> tuple[list[str], list[PlantedValue]]:
    """``n`` request-log lines (support chats, several planted values each; ``clean_share`` of the
    requests carry none, to count over-redaction) and the planted values with their identifiers."""
    r = random.Random(seed)
    lines: list[str] = []
    planted: list[PlantedValue] = []
    t = 1_767_225_600.0
    k = 0
    for i in range(1, n + 1):
        t += r.expovariate(2.0)
        turns: list[str] = [" ".join(r.sample(FILLER, r.randint(1, 3))) for _ in range(r.randint(1, 3))]
        values: list[PlantedValue] = []
        tool_args = None
        if r.random() >= clean_share:
            for _ in range(r.randint(*values_per_request)):
                kind = (
                    KINDS[k % len(KINDS)]
                    if r.random() < 0.6
                    else r.choice(("PERSON", "STREET_ADDRESS", "PERSON", "STREET_ADDRESS", "EMAIL", "PHONE"))
                )
                k += 1
                value, ids, shape = _value(kind, r)
                phrase = r.choice(PHRASES[kind])
                written = _casing(kind, value, phrase, r)
                if written != value:
                    ids = list(
                        dict.fromkeys([written] + [(w.upper() if written.isupper() else w.lower()) for w in ids])
                    )
                sentence = phrase.format(v=written)
                j = r.randrange(len(turns))
                turns[j] = f"{sentence} {turns[j]}" if r.random() < 0.5 else f"{turns[j]} {sentence}"
                values.append(PlantedValue(i, kind, written, ids, shape))
            if r.random() < 0.25:  # a form-like block with a person, an address and a phone
                who, _, shape = _value("PERSON", r)
                where, where_ids, wshape = _value("STREET_ADDRESS", r)
                tel = _phone(r)
                turns.append(f"Name: {who}\nAddress: {where}\nPhone: {tel}")
                values += [
                    PlantedValue(i, "PERSON", who, _identifiers("PERSON", who), shape),
                    PlantedValue(i, "STREET_ADDRESS", where, where_ids, wshape),
                    PlantedValue(i, "PHONE", tel, _identifiers("PHONE", tel), "phone"),
                ]
            if r.random() < 0.2:  # the agent called a tool with the customer's details
                who, _, shape = _value("PERSON", r)
                where, where_ids, wshape = _value("STREET_ADDRESS", r)
                tool_args = json.dumps(
                    {"recipient": who, "delivery_address": where, "priority": r.choice(["standard", "express"])},
                    ensure_ascii=False,
                )
                values += [
                    PlantedValue(i, "PERSON", who, _identifiers("PERSON", who), shape),
                    PlantedValue(i, "STREET_ADDRESS", where, where_ids, wshape),
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
                            "function": {"name": "update_shipment", "arguments": tool_args},
                        }
                    ],
                }
            )
            messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": '{"status": "ok"}'})
        body = {"model": "support", "messages": messages, "max_tokens": r.choice([64, 128, 256]), "temperature": 0.3}
        out_tokens = r.randint(16, 128)
        lines.append(
            json.dumps(
                {"timestamp": round(t, 3), "request": body, "usage": {"completion_tokens": out_tokens}},
                ensure_ascii=False,
            )
        )
        planted += values
    _check_no_collisions(planted)
    return lines, planted


def _check_no_collisions(planted: list[PlantedValue]) -> None:
    """No identifier may occur in the corpus's own fixed text, or a leak would be a false alarm."""
    fixed = (
        " ".join(FILLER + SYSTEMS + ASSISTANT + tuple(p for ps in PHRASES.values() for p in ps))
        + " update_shipment recipient delivery_address standard express support status"
    )
    for p in planted:
        for ident in p.identifiers[1:]:
            if re.search(rf"(?<!\w){re.escape(ident)}(?!\w)", fixed):
                raise AssertionError(f"identifier {ident!r} of a {p.kind} occurs in the corpus's own text")


def leaked(p: PlantedValue, text: str) -> bool:
    """Whether any identifier of ``p`` survives in ``text`` (whole words; digit strings compacted)."""
    for ident in p.identifiers:
        if p.kind in ("CREDIT_CARD", "IBAN", "PHONE", "US_SSN") and ident.isalnum() and ident != p.value:
            if ident in re.sub(r"[^0-9A-Za-z]", "", text):
                return True
        elif re.search(rf"(?<!\w){re.escape(ident)}(?!\w)", text):
            return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    lines, planted = generate(args.lines, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "heldout_logs.jsonl").write_text("\n".join(lines) + "\n")
    (args.out / "heldout_planted.json").write_text(
        json.dumps([asdict(p) for p in planted], ensure_ascii=False, indent=0)
    )
    by = {k: sum(p.kind == k for p in planted) for k in KINDS}
    print(f"{len(lines)} lines, {len(planted)} planted values: {by}")


if __name__ == "__main__":
    main()
