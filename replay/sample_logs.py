"""A deterministic generator of production request logs for the embedded default endpoint.

The workload is a multi-tenant customer-support agent: each tenant has its own long system
prompt, tool set and JSON output schema; conversations run several turns (each turn resends
the history, as chat clients do); arrivals come in bursts; a realistic share of messages and
tool results carry personal data. Prompts stay within SmolLM2's 2048-token context (a few
hundred to ~1200 tokens) and outputs within 16-128 tokens, so the CPU engine can serve it.

Log line format (one JSON object per line; the format ``replay.ingest.read_request_log`` reads):
``{"timestamp": RFC 3339 or epoch seconds, "request_id": str, "tenant": str,
"request": <chat-completions body>, "usage": {"completion_tokens": int, "prompt_tokens"?: int,
"prompt_tokens_details"?: {"cached_tokens": int}}}``
"""

from __future__ import annotations

import heapq
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from replay import pii_fixtures

START = datetime(2026, 11, 2, 9, 0, 0, tzinfo=timezone.utc)
MODEL_NAME = "support-agent"


@dataclass(frozen=True)
class Tenant:
    name: str
    company: str
    product: str
    system_prompt: str
    tools: tuple[dict, ...]
    response_format: dict
    intents: tuple[str, ...]
    max_tokens: int
    temperature: float
    weight: float


