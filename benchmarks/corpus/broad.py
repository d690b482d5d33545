# ruff: noqa: E501  (templates and value generators read best as one line each)
"""A broad labelled-corpus generator for redaction: many locales and formats, names of many origins, secrets in
every config syntax, and hard negatives that must survive.

    generate("tuned", n=1500, seed=1)     # the configuration the engine was tuned on (Faker names)
    generate("heldout", n=1500, seed=2)   # never tuned on: other templates, key names and formats, mimesis names
    public_corpus(n=1500, seed=3)         # presidio-evaluator's templates and FakeNameGenerator people, if installed

Records have the shape `evaluation.score` reads: {"id", "kind", "text", "spans": [{start, end, type, group}],
"negatives": [{start, end, type}]}. Offsets are exact, also inside JSON-escaped bodies. Every value is synthetic.
"""

from __future__ import annotations

import base64
import csv
import functools
import importlib
import json
import pkgutil
import random
import re
import string
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import phonenumbers

GROUPS = {
    "EMAIL": "contact", "PHONE": "contact", "ADDRESS": "contact",
    "CREDIT_CARD": "financial", "IBAN": "financial", "SSN": "financial",
    "IP_ADDRESS": "network",
    "SECRET": "credentials", "PASSWORD": "credentials", "PRIVATE_KEY": "credentials", "JWT": "credentials",
    "CLOUD_KEY": "credentials",
    "PERSON": "person",
}  # fmt: skip

A62 = string.ascii_letters + string.digits
HEX = "0123456789abcdef"


# --------------------------------------------------------------------------- vocabularies


def _latin(name: str) -> bool:
    return (
        bool(name)
        and all(c in "-' " or (c.isalpha() and "LATIN" in unicodedata.name(c, "")) for c in name)
        and name[0].isupper()
    )


@functools.cache
def faker_names() -> tuple[list[str], list[str]]:
    """Latin-script given names and surnames of every Faker locale (the tuned vocabulary)."""
    import faker.providers.person as person

    first: set[str] = set()
    last: set[str] = set()
    for module in pkgutil.iter_modules(person.__path__):
        provider = importlib.import_module(f"faker.providers.person.{module.name}").Provider
        for attr in dir(provider):
            value = getattr(provider, attr)
            if not isinstance(value, dict | list | tuple):
                continue
            target = first if attr.startswith("first_") else last if attr.startswith("last_") else None
            if target is not None:
                target |= {n for n in value if isinstance(n, str) and _latin(n) and " " not in n}
    return sorted(first), sorted(last)


@functools.cache
def mimesis_names() -> tuple[list[str], list[str]]:
    """Latin-script given names and surnames of every mimesis locale (the held-out vocabulary)."""
    import mimesis

    root = Path(mimesis.__file__).parent / "datasets"
    first: set[str] = set()
    last: set[str] = set()
    for path in root.glob("*/person.json"):
        data = json.loads(path.read_text(encoding="utf-8"))
        names = data.get("names", {})
        for values in names.values() if isinstance(names, dict) else [names]:
            first |= {n for n in values if isinstance(n, str) and _latin(n) and " " not in n}
        surnames = data.get("surnames", [])
        for values in surnames.values() if isinstance(surnames, dict) else [surnames]:
            last |= {n for n in values if isinstance(n, str) and _latin(n) and " " not in n}
    return sorted(first), sorted(last)


# --------------------------------------------------------------------------- value generators


