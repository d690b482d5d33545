# ruff: noqa: E501  (templates and value generators read best as one line each)
"""Generates the labeled redaction corpus: realistic agent traffic with planted values and hard negatives.

    python benchmarks/corpus/generate.py            # rewrites redaction_corpus.jsonl (fixed seed)

Each JSONL record: {"id", "kind", "text", "spans": [{start, end, type, group}], "negatives": [{start, end, type}]}.
Spans are exact character offsets into `text`, computed after JSON escaping, so they hold for escaped bodies too.
Values are synthetic (test card ranges, fictional names, random keys); none is a real credential.
"""

from __future__ import annotations

import base64
import json
import random
import re
import string
import sys
from collections import Counter
from pathlib import Path

SEED = 20261122
OUT = Path(__file__).with_name("redaction_corpus.jsonl")

GROUPS = {
    "EMAIL": "contact", "PHONE": "contact",
    "CREDIT_CARD": "financial", "IBAN": "financial", "SSN": "financial",
    "IP_ADDRESS": "network",
    "AWS_ACCESS_KEY": "credentials", "AWS_SECRET_KEY": "credentials", "GITHUB_TOKEN": "credentials",
    "OPENAI_KEY": "credentials", "ANTHROPIC_KEY": "credentials", "SLACK_TOKEN": "credentials",
    "STRIPE_KEY": "credentials", "GOOGLE_API_KEY": "credentials", "JWT": "credentials",
    "PRIVATE_KEY": "credentials", "PASSWORD": "credentials", "SECRET": "credentials",
    "PERSON": "person",
}  # fmt: skip

R = random.Random(SEED)
A62 = string.ascii_letters + string.digits
B64 = A62 + "+/"
URLSAFE = A62 + "-_"

FIRST = [
    "Maria",
    "James",
    "Aisha",
    "Wei",
    "Olga",
    "Lucas",
    "Priya",
    "Kenji",
    "Fatima",
    "Noah",
    "Chloe",
    "Mateo",
    "Ingrid",
    "Ravi",
    "Sofia",
    "Daniel",
    "Amara",
    "Tomasz",
]
LAST = [
    "Gonzalez",
    "Whitfield",
    "Okafor",
    "Zhang",
    "Petrova",
    "Moreau",
    "Raman",
    "Tanaka",
    "Haddad",
    "Becker",
    "Dubois",
    "Silva",
    "Larsen",
    "Iyer",
    "Rossi",
]
DOMAINS = ["example.com", "acme-corp.io", "mail.example.org", "globex.co.uk", "initech.net", "umbrella.health"]


def rs(alphabet: str, n: int) -> str:
    return "".join(R.choice(alphabet) for _ in range(n))


def luhn_digit(partial: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(partial)):
        d = int(ch)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return str((10 - total % 10) % 10)


def card() -> str:
    prefix, n, groups = R.choice(
        [("4", 16, (4, 4, 4, 4)), ("51", 16, (4, 4, 4, 4)), ("55", 16, (4, 4, 4, 4)), ("2221", 16, (4, 4, 4, 4)),
         ("37", 15, (4, 6, 5)), ("34", 15, (4, 6, 5)), ("6011", 16, (4, 4, 4, 4)), ("35", 16, (4, 4, 4, 4))]
    )  # fmt: skip
    if prefix == "35":
        prefix = str(R.randint(3528, 3589))
    body = prefix + rs(string.digits, n - len(prefix) - 1)
    digits = body + luhn_digit(body)
    sep = R.choice(["", " ", "-", " "])
    out, pos = [], 0
    for g in groups:
        out.append(digits[pos : pos + g])
        pos += g
    return sep.join(out)


def non_luhn16() -> str:
    body = R.choice("4512") + rs(string.digits, 14)
    good = luhn_digit(body)
    return body + R.choice([d for d in string.digits if d != good])


def iban() -> str:
    country, bban_len = R.choice([("DE", 18), ("GB", 18), ("FR", 23), ("NL", 14), ("ES", 20), ("IT", 23), ("CH", 17)])
    if country == "GB":
        bban = rs(string.ascii_uppercase, 4) + rs(string.digits, 14)
    elif country == "NL":
        bban = rs(string.ascii_uppercase, 4) + rs(string.digits, 10)
    elif country == "IT":
        bban = R.choice(string.ascii_uppercase) + rs(string.digits, 22)
    else:
        bban = rs(string.digits, bban_len)
    numeric = "".join(str(int(c, 36)) for c in bban + country + "00")
    check = 98 - int(numeric) % 97
    raw = f"{country}{check:02d}{bban}"
    return " ".join(raw[i : i + 4] for i in range(0, len(raw), 4)) if R.random() < 0.5 else raw