_POLICY = (
    "Always greet the customer by acknowledging their issue before asking for details.",
    "Never promise a refund, credit or replacement that the refund policy below does not allow.",
    "If the customer is angry, apologise once, stay calm, and focus on the next concrete step.",
    "Use the tools to look up facts; never guess order numbers, balances, dates or delivery windows.",
    "Ask for at most one piece of missing information per reply, and explain why you need it.",
    "Do not repeat personal data back to the customer; refer to it as 'the card ending in' or 'your address on file'.",
    "Escalate to a human agent when the customer asks for one twice, mentions legal action, or reports a safety issue.",
    "Keep replies short: two to four sentences, plain language, no internal jargon or ticket codes.",
    "When a tool fails, tell the customer you are checking another way, then try the alternative tool once.",
    "Summarise what you did at the end of the conversation and say what happens next and when.",
    "Refunds above the automatic limit need a supervisor; create a ticket with priority high and tell the customer.",
    "For outages, check the outage map first; if there is a known outage, give the estimated restore time.",
    "Verify identity with the account email or the last four digits of the card before changing an order.",
    "Never ask for a full card number, a password, or a one-time code in chat.",
    "If the request is outside support (sales, press, jobs), give the right contact page and close politely.",
    "Respect the customer's language; if they write in another language, answer in that language.",
    "Delivery delays under two business days are normal; beyond that, offer to open a trace with the carrier.",
    "Warranty claims need the purchase date and a photo of the damage; explain how to upload them.",
    "Do not speculate about causes of incidents; share only what the status page says.",
    "Record the resolution in the ticket with the intent label from the output schema.",
)
_FACTS = (
    "{company} sells {product} in twelve countries and supports customers around the clock.",
    "The automatic refund limit at {company} is {n} dollars per order within thirty days of delivery.",
    "Standard shipping takes three to five business days; express shipping takes one to two.",
    "Loyalty members get free returns and a dedicated queue; check the member flag on the account.",
    "The {product} warranty covers manufacturing defects for {n} months from the purchase date.",
    "Business customers have an account manager; route billing disputes for them to the business desk.",
    "Scheduled maintenance happens on Sundays between 2 and 4 in the morning, local time.",
    "Price matching applies only to identical items sold by authorised retailers in the same country.",
    "Gift cards cannot be refunded to a bank account; balances stay on the card for five years.",
    "The mobile app shows live order tracking; suggest it when customers ask where an order is.",
)
_TENANTS = (
    (
        "acme_telecom",
        "Acme Telecom",
        "home internet and mobile plans",
        ["billing_question", "outage", "plan_change", "technician_visit", "cancel_service"],
    ),
    (
        "globex_bank",
        "Globex Bank",
        "checking accounts and credit cards",
        ["card_dispute", "transfer_issue", "fraud_report", "statement_question", "account_update"],
    ),
    (
        "initech_software",
        "Initech Software",
        "project management software",
        ["login_problem", "bug_report", "billing_question", "feature_request", "data_export"],
    ),
    (
        "umbrella_travel",
        "Umbrella Travel",
        "flights, hotels and travel insurance",
        ["booking_change", "refund_request", "baggage_issue", "insurance_claim", "seat_upgrade"],
    ),
    (
        "hooli_retail",
        "Hooli Retail",
        "consumer electronics",
        ["order_status", "return_request", "warranty_claim", "price_match", "address_change"],
    ),
)
_TOOLS = {
    "lookup_order": (
        "Look up an order by its order number.",
        {"order_id": {"type": "string", "description": "Order number, e.g. A123456"}},
    ),
    "get_account": ("Fetch the customer's account record.", {"customer_id": {"type": "string"}}),
    "create_ticket": (
        "Open a support ticket for follow-up by a human agent.",
        {"summary": {"type": "string"}, "priority": {"type": "string", "enum": ["low", "normal", "high"]}},
    ),
    "refund_payment": (
        "Refund an order, fully or partly.",
        {"order_id": {"type": "string"}, "amount": {"type": "number", "minimum": 0}},
    ),
    "check_outage": ("Check the outage map for a postal code.", {"postal_code": {"type": "string"}}),
    "schedule_visit": (
        "Book a technician visit.",
        {
            "date": {"type": "string", "format": "date"},
            "window": {"type": "string", "enum": ["morning", "afternoon", "evening"]},
        },
    ),
    "track_shipment": ("Track a shipment with the carrier.", {"tracking_number": {"type": "string"}}),
    "update_contact": (
        "Update the customer's contact details on file.",
        {"field": {"type": "string", "enum": ["email", "phone", "address"]}, "value": {"type": "string"}},
    ),
}
_OPENERS = ("Hi there,", "Hello,", "Hey,", "Good morning.", "Hi,", "", "", "Hello support team,", "Quick question:")
_PROBLEMS = {
    "default": (
        "I have a problem with my {thing} and nobody has answered my emails so far.",
        "Something is wrong with my {thing} since last {day}.",
        "I was charged twice for my {thing} this month and I want to understand why.",
        "My {thing} stopped working after the last update and I need it for work tomorrow.",
        "I need to change something about my {thing} before the end of the week.",
        "Can you tell me what is going on with my {thing}? The status has not changed in days.",
        "I want to cancel the {thing} I ordered by mistake yesterday evening.",
        "The {thing} arrived damaged, the box was crushed and one part is missing.",
    ),
}
_DETAILS = (
    "The reference number is {ref}.",
    "I already tried restarting everything twice.",
    "This is the third time this happens this month.",
    "I am travelling next week so it is urgent.",
    "The app just shows an error code {code} and closes.",
    "Your website says it was delivered but it was not.",
    "I have been a customer for {n} years and never had this problem.",
    "My neighbour has the same issue.",
    "The chat bot earlier told me to wait 24 hours, and I waited.",
    "I attached a screenshot in my previous email.",
)
_ASKS = (
    "What can you do about it?",
    "Can you fix this today?",
    "Please advise.",
    "How long will this take?",
    "Can I get a refund?",
    "Who should I talk to?",
    "Is there any workaround?",
    "Thanks in advance.",
)
_FOLLOWUPS = (
    "Ok, thanks. What happens next?",
    "That did not work, same problem.",
    "Can you check again please?",
    "Fine. And when will I get the confirmation email?",
    "I would rather talk to a person.",
    "Yes, go ahead with that.",
    "No, the order number is different, let me check.",
    "Great, that solved it. One more thing: {problem}",
)
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "weekend")