class Values:
    """Generates labelled values; `config` picks formats and vocabularies."""

    def __init__(self, config: str, rng: random.Random) -> None:
        self.config, self.r = config, rng
        self.first, self.last = faker_names() if config == "tuned" else mimesis_names()
        self.regions = TUNED_REGIONS if config == "tuned" else HELDOUT_REGIONS

    def rs(self, alphabet: str, n: int) -> str:
        return "".join(self.r.choice(alphabet) for _ in range(n))

    # ---- people
    def first_name(self) -> str:
        return self.r.choice(self.first)

    def last_name(self) -> str:
        return self.r.choice(self.last)

    def person(self) -> str:
        r = self.r
        if r.random() < 0.12:
            return f"{self.first_name()} {self.first_name()} {self.last_name()}"
        if r.random() < 0.08:
            return f"{self.first_name()} {self.last_name()}-{self.last_name()}"
        return f"{self.first_name()} {self.last_name()}"

    # ---- contact
    def email(self) -> str:
        r = self.r
        first, last = (_ascii(self.first_name()).lower(), _ascii(self.last_name()).lower())
        local = r.choice(
            [
                f"{first}.{last}",
                f"{first[0]}{last}",
                f"{first}_{last}{r.randint(1, 99)}",
                f"{first}+support",
                f"{last}.{first[0]}",
            ]
        )
        tld = r.choice(
            ["com", "de", "fr", "co.uk", "com.br", "es", "it", "nl", "in", "jp", "com.au", "io", "org", "net"]
        )
        domain = r.choice(["mail", "example", "globex", "posteo", "kunden-service", "initech", "corp-mail"])
        return f"{local}@{domain}.{tld}"

    def phone(self) -> str:
        r = self.r
        region = r.choice(self.regions)
        number = _random_valid_number(region, r)
        styles = ["national", "national", "international", "e164"]
        if self.config == "heldout":
            styles += ["00", "paren_trunk"]
        style = r.choice(styles)
        if style == "e164":
            return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
        if style in ("international", "00", "paren_trunk"):
            text = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.INTERNATIONAL)
            if style == "00":
                text = "00" + text[1:]
            elif style == "paren_trunk" and region in ("GB", "DE", "AT", "CH", "IT", "NL", "BE", "FR"):
                cc, _, rest = text.partition(" ")
                text = f"{cc} (0){rest}" if region != "IT" else text
        else:
            text = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.NATIONAL)
        sep = r.choice([" ", " ", ".", "-", "/", ""]) if style == "national" else r.choice([" ", " ", "-", "."])
        if sep != " ":
            head, space, rest = text.partition(" ") if sep == "/" else ("", "", text)
            text = head + (sep if space else "") + (rest.replace(" ", "" if sep == "/" else sep))
        return text.replace("--", "-")

    def ssn(self) -> str:
        r = self.r
        area = r.choice([a for a in range(1, 900) if a != 666])
        sep = r.choice(["-", " ", "-", " "] + ([".", " - "] if self.config == "heldout" else []))
        return f"{area:03d}{sep}{r.randint(1, 99):02d}{sep}{r.randint(1, 9999):04d}"

    def card(self) -> str:
        r = self.r
        prefix, n, groups = r.choice(
            [("4", 16, (4, 4, 4, 4)), ("51", 16, (4, 4, 4, 4)), ("2720", 16, (4, 4, 4, 4)), ("37", 15, (4, 6, 5)),
             ("6011", 16, (4, 4, 4, 4)), ("3530", 16, (4, 4, 4, 4)), ("36", 14, (4, 6, 4))]
        )  # fmt: skip
        body = prefix + self.rs(string.digits, n - len(prefix) - 1)
        digits = body + _luhn_digit(body)
        sep = r.choice(["", " ", "-"])
        out, pos = [], 0
        for g in groups:
            out.append(digits[pos : pos + g])
            pos += g
        return sep.join(out)

    def iban(self) -> str:
        country, fmt = self.r.choice(IBAN_FORMATS)
        bban = "".join(
            self.rs(string.ascii_uppercase, int(n)) if t == "a" else self.rs(string.digits, int(n))
            for n, t in re.findall(r"(\d+)([an])", fmt)
        )
        numeric = "".join(str(int(c, 36)) for c in bban + country + "00")
        raw = f"{country}{98 - int(numeric) % 97:02d}{bban}"
        return " ".join(raw[i : i + 4] for i in range(0, len(raw), 4)) if self.r.random() < 0.6 else raw

    def ipv4(self) -> str:
        r = self.r
        first = r.choice([3, 8, 13, 18, 23, 31, 34, 44, 52, 62, 77, 81, 89, 91, 104, 121, 142, 151, 185, 193, 203, 212])
        return f"{first}.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(1, 254)}"

    def ipv6(self) -> str:
        prefix = self.r.choice(["2001:4860", "2600:1f18", "2a00:1450", "2606:4700", "2a03:2880", "2a01:4f8"])
        groups = [f"{self.r.randint(1, 0xFFFF):x}" for _ in range(self.r.choice([2, 6]))]
        return prefix + (":" + ":".join(groups) if len(groups) == 6 else "::" + ":".join(groups))

    def address(self) -> str:
        r = self.r
        n = r.randint(1, 2400)
        street = self.last_name()
        forms = ADDRESS_FORMS if self.config == "tuned" else HELDOUT_ADDRESS_FORMS
        return r.choice(forms).format(n=n, s=street, s2=self.last_name())

    # ---- secrets
    def password(self) -> str:
        r = self.r
        word = _ascii(r.choice(self.last)).capitalize()
        return r.choice([
            f"{word}{r.randint(1, 2025)}{r.choice('!#$%&*?@')}", f"{self.rs(A62 + '!#%&*', r.randint(10, 18))}",
            f"{word.lower()}-{_ascii(r.choice(self.first)).lower()}-{r.randint(10, 99)}", f"{r.choice('!#$')}{word}{r.randint(100, 999)}x",
        ])  # fmt: skip

    def hex_token(self) -> str:
        return self.rs(HEX, self.r.choice([32, 40, 48, 64]))

    def b64_token(self) -> str:
        raw = base64.b64encode(
            bytes(self.r.randrange(256) for _ in range(self.r.choice([18, 24, 32, 33, 48])))
        ).decode()
        return raw if self.r.random() < 0.7 else raw.rstrip("=")

    def token(self) -> str:
        return self.r.choice([self.hex_token, self.b64_token, lambda: self.rs(A62, self.r.randint(20, 40))])()

    def jwt(self) -> str:
        def part(obj: dict[str, Any]) -> str:
            return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

        sig = base64.urlsafe_b64encode(bytes(self.r.randrange(256) for _ in range(32))).rstrip(b"=").decode()
        return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part({'sub': str(self.r.randint(1, 10**6)), 'iat': 1700000000})}.{sig}"

    def cloud_key(self) -> str:
        r = self.r
        return r.choice(
            [
                lambda: "AKIA" + self.rs(string.ascii_uppercase + "234567", 16),
                lambda: "AIza" + self.rs(A62 + "-_", 35),
                lambda: "ghp_" + self.rs(A62, 36),
                lambda: "xoxb-" + "-".join(self.rs(string.digits, 12) for _ in range(2)) + "-" + self.rs(A62, 24),
                lambda: "sk_live_" + self.rs(A62, 24),
                lambda: "glpat-" + self.rs(A62 + "-_", 20),
                lambda: "npm_" + self.rs(A62, 36),
                lambda: "SG." + self.rs(A62 + "-_", 22) + "." + self.rs(A62 + "-_", 43),
            ]
        )()

    def pem(self) -> str:
        kind = self.r.choice(
            ["RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY", "ENCRYPTED PRIVATE KEY"]
        )
        body = "\n".join(self.rs(A62 + "+/", 64) for _ in range(self.r.randint(3, 8)))
        return f"-----BEGIN {kind}-----\n{body}\n{self.rs(A62 + '+/', 20)}==\n-----END {kind}-----"

    # ---- hard negatives
    def negative(self, kind: str) -> str:
        r = self.r
        gens: dict[str, Callable[[], str]] = {
            "ORDER_ID": lambda: r.choice(
                [
                    f"ORD-{r.randint(2019, 2026)}-{r.randint(100000, 999999)}",
                    f"#{r.randint(10**7, 10**8 - 1)}",
                    f"A-{r.randint(10**7, 10**8 - 1)}",
                    f"{r.randint(10**9, 10**10 - 1)}",
                ]
            ),
            "SKU": lambda: r.choice(
                [
                    f"SKU-{r.randint(1000, 9999)}-{self.rs(string.ascii_uppercase, 3)}",
                    f"WH-{r.randint(100, 9999)}XM{r.randint(2, 6)}",
                    f"{self.rs(string.ascii_uppercase, 2)}{r.randint(10000, 99999)}-{r.randint(10, 99)}",
                ]
            ),
            "VERSION": lambda: r.choice(
                [
                    f"v{r.randint(0, 9)}.{r.randint(0, 30)}.{r.randint(0, 40)}",
                    f"10.0.{r.randint(10000, 22999)}.{r.randint(100, 4000)}",
                    f"{r.randint(1, 5)}.{r.randint(0, 9)}.{r.randint(0, 9)}-rc.{r.randint(1, 9)}",
                ]
            ),
            "DATE": lambda: r.choice(
                [
                    f"{r.randint(2019, 2026)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}",
                    f"{r.randint(1, 28):02d}/{r.randint(1, 12):02d}/{r.randint(2019, 2026)}",
                    f"{r.randint(1, 28):02d}.{r.randint(1, 12):02d}.{r.randint(2019, 2026)}",
                    f"{r.randint(2019, 2026)}/{r.randint(1, 12):02d}/{r.randint(1, 28):02d}",
                ]
            ),
            "TIMESTAMP": lambda: (
                f"{r.randint(2019, 2026)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d} {r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}"
            ),
            "HASH": lambda: self.rs(HEX, r.choice([7, 12, 40, 64])),
            "UUID": lambda: "-".join(self.rs(HEX, n) for n in (8, 4, 4, 4, 12)),
            "PRICE": lambda: r.choice(
                [
                    f"€{r.randint(1, 9)}.{r.randint(100, 999)},{r.randint(10, 99)}",
                    f"${r.randint(1, 9)},{r.randint(100, 999)}.{r.randint(10, 99)}",
                    f"{r.randint(1, 999)} {r.randint(100, 999)},{r.randint(10, 99)} €",
                    f"£{r.randint(1, 999)}.{r.randint(10, 99)}",
                ]
            ),
            "TRACKING": lambda: r.choice(
                [f"1Z{self.rs(string.ascii_uppercase + string.digits, 16)}", f"JD{r.randint(10**15, 10**16 - 1)}GB"]
            ),
            "INVOICE": lambda: f"INV-{r.randint(2019, 2026)}-{r.randint(1, 999999):06d}",
            "ISBN": lambda: f"978-{r.randint(0, 9)}-{r.randint(10, 99)}-{r.randint(100000, 999999)}-{r.randint(0, 9)}",
            "PRIVATE_IP": lambda: r.choice(
                [
                    f"10.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(1, 254)}",
                    f"192.168.{r.randint(0, 255)}.{r.randint(1, 254)}",
                    "127.0.0.1",
                ]
            ),
            "PORT": lambda: str(r.choice([443, 5432, 6379, 8080, 9092, 27017])),
            "QUANTITY": lambda: f"{r.randint(1, 5000)} {r.choice(['units', 'pcs', 'kg', 'ms', 'MB'])}",
            "EXTENSION": lambda: f"ext. {r.randint(100, 9999)}",
            "MODEL_NAME": lambda: r.choice(
                ["gpt-4o-2024-08-06", "claude-3-5-sonnet-20241022", "llama-3.1-8b-instruct", "smollm2-135m"]
            ),
            "PROPER": lambda: r.choice(PROPER_TUNED if self.config == "tuned" else PROPER_HELDOUT),
        }
        return gens[kind]()