def ssn() -> str:
    area = R.choice([a for a in range(1, 900) if a != 666])
    return f"{area:03d}-{R.randint(1, 99):02d}-{R.randint(1, 9999):04d}"


def phone() -> str:
    a, b, c = R.randint(201, 989), R.randint(200, 999), R.randint(0, 9999)
    if R.random() < 0.55:
        fmt = R.choice(["({a}) {b}-{c:04d}", "{a}-{b}-{c:04d}", "{a}.{b}.{c:04d}", "+1 {a} {b} {c:04d}",
                        "1-{a}-{b}-{c:04d}", "+1-{a}-{b}-{c:04d}", "+1 ({a}) {b}-{c:04d}"])  # fmt: skip
        return fmt.format(a=a, b=b, c=c)
    return R.choice([
        f"+44 20 {R.randint(7000, 8999)} {R.randint(1000, 9999)}", f"+44 7{R.randint(100, 999)} {R.randint(100000, 999999)}",
        f"+49 30 {R.randint(10000000, 99999999)}", f"+49 151 {R.randint(1000000, 9999999)}",
        f"+33 1 {R.randint(10, 99)} {R.randint(10, 99)} {R.randint(10, 99)} {R.randint(10, 99)}",
        f"+91 {R.randint(70000, 99999)} {R.randint(10000, 99999)}", f"+81 3-{R.randint(1000, 9999)}-{R.randint(1000, 9999)}",
        f"+61 2 {R.randint(8000, 9999)} {R.randint(1000, 9999)}", f"+55 11 9{R.randint(1000, 9999)}-{R.randint(1000, 9999)}",
        f"+86{R.randint(13000000000, 18999999999)}", f"+34 {R.randint(600, 699)} {R.randint(100, 999)} {R.randint(100, 999)}",
    ])  # fmt: skip


def public_ipv4() -> str:
    while True:
        first = R.choice([3, 8, 13, 18, 23, 34, 35, 44, 52, 54, 64, 81, 89, 104, 142, 151, 185, 198, 203, 212])
        ip = f"{first}.{R.randint(0, 255)}.{R.randint(0, 255)}.{R.randint(1, 254)}"
        return ip


def public_ipv6() -> str:
    prefix = R.choice(["2001:4860", "2600:1f18", "2a00:1450", "2606:4700", "2a03:2880"])
    groups = [f"{R.randint(0, 0xFFFF):x}" for _ in range(R.choice([2, 6]))]
    return prefix + (":" + ":".join(groups) if len(groups) == 6 else "::" + ":".join(groups))


def private_ip() -> str:
    return R.choice([
        f"10.{R.randint(0, 255)}.{R.randint(0, 255)}.{R.randint(1, 254)}", f"192.168.{R.randint(0, 255)}.{R.randint(1, 254)}",
        f"172.{R.randint(16, 31)}.{R.randint(0, 255)}.{R.randint(1, 254)}", "127.0.0.1", "::1",
        f"fe80::{R.randint(0, 0xFFFF):x}:{R.randint(0, 0xFFFF):x}", f"fd12:3456:789a::{R.randint(1, 99)}", "0.0.0.0",
    ])  # fmt: skip


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt() -> str:
    header = b64url(json.dumps({"alg": R.choice(["HS256", "RS256"]), "typ": "JWT"}).encode())
    payload = b64url(json.dumps({"sub": str(R.randint(1000, 99999)), "iat": 1732245600, "role": "agent"}).encode())
    return f"{header}.{payload}.{rs(URLSAFE, 43)}"


def pem() -> str:
    label = R.choice(["RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY"])
    lines = [rs(B64, 64) for _ in range(R.randint(4, 12))] + [rs(B64, R.randint(10, 60)) + "=="]
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----"