def _tenant(index: int) -> Tenant:
    """Tenant ``index``: content depends only on the index, so prompts are stable across seeds."""
    name, company, product, intents = _TENANTS[index]
    rng = random.Random(1000 + index)
    lines = [
        f"You are the virtual support agent of {company}, which sells {product}.",
        f"Your job is to resolve customer requests about {product} quickly, accurately and politely.",
        "",
        "# Rules",
    ]
    n_rules = 6 + index
    lines += [f"{i + 1}. {r}" for i, r in enumerate(rng.sample(_POLICY, min(n_rules, len(_POLICY))))]
    lines += ["", "# Facts"]
    lines += [
        "- " + f.format(company=company, product=product, n=rng.choice([30, 50, 75, 100, 150, 200, 12, 24]))
        for f in rng.sample(_FACTS, 3 + index % 3)
    ]
    lines += [
        "",
        "# Output",
        "Answer with a JSON object that follows the response schema: a short reply for the customer,",
        "the intent label, whether a human must take over, and the next action you will take.",
        "If you need a tool, call it before answering. Intent labels: " + ", ".join(intents) + ".",
    ]
    # Tenants differ in prompt length: repeat an example block to reach the tenant's size.
    examples = [
        f"Example {k + 1}: a customer asking about {rng.choice(intents).replace('_', ' ')} gets a reply that "
        f"states the next step, a time frame and, where needed, the ticket that was opened. "
        f"{rng.choice(_POLICY)}"
        for k in range(index)
    ]
    lines += ["", "# Examples"] + examples
    tool_names = rng.sample(sorted(_TOOLS), 3 + index % 3)
    tools = tuple(
        {
            "type": "function",
            "function": {
                "name": t,
                "description": _TOOLS[t][0],
                "parameters": {
                    "type": "object",
                    "properties": _TOOLS[t][1],
                    "required": list(_TOOLS[t][1])[:1],
                    "additionalProperties": False,
                },
            },
        }
        for t in tool_names
    )
    schema = {
        "type": "object",
        "properties": {
            "reply": {"type": "string", "description": "What the customer reads"},
            "intent": {"type": "string", "enum": list(intents)},
            "escalate": {"type": "boolean"},
            "next_action": {
                "type": "string",
                "enum": ["none", "wait_for_customer", "tool_call", "ticket_created", "handoff"],
            },
        },
        "required": ["reply", "intent", "escalate", "next_action"],
        "additionalProperties": False,
    }
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": f"{name}_reply", "strict": True, "schema": schema},
    }
    return Tenant(
        name,
        company,
        product,
        "\n".join(lines),
        tools,
        response_format,
        tuple(intents),
        max_tokens=(64, 96, 128, 80, 112)[index],
        temperature=(0.2, 0.0, 0.3, 0.5, 0.2)[index],
        weight=(0.3, 0.25, 0.2, 0.15, 0.1)[index],
    )


TENANTS: tuple[Tenant, ...] = tuple(_tenant(i) for i in range(len(_TENANTS)))


def _user_text(rng: random.Random, tenant: Tenant, pii_rate: float) -> str:
    thing = rng.choice(tenant.product.replace(" and ", ", ").split(", ")).rstrip("s") or tenant.product
    parts = [rng.choice(_OPENERS), rng.choice(_PROBLEMS["default"]).format(thing=thing, day=rng.choice(_DAYS))]
    for _ in range(rng.randint(0, 3)):
        parts.append(
            rng.choice(_DETAILS).format(
                ref=f"A{rng.randint(100000, 999999)}", code=rng.randint(100, 999), n=rng.randint(2, 15)
            )
        )
    while rng.random() < pii_rate:
        parts.insert(rng.randint(1, len(parts)), pii_fixtures.pii_sentence(rng.choice(pii_fixtures.CATEGORIES), rng)[0])
    parts.append(rng.choice(_ASKS))
    return " ".join(p for p in parts if p)