# Capitalised names of products, companies, places and screens: not people, so hard negatives.
PROPER_TUNED = [
    "Galaxy Buds Pro",
    "Microsoft Teams",
    "Google Drive",
    "Apple Pay",
    "Amazon Prime",
    "Visual Studio Code",
    "Power BI",
    "New York",
    "Rio de Janeiro",
    "Buenos Aires",
    "Kuala Lumpur",
    "Hong Kong",
    "Tel Aviv",
    "Costa Rica",
    "San Diego",
    "Deutsche Bank",
    "Banco Santander",
    "Air France",
    "Order History",
    "Account Settings",
    "Billing Portal",
    "Azure DevOps",
    "Jira Cloud",
    "Mont Blanc",
    "Lake Como",
    "Santa Monica",
    "Salt Lake City",
    "Cape Town",
]
PROPER_HELDOUT = [
    "Nintendo Switch",
    "Adobe Acrobat",
    "Slack Huddles",
    "Samsung Pay",
    "Dropbox Paper",
    "Notion Calendar",
    "Sao Paulo",
    "Ho Chi Minh City",
    "Abu Dhabi",
    "Addis Ababa",
    "Porto Alegre",
    "Las Vegas",
    "Baton Rouge",
    "Credit Suisse",
    "Raiffeisen Bank",
    "Royal Mail",
    "Payment Methods",
    "Delivery Options",
    "Loyalty Rewards",
    "Vienna Philharmonic",
    "Lago Maggiore",
    "Monte Carlo",
    "Saint Petersburg",
    "Kilimanjaro Airport",
]