def password_value() -> str:
    return R.choice([
        lambda: rs(A62, R.randint(10, 20)),
        lambda: R.choice(["Tr0ub4dor", "hunter", "Summer", "Winter", "P@ssw0rd", "letmein", "dragon"]) + str(R.randint(1, 9999)) + R.choice(["!", "#", "", "$"]),
        lambda: rs(A62 + "!#$%^*", R.randint(12, 24)),
    ])()  # fmt: skip


def token_value() -> str:
    return R.choice([lambda: rs(A62, R.randint(24, 48)), lambda: rs("0123456789abcdef", 32), lambda: rs(URLSAFE, 40)])()


def person() -> str:
    return f"{R.choice(FIRST)} {R.choice(LAST)}"


def email() -> str:
    first, last = R.choice(FIRST).lower(), R.choice(LAST).lower()
    local = R.choice([f"{first}.{last}", f"{first[0]}{last}", f"{first}_{last}{R.randint(1, 99)}", f"{first}+support"])
    addr = f"{local}@{R.choice(DOMAINS)}"
    return addr.upper() if R.random() < 0.05 else addr


GEN = {
    # planted values
    "EMAIL": email, "PHONE": phone, "CREDIT_CARD": card, "IBAN": iban, "SSN": ssn,
    "IP_ADDRESS": lambda: public_ipv4() if R.random() < 0.75 else public_ipv6(),
    "AWS_ACCESS_KEY": lambda: R.choice(["AKIA", "ASIA"]) + rs(string.ascii_uppercase + "234567", 16),
    "AWS_SECRET_KEY": lambda: rs(B64, 40),
    "GITHUB_TOKEN": lambda: R.choice([lambda: R.choice(["ghp_", "gho_", "ghs_"]) + rs(A62, 36), lambda: "github_pat_" + rs(A62, 22) + "_" + rs(A62, 59)])(),
    "OPENAI_KEY": lambda: R.choice([lambda: "sk-proj-" + rs(URLSAFE, R.choice([48, 74, 156])), lambda: "sk-" + rs(A62, 48), lambda: "sk-svcacct-" + rs(URLSAFE, 64)])(),
    "ANTHROPIC_KEY": lambda: "sk-ant-api03-" + rs(URLSAFE, 93) + "AA",
    "SLACK_TOKEN": lambda: R.choice([lambda: f"xoxb-{R.randint(10**11, 10**12)}-{R.randint(10**12, 10**13)}-{rs(A62, 24)}", lambda: f"xoxp-{R.randint(10**11, 10**12)}-{R.randint(10**11, 10**12)}-{R.randint(10**11, 10**12)}-{rs('0123456789abcdef', 32)}", lambda: f"https://hooks.slack.com/services/T{rs(string.ascii_uppercase + string.digits, 8)}/B{rs(string.ascii_uppercase + string.digits, 10)}/{rs(A62, 24)}"])(),
    "STRIPE_KEY": lambda: R.choice(["sk_live_", "sk_test_", "rk_live_"]) + rs(A62, R.choice([24, 99])),
    "GOOGLE_API_KEY": lambda: "AIza" + rs(URLSAFE, 35),
    "JWT": jwt, "PRIVATE_KEY": pem, "PASSWORD": password_value, "SECRET": lambda: R.choice([password_value, token_value])(),
    "SECRET_TOKEN": token_value,
    "PERSON": person,
    # hard negatives
    "ORDER_ID": lambda: R.choice([f"ORD-{R.randint(2019, 2026)}-{R.randint(100000, 999999)}", f"#A{R.randint(10000000, 99999999)}", f"{R.randint(100000, 9999999)}", f"PO-{R.randint(10000, 99999)}"]),
    "UUID": lambda: "-".join(rs("0123456789abcdef", n) for n in (8, 4, 4, 4, 12)),
    "GIT_SHA": lambda: rs("0123456789abcdef", R.choice([40, 7, 12])),
    "HEX_DIGEST": lambda: R.choice(["sha256:", "", "md5:"]) + rs("0123456789abcdef", R.choice([64, 32])),
    "VERSION": lambda: R.choice([f"v{R.randint(0, 9)}.{R.randint(0, 30)}.{R.randint(0, 99)}", f"{R.randint(1, 5)}.{R.randint(0, 40)}.{R.randint(0, 20)}", f"{R.randint(1, 3)}.{R.randint(0, 9)}.{R.randint(0, 9)}-rc.{R.randint(1, 5)}", f"{R.randint(100, 130)}.0.{R.randint(1000, 6999)}.{R.randint(10, 199)}"]),
    "TIMESTAMP": lambda: R.choice([f"2026-{R.randint(1, 12):02d}-{R.randint(1, 28):02d}T{R.randint(0, 23):02d}:{R.randint(0, 59):02d}:{R.randint(0, 59):02d}Z", f"2026-{R.randint(1, 12):02d}-{R.randint(1, 28):02d} {R.randint(0, 23):02d}:{R.randint(0, 59):02d}:{R.randint(0, 59):02d}", str(R.randint(1700000000, 1799999999)), str(R.randint(1700000000000, 1799999999999)), f"{R.randint(0, 23):02d}:{R.randint(0, 59):02d}:{R.randint(0, 59):02d}.{R.randint(0, 999):03d}"]),
    "PRICE": lambda: R.choice([f"${R.randint(1, 9999):,}.{R.randint(0, 99):02d}", f"€{R.randint(1, 999)}.{R.randint(0, 99):02d}", f"USD {R.randint(1, 99999)}.00", f"{R.randint(1, 999)}.{R.randint(0, 99):02d} EUR"]),
    "SKU": lambda: R.choice([f"SKU-{R.randint(100, 999)}-{R.randint(100, 999)}-{R.randint(1000, 9999)}", f"{rs(string.ascii_uppercase, 2)}-{R.randint(1000, 9999)}-{rs(string.ascii_uppercase, 2)}", f"SKU{R.randint(10000000, 99999999)}"]),
    "PORT": lambda: str(R.choice([80, 443, 5432, 6379, 8080, 8443, 9200, 27017, 3306, 11434])),
    "PRIVATE_IP": private_ip,
    "SHORT_TOKEN": lambda: R.choice(["S3", "EKS", "C4", "EC2", "K8s", "GPT-4", "P99", "H100", "A100", "IAM", "RDS", "TLS", "gRPC", "SQS", "MFA"]),
    "NONLUHN16": non_luhn16,
    "REQUEST_ID": lambda: R.choice([f"req_{rs(A62, 24)}", f"chatcmpl-{rs(A62, 29)}", f"call_{rs(A62, 24)}", f"msg_{rs(A62, 24)}"]),
    "INVOICE": lambda: f"INV-2026{R.randint(1, 12):02d}{R.randint(1, 28):02d}-{R.randint(1, 9999):04d}",
    "TRACKING": lambda: R.choice([f"1Z{rs(string.ascii_uppercase + string.digits, 16)}", f"{R.randint(10**11, 10**12 - 1)}"]),
    "DATE": lambda: R.choice([f"2026-{R.randint(1, 12):02d}-{R.randint(1, 28):02d}", f"{R.randint(1, 12):02d}/{R.randint(1, 28):02d}/2026", f"Nov {R.randint(1, 28)}, 2026"]),
    "NUMBER": lambda: R.choice([str(R.randint(1, 4096)), f"{R.randint(1, 999)}ms", f"{R.randint(1, 100)}%", f"{R.random():.4f}"]),
    "POD": lambda: f"{R.choice(['api', 'worker', 'gateway'])}-{rs('0123456789abcdef', 10)}-{rs(string.ascii_lowercase + string.digits, 5)}",
    "PATH": lambda: R.choice(["/usr/lib/python3.11/site-packages/httpx/_client.py", "/app/src/billing/charge.py", "/var/log/nginx/access.log", "s3://acme-logs/2026/11/22/part-0001.parquet"]),
    "MAC": lambda: ":".join(rs("0123456789ABCDEF", 2) for _ in range(6)),
    "COORD": lambda: f"{R.uniform(-80, 80):.4f}, {R.uniform(-170, 170):.4f}",
    "ISBN": lambda: f"978-{R.randint(0, 9)}-{R.randint(10, 99)}-{R.randint(100000, 999999)}-{R.randint(0, 9)}",
    "CONFIG_VALUE": lambda: R.choice(["user:1234:profile", "orders_by_customer", "created_at", "prod/db/credentials", "us-east-1", "gpt-4o-mini", "cl100k_base"]),
    "ERROR_CODE": lambda: R.choice(["E1234", "ERR_CONNECTION_RESET", "ECONNREFUSED", "HTTP 503", "0x80070005", "ORA-12541"]),
}  # fmt: skip