def _assistant_json(rng: random.Random, tenant: Tenant) -> str:
    reply = rng.choice(
        [
            "I am sorry about the trouble. I have checked your account and opened a ticket; you will hear from us within 24 hours.",
            "Thanks for the details. I can see the order and I have started the process; a confirmation email follows.",
            "I understand. Could you share the order number so I can look it up?",
            "I have checked the status page: there is a known issue in your area, expected to be fixed this evening.",
        ]
    )
    return json.dumps(
        {
            "reply": reply,
            "intent": rng.choice(tenant.intents),
            "escalate": rng.random() < 0.1,
            "next_action": rng.choice(["none", "wait_for_customer", "ticket_created"]),
        }
    )


def _tool_round(rng: random.Random, tenant: Tenant, call_index: int, pii_rate: float) -> list[dict]:
    tool = rng.choice(tenant.tools)["function"]
    name = tool["name"]
    args = {
        k: (
            f"A{rng.randint(100000, 999999)}"
            if v.get("type") == "string" and "enum" not in v
            else (v["enum"][0] if "enum" in v else round(rng.uniform(5, 200), 2))
        )
        for k, v in tool["parameters"]["properties"].items()
    }
    call_id = f"call_{call_index:06d}"
    result: dict = {"status": "ok", "checked_at": "2026-11-02"}
    if name in ("get_account", "update_contact") or rng.random() < pii_rate:
        result.update(
            {
                "name": pii_fixtures.fake_value("PERSON", rng),
                "email": pii_fixtures.fake_value("EMAIL", rng),
                "address": pii_fixtures.fake_value("STREET_ADDRESS", rng),
                "member": rng.random() < 0.3,
            }
        )
    else:
        result.update(
            {"state": rng.choice(["processing", "shipped", "delivered", "delayed"]), "eta_days": rng.randint(0, 6)}
        )
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)},
    ]


@dataclass(order=True)
class _Conv:
    next_t: float
    seq: int
    tenant: Tenant = field(compare=False)
    messages: list = field(compare=False)
    turns_left: int = field(compare=False)
    user_id: str = field(compare=False)
    rng: random.Random = field(compare=False)


def generate(n: int, seed: int = 0, pii_rate: float = 0.18) -> Iterator[str]:
    """Yield ``n`` log lines in arrival order. Same (n, seed) -> same lines, byte for byte.

    Arrivals: conversations start by a two-state (busy/quiet) modulated Poisson process, and each
    conversation's later turns follow after a think time, so traffic is bursty and multi-turn.
    """
    rng = random.Random(seed)
    busy, t_switch, t_start, seq, call_index = False, rng.expovariate(1 / 120), 0.0, 0, 0
    active: list[_Conv] = []
    weights = [t.weight for t in TENANTS]

    def next_start(t: float) -> float:
        nonlocal busy, t_switch
        while True:
            rate = 1.6 if busy else 0.25
            cand = t + rng.expovariate(rate)
            if cand < t_switch:
                return cand
            t, busy = t_switch, not busy
            t_switch = t + rng.expovariate(1 / (45 if busy else 150))

    t_start = next_start(0.0)
    emitted = 0
    while emitted < n:
        if not active or t_start <= active[0].next_t:
            tenant = rng.choices(TENANTS, weights)[0]
            conv_rng = random.Random(rng.getrandbits(64))
            turns = min(1 + int(conv_rng.expovariate(1 / 1.2)), 4)
            conv = _Conv(
                t_start,
                seq,
                tenant,
                [{"role": "system", "content": tenant.system_prompt}],
                turns,
                f"cust_{conv_rng.getrandbits(32):08x}",
                conv_rng,
            )
            seq += 1
            heapq.heappush(active, conv)
            t_start = next_start(t_start)
            continue
        conv = heapq.heappop(active)
        r = conv.rng
        user_turn = (
            _user_text(r, conv.tenant, pii_rate)
            if len(conv.messages) == 1
            else r.choice(_FOLLOWUPS).format(problem=_user_text(r, conv.tenant, pii_rate))
        )
        conv.messages.append({"role": "user", "content": user_turn})
        if r.random() < 0.3:  # the agent's second call of this turn: after its tool call and the result
            call_index += 1
            conv.messages.extend(_tool_round(r, conv.tenant, call_index, pii_rate))
        tenant = conv.tenant
        body = {
            "model": MODEL_NAME,
            "messages": conv.messages,
            "tools": list(tenant.tools),
            "tool_choice": "auto",
            "response_format": tenant.response_format,
            "max_tokens": tenant.max_tokens,
            "temperature": tenant.temperature,
            "top_p": 0.9,
            "user": conv.user_id,
        }
        mean_out = tenant.max_tokens * 0.55
        out = int(min(tenant.max_tokens, max(16, r.lognormvariate(math.log(mean_out), 0.45))))
        ts = START + timedelta(seconds=conv.next_t)
        emitted += 1
        yield json.dumps(
            {
                "timestamp": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "request_id": f"req-{seed}-{emitted:07d}",
                "tenant": tenant.name,
                "request": body,
                "usage": {"completion_tokens": out},
            },
            ensure_ascii=False,
        )
        conv.messages.append({"role": "assistant", "content": _assistant_json(r, tenant)})
        conv.turns_left -= 1
        if conv.turns_left > 0:
            conv.next_t += 2.0 + out * 0.05 + r.expovariate(1 / 20)
            heapq.heappush(active, conv)