TUNED_REGIONS = [
    "GB",
    "DE",
    "FR",
    "ES",
    "IT",
    "NL",
    "IN",
    "BR",
    "JP",
    "AU",
    "US",
    "CA",
    "MX",
    "IE",
    "BE",
    "CH",
    "AT",
    "PL",
    "SE",
    "PT",
]
HELDOUT_REGIONS = [
    "GB",
    "DE",
    "FR",
    "ES",
    "IT",
    "NL",
    "IN",
    "BR",
    "JP",
    "AU",
    "US",
    "ZA",
    "NG",
    "SG",
    "NZ",
    "DK",
    "NO",
    "FI",
    "CZ",
    "TR",
    "AR",
    "CO",
    "PH",
    "KR",
    "MA",
    "GR",
]

IBAN_FORMATS = [
    ("DE", "18n"), ("GB", "4a14n"), ("FR", "23n"), ("ES", "20n"), ("IT", "1a22n"), ("NL", "4a10n"), ("BE", "12n"),
    ("CH", "17n"), ("AT", "16n"), ("PL", "24n"), ("PT", "21n"), ("SE", "20n"), ("IE", "4a14n"), ("DK", "14n"), ("NO", "11n"), ("FI", "14n"),
]  # fmt: skip

ADDRESS_FORMS = [
    "{n} {s} Street", "{n} {s} Avenue", "{n} {s} Road", "{n} {s} Lane", "{n} {s} Drive", "{n} {s} Blvd", "{s}straße {n}", "{s}weg {n}",
    "{n} rue {s}", "Calle {s} {n}", "Via {s} {n}", "{s}straat {n}", "{n} {s} St.", "Rua {s}, {n}", "{s}laan {n}",
]  # fmt: skip
HELDOUT_ADDRESS_FORMS = [
    "{n} {s} Court", "{n} {s} Way", "{n} {s} Place", "{n} {s} Terrace", "{s}allee {n}", "{s}gasse {n}", "{n} avenue {s}",
    "{n} boulevard {s}", "Avenida {s} {n}", "Piazza {s} {n}", "{s}gracht {n}", "{n}, {s} Road", "Carrer de {s}, {n}", "{s}vej {n}",
]  # fmt: skip


def _ascii(name: str) -> str:
    return (
        unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().replace("'", "").replace(" ", "") or "x"
    )


def _luhn_digit(partial: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(partial)):
        d = int(ch)
        if i % 2 == 0:
            d = d * 2 - 9 if d * 2 > 9 else d * 2
        total += d
    return str((10 - total % 10) % 10)


def _random_valid_number(region: str, r: random.Random) -> phonenumbers.PhoneNumber:
    kind = r.choice([phonenumbers.PhoneNumberType.MOBILE, phonenumbers.PhoneNumberType.FIXED_LINE])
    example = phonenumbers.example_number_for_type(region, kind) or phonenumbers.example_number(region)
    digits = str(example.national_number)
    for _ in range(50):
        keep = max(2, len(digits) - 5)
        candidate = digits[:keep] + "".join(r.choice(string.digits) for _ in range(len(digits) - keep))
        number = phonenumbers.PhoneNumber(country_code=example.country_code, national_number=int(candidate))
        if example.italian_leading_zero:
            number.italian_leading_zero = True
        if phonenumbers.is_valid_number(number):
            return number
    return example


# --------------------------------------------------------------------------- templates

# [[TYPE]] is a generated value: planted if TYPE is in GROUPS (or ALIASES), a hard negative otherwise.
# [[!word]] is literal text labelled as a hard negative (a word that is a name elsewhere).
# [[_KIND]] is unlabelled filler (a key name, a city).
ALIASES = {
    "FIRST": "PERSON",
    "LAST": "PERSON",
    "HEX_TOKEN": "SECRET",
    "B64_TOKEN": "SECRET",
    "TOKEN": "SECRET",
    "PEM": "PRIVATE_KEY",
    "URL_PASSWORD": "PASSWORD",
    "IPV6": "IP_ADDRESS",
}