PLANTED = {k for k in GROUPS}
ALIASES = {"SECRET_TOKEN": "SECRET"}

# Templates. [[TYPE]] is replaced by a generated value and labeled. Types in GROUPS (or ALIASES) are planted
# values; every other type is a hard negative that must survive.
TEMPLATES: dict[str, list[str]] = {
    "chat": [
        "Hi, this is [[PERSON]]. I was charged twice for order [[ORDER_ID]] on [[DATE]] ([[PRICE]]). You can reach me at [[EMAIL]] or [[PHONE]].",
        "My card [[CREDIT_CARD]] was declined at checkout for [[SKU]]. The total was [[PRICE]] and my invoice number is [[INVOICE]].",
        "Please update my billing to IBAN [[IBAN]] and send the confirmation to [[EMAIL]]. Reference [[ORDER_ID]].",
        "For verification my SSN is [[SSN]] and my date of birth is [[DATE]]. Ticket [[REQUEST_ID]].",
        "I can't log in. My password is [[PASSWORD]] and the app says error [[ERROR_CODE]] since version [[VERSION]].",
        "Can you call me back at [[PHONE]]? I'm [[PERSON]], account manager for [[EMAIL]]. Tracking number [[TRACKING]].",
        "We migrated the cluster to [[SHORT_TOKEN]] and [[SHORT_TOKEN]]; the node at [[PRIVATE_IP]] still answers on port [[PORT]] but [[IP_ADDRESS]] times out.",
        "Here is the key the contractor left in Slack: [[OPENAI_KEY]] — please rotate it. Build [[GIT_SHA]] was deployed at [[TIMESTAMP]].",
        "Refund [[PRICE]] to the card ending in the one on file, order [[NONLUHN16]] (not a card number), customer [[PERSON]].",
        "The webhook secret leaked in the PR: [[STRIPE_KEY]]. Also the GitHub token [[GITHUB_TOKEN]] was in the CI logs for commit [[GIT_SHA]].",
        "Order [[ORDER_ID]] with item [[SKU]] shipped on [[DATE]]; ISBN [[ISBN]], tracking [[TRACKING]], weight [[NUMBER]].",
        "Our office is at [[COORD]]; the printer at [[PRIVATE_IP]] has MAC [[MAC]]. Contact [[PERSON]] at [[PHONE]].",
        "The customer wrote from [[IP_ADDRESS]] using [[EMAIL]]; session [[UUID]] started at [[TIMESTAMP]].",
        "Our Anthropic key is [[ANTHROPIC_KEY]] and the Google Maps key is [[GOOGLE_API_KEY]]; usage was [[NUMBER]] today.",
        "Wire [[PRICE]] to [[IBAN]] (beneficiary [[PERSON]]), invoice [[INVOICE]], due [[DATE]].",
        "Your password must be at least [[NUMBER]] characters; the reset token expires after [[NUMBER]] minutes. Contact [[EMAIL]].",
        "Thanks!\n--\n[[PERSON]] | Head of Ops\nM: [[PHONE]] | E: [[EMAIL]]\nSent from my phone on [[DATE]]",
        'From: "[[PERSON]]" <[[EMAIL]]>\nSubject: Re: ticket [[REQUEST_ID]] (order [[ORDER_ID]])\n\nThe charge of [[PRICE]] on [[DATE]] is wrong.',
    ],
    "tool_call": [
        '{"id": "[[REQUEST_ID]]", "type": "function", "function": {"name": "lookup_customer", "arguments": "{\\"email\\": \\"[[EMAIL]]\\", \\"order_id\\": \\"[[ORDER_ID]]\\"}"}}',
        '{"id": "[[REQUEST_ID]]", "type": "function", "function": {"name": "update_payment", "arguments": "{\\"card_number\\": \\"[[CREDIT_CARD]]\\", \\"amount\\": \\"[[PRICE]]\\", \\"sku\\": \\"[[SKU]]\\"}"}}',
        '{"name": "send_sms", "arguments": {"to": "[[PHONE]]", "body": "Your order [[ORDER_ID]] ships on [[DATE]]", "request_id": "[[UUID]]"}}',
        '{"name": "create_refund", "arguments": {"iban": "[[IBAN]]", "amount": "[[PRICE]]", "invoice": "[[INVOICE]]", "customer": "[[PERSON]]"}}',
        '{"name": "verify_identity", "arguments": {"ssn": "[[SSN]]", "dob": "[[DATE]]", "ticket": "[[REQUEST_ID]]"}}',
        '{"name": "http_request", "arguments": {"url": "https://api.example.com/v2/orders/[[ORDER_ID]]", "headers": {"Authorization": "Bearer [[JWT]]", "X-Request-Id": "[[UUID]]"}, "timeout_ms": [[NUMBER]]}}',
        '{"name": "deploy", "arguments": {"commit": "[[GIT_SHA]]", "image": "registry.local/app@[[HEX_DIGEST]]", "env": {"OPENAI_API_KEY": "[[OPENAI_KEY]]", "MAX_TOKENS": "[[PORT]]"}}}',
        '{"name": "run_sql", "arguments": "{\\"dsn\\": \\"postgresql://app:[[PASSWORD]]@[[PRIVATE_IP]]:5432/prod\\", \\"query\\": \\"select * from orders where id = [[ORDER_ID]]\\"}"}',
        '{"name": "geo_lookup", "arguments": {"ip": "[[IP_ADDRESS]]", "fallback": "[[PRIVATE_IP]]", "port": [[PORT]], "trace": "[[REQUEST_ID]]"}}',
        '{"name": "store_secret", "arguments": {"api_key": "[[SECRET_TOKEN]]", "key_id": "[[UUID]]", "max_tokens": [[NUMBER]], "cache_key": "[[CONFIG_VALUE]]"}}',
    ],
    "tool_result": [
        '{"customer": {"name": "[[PERSON]]", "email": "[[EMAIL]]", "phone": "[[PHONE]]", "created_at": "[[TIMESTAMP]]", "orders": [[[ORDER_ID]]]}, "request_id": "[[REQUEST_ID]]"}',
        '{"status": "ok", "payment": {"card": "[[CREDIT_CARD]]", "amount": "[[PRICE]]", "order": "[[NONLUHN16]]"}, "latency_ms": [[NUMBER]]}',
        '{"results": [{"sku": "[[SKU]]", "price": "[[PRICE]]", "isbn": "[[ISBN]]"}, {"sku": "[[SKU]]", "price": "[[PRICE]]", "updated": "[[TIMESTAMP]]"}]}',
        '{"instance": {"public_ip": "[[IP_ADDRESS]]", "private_ip": "[[PRIVATE_IP]]", "type": "[[SHORT_TOKEN]]", "ami": "[[HEX_DIGEST]]", "launched": "[[TIMESTAMP]]"}}',
        '{"token_usage": {"prompt_tokens": [[NUMBER]], "completion_tokens": [[NUMBER]]}, "model_version": "[[VERSION]]", "id": "[[REQUEST_ID]]"}',
        '{"credentials": {"aws_access_key_id": "[[AWS_ACCESS_KEY]]", "aws_secret_access_key": "[[AWS_SECRET_KEY]]", "region": "us-east-1", "expiration": "[[TIMESTAMP]]"}}',
    ],
    "log": [
        "[[TIMESTAMP]] INFO [req=[[REQUEST_ID]]] user=[[EMAIL]] ip=[[IP_ADDRESS]] path=/v1/orders/[[ORDER_ID]] latency=[[NUMBER]]",
        "[[TIMESTAMP]] WARN payment declined card=[[CREDIT_CARD]] order=[[ORDER_ID]] amount=[[PRICE]] pod=[[POD]]",
        "[[TIMESTAMP]] DEBUG outbound POST https://api.openai.com/v1/chat/completions headers={'Authorization': 'Bearer [[OPENAI_KEY]]'} trace=[[UUID]]",
        "[[TIMESTAMP]] ERROR connection from [[IP_ADDRESS]] to [[PRIVATE_IP]]:[[PORT]] refused ([[ERROR_CODE]]) after [[NUMBER]]",
        "[[TIMESTAMP]] INFO sms sent to [[PHONE]] for order [[ORDER_ID]] sku=[[SKU]] version=[[VERSION]]",
        "[[TIMESTAMP]] INFO slack notify url=[[SLACK_TOKEN]] channel=#ops commit=[[GIT_SHA]]",
        "[[TIMESTAMP]] INFO github push token=[[GITHUB_TOKEN]] repo=acme/app ref=[[GIT_SHA]] digest=[[HEX_DIGEST]]",
        '[[IP_ADDRESS]] - - [[[DATE]]] "GET /api/v1/users/[[UUID]] HTTP/1.1" 200 [[NUMBER]] "-" "curl/[[VERSION]]"',
        "[[TIMESTAMP]] AUDIT login ok user=[[PERSON]] email=[[EMAIL]] mfa=[[SHORT_TOKEN]] from=[[IP_ADDRESS]]",
    ],
    "config": [
        "# .env\nDATABASE_URL=postgres://app:[[PASSWORD]]@db.internal:5432/app\nOPENAI_API_KEY=[[OPENAI_KEY]]\nSTRIPE_SECRET_KEY=[[STRIPE_KEY]]\nMAX_TOKENS=[[NUMBER]]\nPORT=[[PORT]]\nAPP_VERSION=[[VERSION]]",
        "database:\n  host: [[PRIVATE_IP]]\n  port: [[PORT]]\n  user: app\n  password: [[SECRET]]\ncache:\n  key_prefix: [[CONFIG_VALUE]]\n  ttl: [[NUMBER]]",
        "[default]\naws_access_key_id = [[AWS_ACCESS_KEY]]\naws_secret_access_key = [[AWS_SECRET_KEY]]\nregion = us-west-2\n# rotated [[DATE]] by [[PERSON]]",
        'slack:\n  bot_token: [[SLACK_TOKEN]]\n  channel: C04[[SKU]]\ngithub:\n  token: "[[GITHUB_TOKEN]]"\n  sha: [[GIT_SHA]]',
        "[auth]\nclient_id = [[UUID]]\nclient_secret = [[SECRET_TOKEN]]\ntoken_url = https://login.example.com/oauth2/token\ntoken_ttl = [[NUMBER]]\nmax_tokens = [[NUMBER]]",
        "export ANTHROPIC_API_KEY=\"[[ANTHROPIC_KEY]]\"\nexport GOOGLE_API_KEY='[[GOOGLE_API_KEY]]'\nexport BUILD_SHA=[[GIT_SHA]]\nexport LISTEN=0.0.0.0:[[PORT]]",
        "services:\n  api:\n    image: acme/api@[[HEX_DIGEST]]\n    environment:\n      - REDIS_PASSWORD=[[PASSWORD]]\n      - JWT_SECRET=[[SECRET_TOKEN]]\n      - NODE_VERSION=[[VERSION]]",
        "[[PRIVATE_KEY]]",
        '{\n  "type": "service_account",\n  "project_id": "acme-prod",\n  "private_key_id": "[[GIT_SHA]]",\n  "client_email": "[[EMAIL]]"\n}',
    ],
    "stack_trace": [
        'Traceback (most recent call last):\n  File "[[PATH]]", line [[NUMBER]], in connect\n    conn = psycopg.connect("postgresql://app:[[PASSWORD]]@[[PRIVATE_IP]]:5432/prod")\npsycopg.OperationalError: connection to server at "[[PRIVATE_IP]]", port [[PORT]] failed: timeout expired',
        'Traceback (most recent call last):\n  File "[[PATH]]", line [[NUMBER]], in charge\n    stripe.Charge.create(amount=[[NUMBER]], source="tok_visa", api_key="[[STRIPE_KEY]]")\nstripe.error.CardError: Your card number [[CREDIT_CARD]] was declined. Request [[REQUEST_ID]]',
        'Exception in thread "main" java.lang.IllegalStateException: invalid token [[JWT]] for user [[EMAIL]]\n\tat com.acme.auth.Verifier.check(Verifier.java:[[NUMBER]])\n\tat com.acme.api.Server.handle(Server.java:[[NUMBER]])',
        "Error: request to https://api.example.com failed, reason: connect [[ERROR_CODE]] [[IP_ADDRESS]]:443\n    at ClientRequest.<anonymous> ([[PATH]]:[[NUMBER]]:15)\n    at node:internal/process/task_queues:[[NUMBER]]:5  trace_id=[[UUID]]",
        "panic: runtime error: invalid memory address\n\ngoroutine [[NUMBER]] [running]:\nmain.handler(0xc000[[NUMBER]])\n\t[[PATH]]:[[NUMBER]] +0x1d  build=[[GIT_SHA]] at [[TIMESTAMP]]",
    ],
    "code": [
        'client = OpenAI(api_key="[[OPENAI_KEY]]", timeout=[[NUMBER]])\nresp = client.chat.completions.create(model="gpt-4o-mini", max_tokens=[[NUMBER]])',
        'import anthropic\nclient = anthropic.Anthropic(api_key="[[ANTHROPIC_KEY]]")  # added [[DATE]]\nprint(client.models.list())  # v[[VERSION]]',
        "curl -s -H 'Authorization: Bearer [[SECRET_TOKEN]]' https://api.example.com/v1/orders/[[ORDER_ID]] -d '{\"sku\": \"[[SKU]]\"}'",
        'requests.post(url, json={"password": "[[PASSWORD]]", "username": "[[EMAIL]]", "retries": [[NUMBER]]})',
        "mysql -h [[PRIVATE_IP]] -P [[PORT]] -u root --password=[[PASSWORD]] orders < dump_[[DATE]].sql",
        "docker run -d -e POSTGRES_PASSWORD=[[PASSWORD]] -e TZ=UTC -p [[PORT]]:5432 postgres@[[HEX_DIGEST]]",
        "GET /v1/orders/[[ORDER_ID]] HTTP/1.1\nHost: api.example.com\nX-API-Key: [[SECRET_TOKEN]]\nX-Request-Id: [[UUID]]\nX-Forwarded-For: [[IP_ADDRESS]], [[PRIVATE_IP]]\nUser-Agent: acme-agent/[[VERSION]]",
        'const token = "[[GITHUB_TOKEN]]"; // expires [[TIMESTAMP]]\nconst octokit = new Octokit({ auth: token, userAgent: "acme/[[VERSION]]" });',
    ],
}