def write_sample(path: Path | str, n: int = 2000, seed: int = 0) -> Path:
    """Write ``n`` generated lines to ``path`` (atomically) and return it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for line in generate(n, seed):
            f.write(line + "\n")
    tmp.replace(path)
    return path


BUNDLED_SAMPLE = Path(__file__).resolve().parent.parent / "data" / "sample" / "support_logs.jsonl"
BUNDLED_N, BUNDLED_SEED = 2000, 0


def bundled_sample() -> Path:
    """The bundled sample log (TrafficSpec kind 'sample'); regenerated if it is missing."""
    if not BUNDLED_SAMPLE.exists():
        write_sample(BUNDLED_SAMPLE, BUNDLED_N, BUNDLED_SEED)
    return BUNDLED_SAMPLE


def planted_pii_logs(
    n: int, seed: int = 0, held_out_names: float = 0.0
) -> tuple[list[str], list[pii_fixtures.Planted]]:
    """``n`` request-log lines (the sample workload) with PII of every category planted.

    Each line gets 1-3 planted values in user and tool messages, categories cycling so every
    category is well represented. ``held_out_names`` is the share of PERSON values that are
    made-up names in no list. Returns (lines, planted values with their line numbers).
    """
    rng = random.Random(seed * 7919 + 17)
    lines: list[str] = []
    planted: list[pii_fixtures.Planted] = []
    k = 0
    for i, line in enumerate(generate(n, seed=seed, pii_rate=0.0), start=1):
        rec = json.loads(line)
        msgs = rec["request"]["messages"]
        targets = [m for m in msgs if m["role"] in ("user", "tool") and isinstance(m.get("content"), str)]
        for _ in range(rng.randint(1, 3)):
            cat = pii_fixtures.CATEGORIES[k % len(pii_fixtures.CATEGORIES)]
            k += 1
            value = pii_fixtures.held_out_name(rng) if cat == "PERSON" and rng.random() < held_out_names else None
            sentence, value = pii_fixtures.pii_sentence(cat, rng, value)
            msg = rng.choice(targets)
            msg["content"] = f"{msg['content']} {sentence}" if rng.random() < 0.5 else f"{sentence} {msg['content']}"
            planted.append(pii_fixtures.Planted(i, cat, value))
        lines.append(json.dumps(rec, ensure_ascii=False))
    return lines, planted