TUNED_TEMPLATES: dict[str, list[str]] = {
    "chat": [
        "Hi, I'm [[PERSON]] and I was charged twice for order [[ORDER_ID]] on [[DATE]]. Call me on [[PHONE]] please.",
        "Hello, this is [[PERSON]] from [[_CITY]]. My number changed to [[PHONE]], the old one was [[PHONE]].",
        "Dear [[FIRST]], thanks for your patience. Your refund of [[PRICE]] for [[SKU]] is on its way.",
        "Please send the invoice [[INVOICE]] to [[EMAIL]] and cc [[PERSON]] ([[EMAIL]]).",
        "My SSN is [[SSN]] and my card [[CREDIT_CARD]] was declined at checkout (version [[VERSION]]).",
        "Wire the deposit to IBAN [[IBAN]], reference [[ORDER_ID]], before [[DATE]].",
        "I moved to [[ADDRESS]], [[_CITY]] last month; please update the shipping address for [[ORDER_ID]].",
        "[[!Will]] the package arrive before [[DATE]]? Tracking says [[TRACKING]].",
        "Please [[!Mark]] the ticket as resolved; [[PERSON]] confirmed the fix in build [[HASH]].",
        "Can you [[!Grant]] read access to [[FIRST]]? She starts on [[DATE]].",
        "Our [[!Bill]] of materials for [[SKU]] lists [[QUANTITY]]; contact [[PERSON]] at [[PHONE]].",
        "The customer [[PERSON]] wrote from [[IPV4]] about order [[ORDER_ID]] at [[TIMESTAMP]].",
        "Thanks [[FIRST]]! I'll forward this to Mr. [[LAST]] in billing, ext. [[PORT]].",
        "Regards,\n[[PERSON]]\nCustomer Success, [[_CITY]]\nTel. [[PHONE]]",
        "Payment from [[!Chase]] Bank for [[PRICE]] arrived on [[DATE]]; invoice [[INVOICE]] is settled.",
        "Ask [[PERSON]] or [[PERSON]] whether the [[!May]] release ([[VERSION]]) fixed the login bug.",
        "My social security number [[SSN]] appears on the form; my phone is [[PHONE]].",
        "I ordered [[QUANTITY]] of [[SKU]] for [[PRICE]]; ISBN [[ISBN]] was missing from the box.",
        "We use [[PROPER]] and [[PROPER]] for this; the office in [[PROPER]] handles returns for [[SKU]].",
        "Open [[PROPER]] > [[PROPER]] and check order [[ORDER_ID]]; [[PERSON]] said it synced on [[DATE]].",
    ],
    "tool": [
        '{"name": "lookup_customer", "arguments": {"email": "[[EMAIL]]", "phone": "[[PHONE]]", "order_id": "[[ORDER_ID]]"}}',
        '{"customer": {"name": "[[PERSON]]", "email": "[[EMAIL]]", "address": "[[ADDRESS]]", "since": "[[DATE]]"}, "id": "[[UUID]]"}',
        '{"name": "refund", "arguments": {"iban": "[[IBAN]]", "amount": "[[PRICE]]", "sku": "[[SKU]]", "request_id": "[[UUID]]"}}',
        '{"name": "verify_identity", "arguments": {"ssn": "[[SSN]]", "dob": "[[DATE]]", "agent": "[[MODEL_NAME]]"}}',
        '{"name": "send_sms", "arguments": {"to": "[[PHONE]]", "body": "Order [[ORDER_ID]] ships [[DATE]]"}}',
        '{"assignee": "[[PERSON]]", "ticket": "[[INVOICE]]", "priority": "high", "commit": "[[HASH]]"}',
        '{"name": "charge", "arguments": {"card": "[[CREDIT_CARD]]", "amount": "[[PRICE]]", "order": "[[ORDER_ID]]"}}',
        '{"client_ip": "[[IPV4]]", "upstream": "[[PRIVATE_IP]]:[[PORT]]", "v6": "[[IPV6]]", "build": "[[VERSION]]"}',
    ],
    "secret": [
        "[[_PWKEY]]=[[PASSWORD]]\n[[_TOKKEY]]=[[HEX_TOKEN]]\nLOG_LEVEL=info\nBUILD=[[HASH]]",
        '{"[[_pwkey]]": "[[PASSWORD]]", "[[_tokkey]]": "[[B64_TOKEN]]", "timeout_ms": 3000, "request_id": "[[UUID]]"}',
        'database:\n  host: [[PRIVATE_IP]]\n  [[_pwkey]]: [[PASSWORD]]\n  pool: 10\nauth:\n  [[_tokkey]]: "[[TOKEN]]"\n  issuer: https://login.example.com',
        "export [[_TOKKEY]]=\"[[TOKEN]]\"\nexport [[_PWKEY]]='[[PASSWORD]]'\nexport RELEASE=[[VERSION]]",
        "[database]\n[[_pwkey]] = [[PASSWORD]]\nport = [[PORT]]\n\n[api]\n[[_tokkey]] = [[HEX_TOKEN]]\nendpoint = https://api.example.com",
        '[server]\n[[_tokkey]] = "[[B64_TOKEN]]"\n[[_pwkey]] = "[[PASSWORD]]"\nversion = "[[VERSION]]"',
        "DATABASE_URL=postgres://app:[[URL_PASSWORD]]@db.internal:5432/prod\nREDIS_URL=redis://:[[URL_PASSWORD]]@[[PRIVATE_IP]]:6379/0",
        "curl -H 'Authorization: Bearer [[TOKEN]]' -H 'X-Request-Id: [[UUID]]' https://api.example.com/v2/orders/[[ORDER_ID]]",
        'GET /v1/me HTTP/1.1\nHost: api.example.com\nX-API-Key: [[TOKEN]]\nAuthorization: Bearer [[JWT]]\nIf-None-Match: "[[HASH]]"',
        "aws_access_key_id = [[CLOUD_KEY]]\n# rotated [[DATE]] by [[PERSON]]",
        "The key we leaked is [[CLOUD_KEY]]; commit [[HASH]] removed it on [[DATE]].",
        "[[PEM]]",
        "git checkout [[HASH]] && sha256sum release.tar.gz  # expect [[HASH]]",
    ],
    "log": [
        "[[TIMESTAMP]] INFO login ok user=[[EMAIL]] ip=[[IPV4]] agent=[[MODEL_NAME]] req=[[UUID]]",
        "[[TIMESTAMP]] WARN sms to [[PHONE]] failed for order [[ORDER_ID]] (sku [[SKU]], version [[VERSION]])",
        "[[TIMESTAMP]] INFO ticket [[INVOICE]] assigned to [[PERSON]] by [[PERSON]]",
        "[[TIMESTAMP]] DEBUG payment card=[[CREDIT_CARD]] amount=[[PRICE]] order=[[ORDER_ID]] latency=[[QUANTITY]]",
    ],
}