def render(template: str) -> tuple[list[tuple[str, str | None]], None]:
    """Splits a template into (text, type) segments with generated values."""
    segments: list[tuple[str, str | None]] = []
    pos = 0
    for m in re.finditer(r"\[\[([A-Z0-9_]+)\]\]", template):
        segments.append((template[pos : m.start()], None))
        kind = m.group(1)
        segments.append((GEN[kind](), kind))
        pos = m.end()
    segments.append((template[pos:], None))
    return segments, None


def escape(segment: str) -> str:
    return json.dumps(segment, ensure_ascii=False)[1:-1]


def assemble(segments: list[tuple[str, str | None]], prefix: str = "", suffix: str = "", escaped: bool = False):
    text, spans, negatives = prefix, [], []
    for value, kind in segments:
        piece = escape(value) if escaped else value
        start = len(text)
        text += piece
        if kind is None:
            continue
        label = ALIASES.get(kind, kind)
        if label in GROUPS:
            spans.append({"start": start, "end": len(text), "type": label, "group": GROUPS[label]})
        else:
            negatives.append({"start": start, "end": len(text), "type": kind})
    return text + suffix, spans, negatives


WRAPPERS = [
    ('{"role": "tool", "tool_call_id": "call_1", "content": "', '"}'),
    ('{"messages": [{"role": "user", "content": "', '"}], "model": "gpt-4o-mini", "max_tokens": 512}'),
    ('POST /v1/chat/completions body={"input": "', '"} status=200'),
]


def generate(n_records: int = 900) -> list[dict]:
    records = []
    kinds = list(TEMPLATES)
    for i in range(n_records):
        kind = kinds[i % len(kinds)]
        segments, _ = render(R.choice(TEMPLATES[kind]))
        escaped = R.random() < 0.25
        if escaped:
            prefix, suffix = R.choice(WRAPPERS)
            text, spans, negatives = assemble(segments, prefix, suffix, escaped=True)
            kind = f"{kind}+json_escaped"
        else:
            text, spans, negatives = assemble(segments)
        records.append({"id": f"r{i:04d}", "kind": kind, "text": text, "spans": spans, "negatives": negatives})
    return records


def main() -> None:
    records = generate()
    with OUT.open("w") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    planted = Counter(s["type"] for r in records for s in r["spans"])
    negatives = Counter(n["type"] for r in records for n in r["negatives"])
    print(f"{len(records)} records, {sum(planted.values())} planted, {sum(negatives.values())} hard negatives, "
          f"{OUT.stat().st_size / 1e6:.2f} MB", file=sys.stderr)  # fmt: skip
    print(dict(planted), file=sys.stderr)


if __name__ == "__main__":
    main()