HELDOUT_TEMPLATES: dict[str, list[str]] = {
    "chat": [
        "Good morning, my name is [[PERSON]]. Could someone ring me back at [[PHONE]]? It's about parcel [[TRACKING]].",
        "[[PERSON]] here — my new mobile is [[PHONE]] and my office line [[PHONE]].",
        "Hey [[FIRST]], the replacement for [[SKU]] went out on [[DATE]]; quote [[ORDER_ID]] if it does not arrive.",
        "Kindly update the payout account to [[IBAN]] for supplier [[PERSON]]; amount [[PRICE]].",
        "For the background check: SSN [[SSN]], born [[DATE]], current address [[ADDRESS]].",
        "Card number [[CREDIT_CARD]] expired; please charge my other card [[CREDIT_CARD]] instead.",
        "Ship it to [[ADDRESS]] please, not to the warehouse in [[_CITY]].",
        "[[!Will]] you confirm the [[!June]] invoice [[INVOICE]]? Our finance lead [[PERSON]] is waiting.",
        "Note from [[PERSON]]: the customer logged in from [[IPV4]] and [[IPV6]] on [[TIMESTAMP]].",
        "Best wishes,\n[[PERSON]]\nHead of Support\nMobile: [[PHONE]]",
        "Mrs. [[LAST]] asked whether the [[!Amber]] warning on unit [[SKU]] is covered by warranty.",
        "Please escalate to Dr. [[LAST]]; the patient portal shows build [[VERSION]].",
        "I talked to [[FIRST]] yesterday and she said order [[ORDER_ID]] would ship by [[DATE]].",
        "The [[!Rose]] gold model [[SKU]] costs [[PRICE]]; [[QUANTITY]] in stock.",
        "Paid with [[PROPER]] from [[PROPER]]; it shows under [[PROPER]] as [[INVOICE]].",
        "Our team in [[PROPER]] switched to [[PROPER]]. Contact [[FIRST]] for access (version [[VERSION]]).",
    ],
    "tool": [
        '{"function": "create_ticket", "params": {"reporter": "[[PERSON]]", "contact_phone": "[[PHONE]]", "sku": "[[SKU]]"}}',
        '{"result": {"full_name": "[[PERSON]]", "mail": "[[EMAIL]]", "street": "[[ADDRESS]]", "created": "[[TIMESTAMP]]"}}',
        '{"payout": {"account": "[[IBAN]]", "holder": "[[PERSON]]", "invoice": "[[INVOICE]]"}}',
        '{"kyc": {"national_id": "[[SSN]]", "card_last_charge": "[[CREDIT_CARD]]", "session": "[[UUID]]"}}',
        '{"geo": {"ip": "[[IPV4]]", "ipv6": "[[IPV6]]", "gateway": "[[PRIVATE_IP]]"}, "model": "[[MODEL_NAME]]"}',
    ],
    "secret": [
        "[[_HPWKEY]]=[[PASSWORD]]\n[[_HTOKKEY]]=[[B64_TOKEN]]\nWORKERS=4\nGIT_SHA=[[HASH]]",
        '{"[[_hpwkey]]": "[[PASSWORD]]", "[[_htokkey]]": "[[HEX_TOKEN]]", "retries": 3}',
        "smtp:\n  server: mail.example.com\n  [[_hpwkey]]: '[[PASSWORD]]'\nintegrations:\n  [[_htokkey]]: [[TOKEN]]",
        "[[_HTOKKEY]]='[[TOKEN]]'\n[[_HPWKEY]]=\"[[PASSWORD]]\"",
        '[credentials]\n[[_htokkey]] = "[[TOKEN]]"\nregion = "eu-west-1"',
        "mongodb+srv://svc:[[URL_PASSWORD]]@cluster0.example.net/app?retryWrites=true\namqp://guest:[[URL_PASSWORD]]@[[PRIVATE_IP]]:5672/",
        "POST /hooks HTTP/1.1\nAuthorization: Bearer [[TOKEN]]\nX-Auth-Token: [[HEX_TOKEN]]\nContent-Length: 512",
        "Use [[CLOUD_KEY]] for the deploy job (expires [[DATE]]); the old one was [[CLOUD_KEY]].",
        "token: [[JWT]]\nissued_for: [[EMAIL]]",
        "[[PEM]]",
        "docker pull app@sha256:[[HASH]] && git log --oneline [[HASH]]",
    ],
    "log": [
        '[[TIMESTAMP]] level=info msg="callback requested" phone="[[PHONE]]" customer="[[PERSON]]" trace=[[UUID]]',
        '[[TIMESTAMP]] level=error msg="card declined" card=[[CREDIT_CARD]] iban=[[IBAN]] order=[[ORDER_ID]]',
        '[[TIMESTAMP]] level=warn msg="geo mismatch" ip=[[IPV4]] version=[[VERSION]] sku=[[SKU]]',
    ],
}

TUNED_KEYS = {
    "pw": [
        "password",
        "passwd",
        "db_password",
        "DB_PASS",
        "PGPASSWORD",
        "MYSQL_ROOT_PASSWORD",
        "admin_password",
        "secret",
        "app_secret",
        "client_secret",
    ],
    "tok": [
        "api_key",
        "apiKey",
        "API_TOKEN",
        "access_token",
        "auth_token",
        "refresh_token",
        "SECRET_KEY",
        "session_secret",
        "signing_key",
        "webhook_secret",
        "private_token",
        "encryption_key",
    ],
}
HELDOUT_KEYS = {
    "pw": [
        "smtp_password",
        "redis_pass",
        "ldap_bind_password",
        "PASSPHRASE",
        "adminPwd",
        "root_pw",
        "keystore_pass",
        "jwtSecret",
        "consumer_secret",
    ],
    "tok": [
        "bearer_token",
        "oauth_token",
        "x_auth_token",
        "deploy_key",
        "license_key",
        "SENDGRID_API_KEY",
        "TWILIO_AUTH_TOKEN",
        "hmac_key",
        "vault_token",
        "NPM_TOKEN",
        "masterKey",
        "github_pat",
    ],
}
CITIES = [
    "Lyon",
    "Leeds",
    "Porto",
    "Köln",
    "Utrecht",
    "Bologna",
    "Pune",
    "Osaka",
    "Perth",
    "Curitiba",
    "Valencia",
    "Graz",
]

WRAPPERS = [
    ('{"role": "user", "content": "', '"}'),
    ('{"messages": [{"role": "tool", "content": "', '"}], "model": "gpt-4o-mini"}'),
]


class _Builder:
    def __init__(self, values: Values, keys: dict[str, list[str]]) -> None:
        self.v, self.keys = values, keys

    def value(self, kind: str) -> tuple[str, str | None, bool]:
        """(text, label, planted): label None for filler."""
        v, r = self.v, self.v.r
        planted = {
            "PERSON": v.person, "FIRST": v.first_name, "LAST": v.last_name, "EMAIL": v.email, "PHONE": v.phone,
            "SSN": v.ssn, "CREDIT_CARD": v.card, "IBAN": v.iban, "IPV4": v.ipv4, "IPV6": v.ipv6, "ADDRESS": v.address,
            "PASSWORD": v.password, "URL_PASSWORD": v.password, "HEX_TOKEN": v.hex_token, "B64_TOKEN": v.b64_token,
            "TOKEN": v.token, "JWT": v.jwt, "CLOUD_KEY": v.cloud_key, "PEM": v.pem,
        }  # fmt: skip
        if kind in planted:
            text = planted[kind]()
            if kind == "URL_PASSWORD":
                text = text.replace("@", "!").replace("/", "_").replace(":", "_").replace("#", "%")
            label = ALIASES.get(kind, "IP_ADDRESS" if kind == "IPV4" else kind)
            if kind == "PASSWORD":
                label = "SECRET"
            return text, label, True
        if kind.startswith("!"):
            return kind[1:], "NAME_WORD", False
        if kind.startswith("_"):
            name = kind[1:]
            if name.lower() in ("pwkey", "hpwkey", "tokkey", "htokkey"):
                key = r.choice(self.keys["pw" if "pw" in name.lower() else "tok"])
                return (key.upper() if name.isupper() else key), None, False
            if name == "CITY":
                return r.choice(CITIES), None, False
        return v.negative(kind), kind, False


def _render(
    template: str, builder: _Builder, escaped: bool, prefix: str, suffix: str
) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    text, spans, negatives = prefix, [], []
    pos = 0
    for m in re.finditer(r"\[\[([!_]?[A-Za-z0-9_ ]+)\]\]", template):
        text += _esc(template[pos : m.start()], escaped)
        value, label, planted = builder.value(m.group(1))
        start = len(text)
        text += _esc(value, escaped)
        if label is not None:
            entry = {"start": start, "end": len(text), "type": label}
            if planted:
                spans.append({**entry, "group": GROUPS[label]})
            else:
                negatives.append(entry)
        pos = m.end()
    return text + _esc(template[pos:], escaped) + suffix, spans, negatives


def _esc(segment: str, escaped: bool) -> str:
    return json.dumps(segment, ensure_ascii=False)[1:-1] if escaped else segment


def generate(config: str = "tuned", n: int = 1500, seed: int = 1) -> list[dict[str, Any]]:
    """`n` labelled records of the `tuned` or `heldout` configuration."""
    if config not in ("tuned", "heldout"):
        raise ValueError(f"unknown configuration {config!r}")
    rng = random.Random(seed)
    values = Values(config, rng)
    builder = _Builder(values, TUNED_KEYS if config == "tuned" else HELDOUT_KEYS)
    templates = TUNED_TEMPLATES if config == "tuned" else HELDOUT_TEMPLATES
    kinds = list(templates)
    records = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        escaped = rng.random() < 0.2
        prefix, suffix = rng.choice(WRAPPERS) if escaped else ("", "")
        text, spans, negatives = _render(rng.choice(templates[kind]), builder, escaped, prefix, suffix)
        records.append(
            {
                "id": f"{config[0]}{i:05d}",
                "kind": kind + ("+json_escaped" if escaped else ""),
                "text": text,
                "spans": spans,
                "negatives": negatives,
            }
        )
    return records


# --------------------------------------------------------------------------- the public corpus


def _presidio_raw_data() -> Path | None:
    try:
        spec = importlib.util.find_spec("presidio_evaluator")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data_generator" / "raw_data"
    return path if (path / "templates.txt").is_file() else None


def public_corpus(n: int = 1500, seed: int = 3) -> list[dict[str, Any]] | None:
    """presidio-evaluator's own templates filled with its FakeNameGenerator people (names, streets, emails,
    national-format phone numbers of ~20 countries); cards, IBANs, SSNs and IPs come from our generators. None if
    the package (`pip install --no-deps presidio-evaluator`) is not installed."""
    raw = _presidio_raw_data()
    if raw is None:
        return None
    rng = random.Random(seed)
    values = Values("heldout", rng)
    people = list(csv.DictReader((raw / "FakeNameGenerator.com_3000.csv").open(encoding="utf-8-sig")))
    templates = [
        t.strip()
        for t in (raw / "templates.txt").read_text(encoding="utf-8", errors="replace").splitlines()
        if "{{" in t
    ]
    records = []
    for i in range(n):
        person = rng.choice(people)
        template = rng.choice(templates)
        text, spans = "", []
        pos = 0
        for m in re.finditer(r"\{\{\s*([a-z_]+)\s*\}\}", template):
            text += template[pos : m.start()]
            value, label = _presidio_value(m.group(1), person, rng.choice(people), values)
            start = len(text)
            text += value
            if label is not None:
                spans.append({"start": start, "end": len(text), "type": label, "group": GROUPS[label]})
            pos = m.end()
        text += template[pos:]
        records.append({"id": f"p{i:05d}", "kind": "presidio", "text": text, "spans": spans, "negatives": []})
    return records


def _presidio_value(field: str, person: dict[str, str], other: dict[str, str], v: Values) -> tuple[str, str | None]:
    given, surname = person["GivenName"], person["Surname"]
    planted: dict[str, tuple[str, str]] = {
        "person": (f"{given} {surname}", "PERSON"), "name": (f"{given} {surname}", "PERSON"),
        "name_female": (f"{given} {surname}", "PERSON"), "name_male": (f"{given} {surname}", "PERSON"),
        "first_name": (given, "PERSON"), "first_name_male": (given, "PERSON"), "first_name_female": (given, "PERSON"),
        "first_name_nonbinary": (given, "PERSON"), "last_name": (surname, "PERSON"), "last_name_male": (surname, "PERSON"),
        "last_name_female": (surname, "PERSON"), "email": (person["EmailAddress"], "EMAIL"),
        "phone_number": (person["TelephoneNumber"], "PHONE"), "credit_card_number": (v.card(), "CREDIT_CARD"),
        "iban": (v.iban(), "IBAN"), "ssn": (v.ssn(), "SSN"), "ip_address": (v.ipv4(), "IP_ADDRESS"),
        "address": (person["StreetAddress"], "ADDRESS"),
    }  # fmt: skip
    if field in planted:
        return planted[field]
    filler = {
        "city": person["City"], "country": person["CountryFull"], "organization": other["Company"], "job": person["Occupation"],
        "street_name": person["StreetAddress"].split(" ", 1)[-1], "building_number": person["StreetAddress"].split(" ", 1)[0],
        "postcode": person["ZipCode"], "zipcode": person["ZipCode"], "age": person["Age"], "year": "2019",
        "prefix_male": "Mr.", "prefix_female": "Ms.", "prefix": person["Title"], "nationality": "French",
        "date_time": "2019-10-03 10:00", "date_of_birth": person["Birthday"], "state_abbr": person["State"], "url": person["Domain"],
    }  # fmt: skip
    return filler.get(field, field.replace("_", " ")), None


__all__ = ["GROUPS", "faker_names", "generate", "mimesis_names", "public_corpus"]
