"""Payments scope: payments-api, Stripe, webhooks, declines and dunning, refunds, the ledger."""

from __future__ import annotations

from .model import Copy, Doc, page, thread

S = "payments"

DOCS: list[Doc] = []

# --- INC-2291: the double-capture incident channel (one source, many messages on one topic) -------------
DOCS += thread(
    "slack/#inc-2291-double-capture",
    S,
    "#inc-2291-double-capture",
    ("INC-2291",),
    [
        (
            "inc2291-open",
            "2024-03-14",
            "marcus",
            "Opening this channel for INC-2291. Support has 40+ tickets since 09:00 UTC from customers who see two "
            "identical charges for one order. Paging payments on-call (Jonas).",
        ),
        (
            "inc2291-more-tickets",
            "2024-03-14",
            "ruth",
            "Another 30 'charged twice' tickets in the last half hour, several with screenshots of two identical card "
            "transactions on the same day. I'm tagging them all INC-2291 in the helpdesk.",
        ),
        (
            "inc2291-status",
            "2024-03-14",
            "marcus",
            "Status page updated: 'Some customers have been charged twice for a single order. We have found the cause "
            "and will refund every duplicate charge.' Next update at 12:30.",
        ),
        (
            "inc2291-stripe",
            "2024-03-14",
            "jonas",
            "Looking. Stripe dashboard confirms it: the affected PaymentIntents have two successful captures 30-35 "
            "seconds apart. Not a display bug, the money really moved twice.",
        ),
        (
            "inc2291-flag",
            "2024-03-14",
            "priya",
            "Timeline lines up with flipping `capture.async` on yesterday at 16:40 UTC. The async capture path "
            "shipped dark in v2.13.0 and was off until then, so yesterday was its first day of real traffic.",
        ),
        (
            "inc2291-visibility",
            "2024-03-14",
            "leah",
            "conveyor's visibility timeout on the payments-capture queue is 30s. If the Stripe call takes longer, "
            "the message gets claimed by a second worker. Capture p99 today is ~41s because Stripe is slow on their side.",
        ),
        (
            "inc2291-uuid",
            "2024-03-14",
            "jonas",
            "And the idempotency key is generated inside the job handler with randomUUID(), so every delivery sends a "
            "fresh key and Stripe happily captures again. That's the bug.",
        ),
        (
            "inc2291-decision",
            "2024-03-14",
            "sam",
            "Decision for now: turn `capture.async` off everywhere, don't roll back the binary (v2.14.2 has the 3DS "
            "fix we need). Marcus is flipping it. Nobody touches payments-api flags without saying so here.",
        ),
        (
            "inc2291-mitigated",
            "2024-03-14",
            "marcus",
            "`capture.async` is off in prod as of 11:52 UTC. Captures are back on the request path; no new "
            "duplicates in the last 15 minutes.",
        ),
        (
            "inc2291-macro",
            "2024-03-14",
            "ruth",
            "Support macro for affected customers is drafted: apologise, confirm the extra charge is refunded within "
            "5-10 business days, nothing for them to do. Please don't promise anything faster than that.",
        ),
        (
            "inc2291-three",
            "2024-03-14",
            "priya",
            "Checked whether anyone got charged three times: no. Every affected order has exactly two captures, which fits "
            "one redelivery per slow job.",
        ),
        (
            "inc2291-merchants",
            "2024-03-14",
            "ruth",
            "Two merchants are asking whether they should refund the double charges themselves. Answer: no, we refund "
            "from our side, they'd end up refunding twice.",
        ),
        (
            "inc2291-blast",
            "2024-03-14",
            "amara",
            "Blast radius query done: 212 PaymentIntents with more than one capture between 2024-03-13 16:40 and "
            "2024-03-14 11:52 UTC, €18,430.12 over-charged in total. CSV is in the incident folder.",
        ),
        (
            "inc2291-refunds",
            "2024-03-15",
            "jonas",
            "Refunds for the 212 duplicates are going out through scripts/bulk_refund.ts at 20/s. We tried 50/s "
            "first and Stripe started answering HTTP 429.",
        ),
        (
            "inc2291-fix",
            "2024-03-15",
            "priya",
            "Fix is NW-1432: the key becomes `capture:<payment_intent_id>`, created by the API handler and carried in "
            "the job payload, never generated in the worker. Also raising the visibility timeout for this queue to 120s.",
        ),
        (
            "inc2291-guard",
            "2024-03-15",
            "leah",
            "Added a guard to conveyor: a queue can declare `requiresIdempotencyKey: true` and enqueue throws if the "
            "payload doesn't carry one. payments-capture and refunds-execute both have it now.",
        ),
        (
            "inc2291-shipped",
            "2024-03-16",
            "priya",
            "v2.14.3 with the NW-1432 fix is in prod since 10:05 UTC. Replayed a redelivered capture job in staging: "
            "Stripe hands back the original capture, no second charge. Flag goes back on after Tuesday's review.",
        ),
        (
            "inc2291-close",
            "2024-03-16",
            "sam",
            "Closing the incident channel. Postmortem is postmortems/INC-2291.md, we review it at Tuesday's payments "
            "sync. Thanks all, especially support for absorbing the ticket wave.",
        ),
    ],
    kind="incident",
)

# --- INC-2219: webhook signatures after a secret rotation ---------------------------------------------
DOCS += thread(
    "slack/#inc-2219-webhook-signatures",
    S,
    "#inc-2219-webhook-signatures",
    ("INC-2219", "webhooks"),
    [
        (
            "inc2219-open",
            "2024-02-06",
            "jonas",
            "Stripe webhooks to prod have been failing with 400 since 14:10. Logs say 'No signatures found matching "
            "the expected signature for payload'. Nothing was deployed to payments-api today.",
        ),
        (
            "inc2219-cause",
            "2024-02-06",
            "marcus",
            "There's a secrets change at 14:05: the signing secret for the prod endpoint was rolled in the Stripe "
            "dashboard. Vault has the new value but the pods still carry the old STRIPE_WEBHOOK_SECRET from when they started.",
        ),
        (
            "inc2219-me",
            "2024-02-06",
            "priya",
            "That was me, quarterly secrets review. I picked 'expire now' for the old secret and assumed the pods read "
            "Vault live. They don't, it's injected as env at start. Restarting payments-api.",
        ),
        (
            "inc2219-recovered",
            "2024-02-06",
            "jonas",
            "Signatures verify again after the restart. Stripe keeps retrying failed deliveries for up to three days, "
            "so nothing is lost; the backlog of ~3,900 events is draining.",
        ),
        (
            "inc2219-followup",
            "2024-02-06",
            "priya",
            "Follow-up NW-1367: verify against both STRIPE_WEBHOOK_SECRET and STRIPE_WEBHOOK_SECRET_OLD during a grace "
            "window, so a rotation never needs a synchronised restart again.",
        ),
        (
            "inc2219-close",
            "2024-02-06",
            "sam",
            "INC-2219 closed: 47 minutes of rejected deliveries, no data lost. Priya, please put the rotation steps "
            "into the webhook runbook.",
        ),
    ],
    kind="incident",
)

# --- Release notes: one page, one entry per release (versions that differ by a digit) -----------------
DOCS += [
    Doc(
        "rel-2110",
        S,
        "note",
        "2024-01-23",
        "jonas",
        "releases/payments-api/CHANGELOG.md",
        "payments-api v2.11.0",
        "v2.11.0: adds the Apple Pay domain verification route and removes the legacy /v1/charges endpoint "
        "(deprecated since October). Base image is node 20.11.0.",
        ("release", "payments-api"),
    ),
    Doc(
        "rel-2124",
        S,
        "note",
        "2024-02-20",
        "jonas",
        "releases/payments-api/CHANGELOG.md",
        "payments-api v2.12.4",
        "v2.12.4 (patch): express 4.18.3; JPY refund previews no longer show two decimals; webhook verification "
        "accepts STRIPE_WEBHOOK_SECRET_OLD during a rotation window (NW-1367).",
        ("release", "payments-api"),
    ),
    Doc(
        "rel-2130",
        S,
        "note",
        "2024-02-27",
        "priya",
        "releases/payments-api/CHANGELOG.md",
        "payments-api v2.13.0",
        "v2.13.0: capture can run asynchronously: the API enqueues it on the conveyor payments-capture queue and "
        "answers the checkout straight away, a worker talks to Stripe. Behind the flag `capture.async` (off by "
        "default). Decline mapping table exposed at /internal/declines. Base image moves to node 20.11.1.",
        ("release", "payments-api", "capture"),
    ),
    Doc(
        "rel-2140",
        S,
        "note",
        "2024-03-05",
        "jonas",
        "releases/payments-api/CHANGELOG.md",
        "payments-api v2.14.0",
        "v2.14.0: partial refunds through the API (`amount` on POST /refunds). The webhook handler now logs event "
        "id and type on every 4xx response.",
        ("release", "payments-api", "refunds"),
    ),
    Doc(
        "rel-2142",
        S,
        "note",
        "2024-03-12",
        "jonas",
        "releases/payments-api/CHANGELOG.md",
        "payments-api v2.14.2",
        "v2.14.2: fixes the 3-D Secure challenge redirect dropping the return_url query string for some issuers "
        "(NW-1388). No config changes.",
        ("release", "payments-api", "3ds"),
    ),
    Doc(
        "rel-2143",
        S,
        "note",
        "2024-03-16",
        "priya",
        "releases/payments-api/CHANGELOG.md",
        "payments-api v2.14.3",
        "v2.14.3: NW-1432. The capture idempotency key is derived from the PaymentIntent id and travels in the "
        "job payload, so a redelivered capture job can no longer capture a second time. payments-capture "
        "visibility timeout raised from 30s to 120s.",
        ("release", "payments-api", "idempotency", "NW-1432"),
    ),
    Doc(
        "rel-2150",
        S,
        "note",
        "2024-05-07",
        "priya",
        "releases/payments-api/CHANGELOG.md",
        "payments-api v2.15.0",
        "v2.15.0: dunning scheduler for soft declines (see wiki/payments/dunning.md). Every ERR_PAYMENT_DECLINED_* "
        "response now carries the acquirer's raw code in `decline.raw_code`.",
        ("release", "payments-api", "dunning"),
    ),
    Doc(
        "rel-2154",
        S,
        "note",
        "2024-10-01",
        "jonas",
        "releases/payments-api/CHANGELOG.md",
        "payments-api v2.15.4",
        "v2.15.4 (security): express 4.21.0, which pulls in path-to-regexp 0.1.10 and body-parser 1.20.3. "
        "No behaviour change expected; route tests pass.",
        ("release", "payments-api", "security"),
    ),
]

# --- Decline codes reference: one wiki page, one entry per code ------------------------------------------
DOCS += page(
    "wiki/payments/decline-codes.md",
    S,
    "Decline codes",
    "2024-02-08",
    "priya",
    ("declines",),
    [
        (
            "decl-overview",
            "Our ERR_PAYMENT_DECLINED_NN codes carry the ISO 8583 response code from the acquirer, zero-padded to two "
            "digits. Stripe's decline_code is mapped onto them in services/payments/src/declines/map.ts; anything "
            "unmapped becomes ERR_PAYMENT_DECLINED_05.",
        ),
        (
            "decl-05",
            "ERR_PAYMENT_DECLINED_05 - do not honor. The issuer refused without giving a reason. Soft: one retry after "
            "24 hours, then ask for a different card. We genuinely can't see why, so support shouldn't guess.",
            ("soft",),
        ),
        (
            "decl-14",
            "ERR_PAYMENT_DECLINED_14 - invalid card number. Hard. Almost always a typo that the Luhn check in Elements "
            "should have caught; if we see bursts of these it's usually card testing, tell Kofi.",
            ("hard",),
        ),
        (
            "decl-41-43",
            "ERR_PAYMENT_DECLINED_41 (lost) and ERR_PAYMENT_DECLINED_43 (stolen). Hard, never retried. Show the "
            "generic 'payment declined' message, not the reason, and flag the attempt for a risk review.",
            ("hard", "fraud"),
        ),
        (
            "decl-51",
            "ERR_PAYMENT_DECLINED_51 - insufficient funds. Soft decline: goes to the dunning schedule (ADR-010), not "
            "an immediate retry. The most common code by far, about 60% of all our declines.",
            ("soft", "dunning"),
        ),
        (
            "decl-54",
            "ERR_PAYMENT_DECLINED_54 - expired card. Hard: past its expiry that card number fails every time, so never "
            "schedule another attempt on it. Send the update-payment-method email; the card account updater often gives us "
            "the new expiry date within a few days.",
            ("hard",),
        ),
        (
            "decl-57",
            "ERR_PAYMENT_DECLINED_57 - transaction not permitted to cardholder. Usually the card isn't enabled for "
            "online or cross-border use. Treat as hard; the cardholder has to sort it out with their bank.",
            ("hard",),
        ),
        (
            "decl-61",
            "ERR_PAYMENT_DECLINED_61 - exceeds withdrawal amount limit. Soft: a daily limit, so one retry the next "
            "day usually succeeds. Don't split the amount into smaller charges, issuers hate that.",
            ("soft",),
        ),
        (
            "decl-91",
            "ERR_PAYMENT_DECLINED_91 - issuer or switch unavailable. Soft and short-lived: payments-api retries twice "
            "on its own, 30 seconds apart, before reporting the decline.",
            ("soft",),
        ),
    ],
    kind="note",
)

# --- Decisions -------------------------------------------------------------------------------------------
DOCS += [
    Doc(
        "adr007",
        S,
        "decision",
        "2024-03-19",
        "priya",
        "wiki/payments/adr-007-idempotency-keys.md",
        "ADR-007: idempotency keys come from our own ids",
        "Every Stripe call that moves money sends an idempotency key derived from our domain ids, never a random "
        "UUID made at call time. Format `<operation>:<object id>[:<sequence>]`, e.g. `capture:pi_3Ox...` or "
        "`refund:rfq_8812:1`. The key is created where the intent is recorded (API handler, or the row that "
        "schedules the work) and travels with the job. Stripe only remembers keys for 24 hours, so replays after "
        "that are caught by our own payments.capture_attempts table.",
        ("idempotency", "stripe", "adr"),
    ),
    Doc(
        "adr010",
        S,
        "decision",
        "2024-04-16",
        "priya",
        "wiki/payments/dunning.md",
        "ADR-010: dunning for soft declines",
        "Soft declines go to dunning, hard declines don't. For ERR_PAYMENT_DECLINED_51 we retry on day 3, day 5 "
        "and day 7 after the first failure, at 10:00 in the customer's time zone, and email them before each "
        "attempt; three retries at most. Hard declines (14, 41, 43, 54, 57) are never retried automatically: the "
        "customer gets a link to update the card. Reason: retrying hard declines hurts our authorisation rate "
        "with issuers, and Visa caps reattempts at 15 per card in 30 days.",
        ("dunning", "declines", "adr"),
    ),
    Doc(
        "ledger-40001",
        S,
        "decision",
        "2024-04-03",
        "amara",
        "wiki/payments/ledger/transactions.md",
        "Ledger: retrying serialization failures",
        "Ledger writes run at SERIALIZABLE isolation, so when two transfers touch the same account at the same "
        "moment one of them fails with PG-40001 (serialization_failure). That is expected under contention and "
        "safe to retry: ledger-writer re-runs the whole transaction up to 3 times with a random "
        "20-80 ms sleep, then returns LEDGER_CONTENDED to the caller. Always retry from BEGIN, never a single "
        "statement.",
        ("ledger", "postgres", "PG-40001"),
    ),
    Doc(
        "ledger-40p01",
        S,
        "decision",
        "2024-05-22",
        "amara",
        "wiki/payments/ledger/transactions.md",
        "Ledger: deadlocks are bugs",
        "PG-40P01 is deadlock_detected, not a serialization failure, even though the code looks almost the same. "
        "In ledger-writer it meant two transfers locked the same pair of accounts in opposite order. Fix "
        "(NW-1519): lock accounts in ascending account_id order with SELECT ... ORDER BY id FOR UPDATE. We do not "
        "auto-retry 40P01; it pages, because a deadlock is a bug to fix.",
        ("ledger", "postgres", "PG-40P01"),
    ),
]

# --- Notes from the team -------------------------------------------------------------------------------------
DOCS += [
    Doc(
        "ledger-hot-account",
        S,
        "note",
        "2024-06-04",
        "amara",
        "notes/amara-ledger.md",
        "Fee account sharding",
        "Month-end contention fix: the platform fee account is now 16 sub-accounts (fee_00 to fee_15), picked by "
        "a hash of the transfer id and summed for reporting. Serialization retries on the last day of May went "
        "from 9% of transfers to 0.4%.",
        ("ledger", "performance"),
    ),
    Doc(
        "ledger-contended-rate",
        S,
        "note",
        "2024-04-10",
        "amara",
        "notes/amara-ledger.md",
        "LEDGER_CONTENDED baseline",
        "Normal LEDGER_CONTENDED rate is under 0.1% of transfers. Above 1% there's a hot account somewhere; check "
        "pg_stat_activity for who's waiting on which row before touching retry counts.",
        ("ledger",),
    ),
    Doc(
        "ledger-payout-deadlock",
        S,
        "chat",
        "2024-05-21",
        "amara",
        "slack/#payments-eng",
        "#payments-eng",
        "Saw three PG-40P01s in ledger-writer after the batch payout job landed: it locks the merchant balance "
        "before the fee account, transfers do it the other way round. Ticket NW-1519.",
        ("ledger", "PG-40P01"),
    ),
    Doc(
        "ledger-double-entry",
        S,
        "note",
        "2024-01-30",
        "amara",
        "notes/amara-ledger.md",
        "Ledger invariants",
        "Every ledger transaction has at least two entries and they sum to zero per currency. The nightly "
        "reconciliation job checks this and also compares merchant balances against Stripe balance transactions; "
        "a mismatch over €1 opens a ticket automatically.",
        ("ledger", "reconciliation"),
    ),
    Doc(
        "ledger-readonly-replica",
        S,
        "note",
        "2024-07-15",
        "amara",
        "notes/amara-ledger.md",
        "Balance reads",
        "Balance reads for the merchant console come from the replica and can be up to a few seconds stale. "
        "Anything that decides whether money can leave (payouts, refunds) must read the primary.",
        ("ledger",),
    ),
    Doc(
        "refund-429",
        S,
        "note",
        "2024-03-15",
        "jonas",
        "wiki/payments/runbook-refunds.md",
        "Bulk refunds and rate limits",
        "Bulk refunds: Stripe starts answering HTTP 429 (rate_limit) well before our script's old default, we hit "
        "it at about 50 refunds/s during the INC-2291 cleanup. scripts/bulk_refund.ts now defaults to --rate 20, "
        "backs off exponentially on 429 and resumes from its checkpoint file if interrupted.",
        ("refunds", "stripe", "rate-limit"),
    ),
    Doc(
        "stripe-409",
        S,
        "note",
        "2024-03-22",
        "jonas",
        "notes/jonas.md",
        "HTTP 409 from Stripe",
        "Stripe answers HTTP 409 with type idempotency_error when a key is reused with different parameters. We "
        "got it from the refund script after someone changed the amount and re-ran with the same key. It's not a "
        "rate limit: don't back off, fix the request.",
        ("stripe", "idempotency"),
    ),
    Doc(
        "public-api-429",
        S,
        "note",
        "2024-08-20",
        "jonas",
        "wiki/payments/public-api-limits.md",
        "Public API rate limits",
        "Merchants calling our public API get HTTP 429 above 100 requests/s per API key (burst 200). The response "
        "carries X-RateLimit-Remaining and Retry-After. Limits are per key, so a merchant with several "
        "integrations should use several keys.",
        ("api", "rate-limit"),
    ),
    Doc(
        "webhook-verify",
        S,
        "note",
        "2024-02-12",
        "jonas",
        "wiki/payments/webhooks-faq.md",
        "How Stripe signatures work",
        "Stripe signs each delivery with a Stripe-Signature header: a timestamp plus an HMAC-SHA256 over "
        "`timestamp.payload` keyed with the endpoint's signing secret. stripe.webhooks.constructEvent(rawBody, "
        "header, secret) checks both and refuses anything older than five minutes.",
        ("webhooks", "stripe"),
    ),
    Doc(
        "webhook-rawbody",
        S,
        "chat",
        "2024-02-14",
        "jonas",
        "slack/#payments-eng",
        "#payments-eng",
        "If signature checks fail on one route only, make sure that route isn't behind express.json(): "
        "constructEvent needs the raw Buffer, not the parsed object. Has bitten me twice now.",
        ("webhooks",),
    ),
    Doc(
        "stripe-secret-key",
        S,
        "note",
        "2024-02-09",
        "priya",
        "notes/priya.md",
        "Rotating the Stripe API key",
        "STRIPE_SECRET_KEY is a restricted key (rk_live_...) with write access to PaymentIntents, Refunds and "
        "Customers only. Rotation: create the new restricted key, store it at secret/payments/stripe in Vault, "
        "roll the deployment, and delete the old key after Stripe shows no use of it for 24 hours.",
        ("stripe", "secrets"),
    ),
    Doc(
        "stripe-api-version",
        S,
        "note",
        "2024-04-02",
        "jonas",
        "notes/jonas.md",
        "Stripe API version pin",
        "We pin the Stripe API version to 2023-10-16 in services/payments/src/stripe/client.ts. Upgrading means "
        "changing the webhook endpoint's version at the same moment, otherwise event payloads change shape under "
        "the handler.",
        ("stripe",),
    ),
    Doc(
        "test-cards",
        S,
        "note",
        "2024-02-15",
        "jonas",
        "wiki/payments/testing.md",
        "Stripe test cards we use",
        "Test mode cards that map to our codes: 4000 0000 0000 9995 gives insufficient funds "
        "(ERR_PAYMENT_DECLINED_51), 4000 0000 0000 0069 an expired card (_54), 4000 0000 0000 0002 a generic "
        "decline (_05). 4000 0027 6000 3184 always asks for 3-D Secure.",
        ("testing", "declines"),
    ),
    Doc(
        "apple-pay-domain",
        S,
        "note",
        "2024-01-24",
        "jonas",
        "notes/jonas.md",
        "Apple Pay domain file",
        "The Apple Pay domain association file is served from services/payments/public/.well-known/"
        "apple-developer-merchantid-domain-association. Each new merchant custom domain has to be registered "
        "with Stripe before the button shows up.",
        ("apple-pay",),
    ),
    Doc(
        "partial-refund-422",
        S,
        "note",
        "2024-03-06",
        "jonas",
        "wiki/payments/runbook-refunds.md",
        "Partial refund limits",
        "A partial refund can't exceed the captured amount minus earlier refunds. The API returns 422 "
        "REFUND_EXCEEDS_CAPTURED in that case; support sometimes reads it as an outage, it isn't.",
        ("refunds",),
    ),
    Doc(
        "jpy-rounding",
        S,
        "note",
        "2024-02-19",
        "amara",
        "notes/amara-ledger.md",
        "Zero-decimal currencies",
        "JPY, KRW and friends are zero-decimal in Stripe: 500 means ¥500, not ¥5.00. The refund preview formatted "
        "them with two decimals; fixed in v2.12.4. The ledger stores minor units plus an exponent per currency, "
        "so it was only ever a display problem.",
        ("currency",),
    ),
    Doc(
        "payouts-schedule",
        S,
        "note",
        "2024-05-30",
        "priya",
        "notes/priya.md",
        "Payout run",
        "Merchant payouts run daily at 02:00 UTC from the conveyor payouts-daily queue as Stripe Connect "
        "transfers. A merchant on hold (risk flag or negative balance) is skipped and listed in the morning report.",
        ("payouts",),
    ),
    Doc(
        "pci-saq",
        S,
        "note",
        "2024-01-17",
        "kofi",
        "wiki/payments/compliance.md",
        "PCI scope",
        "Card data only ever touches Stripe Elements iframes, so we file SAQ A. Anything that puts card inputs in "
        "our own DOM moves us to SAQ A-EP and a much longer questionnaire: talk to Kofi before building it.",
        ("pci", "security"),
    ),
    Doc(
        "radar-rules",
        S,
        "note",
        "2024-06-18",
        "priya",
        "notes/priya.md",
        "Radar rules we run",
        "Radar: block if :risk_score: > 85, review if > 65. Card-testing bursts from one IP get a 3DS challenge "
        "rule instead of a block so real customers on shared networks still get through.",
        ("fraud", "stripe"),
    ),
    Doc(
        "acquirer-escalation",
        S,
        "note",
        "2024-04-25",
        "priya",
        "wiki/payments/vendors.md",
        "Escalating to Stripe",
        "For card-network trouble (one BIN range failing, a scheme outage) open a priority case from the Stripe "
        "dashboard and copy payments-vendors@northwind.example. Our account manager answers that inbox within "
        "business hours; out of hours the dashboard case is the only route.",
        ("stripe", "vendors"),
    ),
    Doc(
        "capture-alarm",
        S,
        "note",
        "2024-03-26",
        "jonas",
        "notes/jonas.md",
        "Duplicate capture alarm",
        "New alarm from the INC-2291 review: more than one successful capture for the same PaymentIntent within "
        "10 minutes pages payments on-call. It runs on the Stripe event stream, so it catches duplicates no "
        "matter which code path made them.",
        ("alerting", "INC-2291"),
    ),
    Doc(
        "nw1432-ticket",
        S,
        "note",
        "2024-03-15",
        "priya",
        "jira/NW-1432",
        "NW-1432 Derive capture idempotency key from PaymentIntent",
        "NW-1432: the async capture worker generated its own idempotency key per delivery. Change: the API "
        "handler builds `capture:<payment_intent_id>` and puts it into the job payload; the worker refuses a "
        "payload without one. Shipped in v2.14.3. Linked incident INC-2291.",
        ("NW-1432", "idempotency"),
    ),
    Doc(
        "nw1388-ticket",
        S,
        "note",
        "2024-03-08",
        "jonas",
        "jira/NW-1388",
        "NW-1388 3DS return_url loses query string",
        "NW-1388: after a 3-D Secure challenge some issuers redirect to return_url with the query string removed, "
        "so the order id is lost and the checkout shows a blank page. Fix: put the order id in the path instead.",
        ("3ds",),
    ),
    Doc(
        "nw1367-ticket",
        S,
        "note",
        "2024-02-07",
        "priya",
        "jira/NW-1367",
        "NW-1367 Dual-secret webhook verification",
        "NW-1367: accept a webhook if its signature matches STRIPE_WEBHOOK_SECRET or, when it is set, "
        "STRIPE_WEBHOOK_SECRET_OLD. Log which one matched so we can see when the old one stops being used.",
        ("webhooks", "secrets"),
    ),
    Doc(
        "capture-async-rollout",
        S,
        "note",
        "2024-03-21",
        "priya",
        "notes/priya.md",
        "capture.async back on",
        "capture.async back on: 25% of merchants on Wednesday, 100% on Thursday 21 March. Duplicate capture alarm "
        "silent throughout. Average checkout response time dropped from 1.9s to 0.6s, which was the whole point.",
        ("capture", "flags"),
    ),
    Doc(
        "settlement-currencies",
        S,
        "note",
        "2024-05-02",
        "amara",
        "notes/amara-ledger.md",
        "Settlement currencies",
        "We settle in EUR and GBP. USD charges are converted by Stripe at capture time; the FX fee lands on its own "
        "ledger account so merchant statements show it separately.",
        ("currency", "ledger"),
    ),
    Doc(
        "refund-sla",
        S,
        "note",
        "2024-03-18",
        "ruth",
        "wiki/support/payments-faq.md",
        "How long refunds take",
        "Refunds reach the cardholder in 5-10 business days depending on the bank. If a customer has waited "
        "longer, give them the ARN from the refund in Stripe so their bank can trace it.",
        ("refunds", "support"),
    ),
    Doc(
        "pending-auth",
        S,
        "chat",
        "2024-05-09",
        "ruth",
        "slack/#support-escalations",
        "#support-escalations",
        "Customer says they were charged twice, but Stripe shows one capture and one authorization that was never "
        "captured. That's a pending hold; it falls off their statement within about 7 days. Use the "
        "'pending-auth-explained' macro.",
        ("support",),
    ),
    Doc(
        "support-05-macro",
        S,
        "chat",
        "2024-04-30",
        "ruth",
        "slack/#support-escalations",
        "#support-escalations",
        "For ERR_PAYMENT_DECLINED_05 we honestly don't know why the bank said no. Macro 'bank-declined-generic': "
        "suggest calling the bank or trying another card. Please don't tell customers it's a fraud block.",
        ("support", "declines"),
    ),
    Doc(
        "support-dispute",
        S,
        "chat",
        "2024-03-20",
        "ruth",
        "slack/#support-escalations",
        "#support-escalations",
        "Three of the INC-2291 customers opened chargebacks before our refund landed. I've asked the disputes team "
        "to accept them and we'll cancel the matching refunds so nobody gets money back twice.",
        ("support", "INC-2291", "disputes"),
    ),
    Doc(
        "support-refund-status",
        S,
        "chat",
        "2024-06-12",
        "ruth",
        "slack/#support-escalations",
        "#support-escalations",
        "Reminder for the support rota: the refund status in the console lags Stripe by up to a minute. If it says "
        "pending right after you issue it, wait before escalating.",
        ("support", "refunds"),
    ),
    Doc(
        "dunning-dryrun",
        S,
        "chat",
        "2024-05-06",
        "jonas",
        "slack/#payments-eng",
        "#payments-eng",
        "Dunning scheduler dry run: 1,284 subscriptions would get a retry tomorrow, 61% of them with code 51. "
        "Emails go out via the dunning_v3 template the evening before.",
        ("dunning",),
    ),
    Doc(
        "dunning-results",
        S,
        "chat",
        "2024-06-10",
        "priya",
        "slack/#payments-eng",
        "#payments-eng",
        "First month of dunning: 38% of insufficient-funds subscriptions recovered by the third attempt, most of "
        "them on day 5. Hard declines we no longer retry dropped our issuer complaint count to zero.",
        ("dunning", "declines"),
    ),
    Doc(
        "dunning-timezone-bug",
        S,
        "chat",
        "2024-05-14",
        "amara",
        "slack/#payments-eng",
        "#payments-eng",
        "Dunning bug: customers without a stored time zone got their 10:00 retry at 10:00 UTC, i.e. 03:00 for the "
        "US west coast. Defaulting to the merchant's time zone now.",
        ("dunning",),
    ),
    Doc(
        "pay-standup-load",
        S,
        "chat",
        "2024-09-17",
        "priya",
        "slack/#payments-eng",
        "#payments-eng",
        "Load test before Black Friday: payments-api held 1,150 req/s (3x last year's peak) with p95 at 280 ms. "
        "The bottleneck was Stripe's test mode, not us.",
        ("load-test",),
    ),
    Doc(
        "pay-ownership",
        S,
        "chat",
        "2024-02-01",
        "agent",
        "memory/assistant-payments.jsonl",
        "Saved memory",
        "Priya owns the payments-api service and anything touching Stripe webhooks; Jonas is the backup. Ledger "
        "questions go to Amara.",
        ("ownership",),
    ),
    Doc(
        "pay-squash",
        S,
        "chat",
        "2024-02-22",
        "agent",
        "memory/assistant-payments.jsonl",
        "Saved memory",
        "Priya wants payments-api PRs squash-merged with the ticket id first in the title, e.g. "
        "'NW-1432: derive capture key from PI id'. Merge commits make the changelog script double-count.",
        ("process",),
    ),
    Doc(
        "pay-refund-review",
        S,
        "chat",
        "2024-03-27",
        "agent",
        "memory/assistant-payments.jsonl",
        "Saved memory",
        "Jonas asked to be added as reviewer on every change to scripts/bulk_refund.ts after the INC-2291 cleanup.",
        ("process", "refunds"),
    ),
    Doc(
        "pay-sandbox",
        S,
        "chat",
        "2024-04-08",
        "agent",
        "memory/assistant-payments.jsonl",
        "Saved memory",
        "The shared Stripe test account is called 'Northwind Staging'; personal sandboxes are fine for "
        "experiments but webhooks from them never reach staging.",
        ("stripe", "testing"),
    ),
    Doc(
        "pay-ledger-sql",
        S,
        "chat",
        "2024-07-03",
        "agent",
        "memory/assistant-payments.jsonl",
        "Saved memory",
        "Amara prefers ledger fixes as SQL migrations reviewed by two people, never as one-off scripts run from a "
        "laptop, even in an incident.",
        ("ledger", "process"),
    ),
    Doc(
        "pay-oncall-backup",
        S,
        "chat",
        "2024-04-17",
        "agent",
        "memory/assistant-payments.jsonl",
        "Saved memory",
        "Jonas is out 22 April to 3 May; Amara covers payments on-call backup in that window.",
        ("oncall",),
    ),
]

# --- Payments sync meeting pages ----------------------------------------------------------------------------
DOCS += page(
    "meetings/payments-sync/2024-03-19.md",
    S,
    "Payments sync 2024-03-19",
    "2024-03-19",
    "sam",
    ("meeting",),
    [
        (
            "ps0319-rootcause",
            "INC-2291 review: root cause agreed. A key generated per delivery plus a 30s visibility timeout that was "
            "shorter than Stripe's slow captures. Priya writes ADR-007 on how keys are built.",
            ("INC-2291",),
        ),
        (
            "ps0319-flag",
            "capture.async goes back on at 25% tomorrow and 100% on Thursday if the duplicate-capture alarm stays at "
            "zero.",
            ("capture",),
        ),
        (
            "ps0319-alarm",
            "Action (Jonas): alarm when one PaymentIntent has more than one successful capture within 10 minutes, paging "
            "payments on-call.",
            ("alerting",),
        ),
        (
            "ps0319-support",
            "Support: all 212 refunds issued; three customers disputed before the refund landed, Ruth is handling those "
            "with the disputes team.",
            ("support",),
        ),
    ],
)
DOCS += page(
    "meetings/payments-sync/2024-04-16.md",
    S,
    "Payments sync 2024-04-16",
    "2024-04-16",
    "sam",
    ("meeting",),
    [
        (
            "ps0416-dunning",
            "Dunning: go with ADR-010 as written. Visa's reattempt limits make retrying hard declines a real risk, not "
            "a theoretical one.",
            ("dunning",),
        ),
        (
            "ps0416-stripe-version",
            "Stripe API version upgrade moved to Q3: nobody has time to re-test webhook handling against the new "
            "payload shapes this quarter.",
            ("stripe",),
        ),
        (
            "ps0416-cover",
            "Jonas is away 22 April to 3 May. Amara is payments on-call backup for that stretch.",
            ("oncall",),
        ),
    ],
)
DOCS += page(
    "meetings/payments-sync/2024-09-10.md",
    S,
    "Payments sync 2024-09-10",
    "2024-09-10",
    "sam",
    ("meeting",),
    [
        (
            "ps0910-bf",
            "Black Friday prep: load test payments-api at 3x last year's peak (1,150 req/s) by 1 November. Jonas owns "
            "the test plan.",
            ("load-test",),
        ),
        (
            "ps0910-refund-rate",
            "Refund script default stays at 20/s. If support needs a mass refund during the freeze, on-call runs it, "
            "not support.",
            ("refunds",),
        ),
        (
            "ps0910-radar",
            "Radar review threshold lowered from 75 to 65 after the August card-testing wave; block stays at 85.",
            ("fraud",),
        ),
    ],
)

# --- Near-duplicates: the same note pasted elsewhere ----------------------------------------------------------
COPIES: list[Copy] = [
    Copy(
        "refund-429-slack",
        "refund-429",
        "slack/#payments-eng",
        "2024-03-15",
        kind="chat",
        title="#payments-eng",
        prefix="FYI for anyone running refunds: ",
    ),
    Copy(
        "refund-429-notes",
        "refund-429",
        "notes/jonas.md",
        "2024-03-18",
        kind="note",
        title="Refund script notes",
        suffix="\n\n-- J.",
    ),
    Copy(
        "ledger-40001-slack",
        "ledger-40001",
        "slack/#payments-eng",
        "2024-04-03",
        kind="chat",
        title="#payments-eng",
        prefix="Pinning this from the ledger page: ",
        edits=(("up to 3 times", "up to three times"),),
    ),
    Copy(
        "adr010-slack",
        "adr010",
        "slack/#payments-eng",
        "2024-04-17",
        kind="chat",
        title="#payments-eng",
        prefix="ADR-010 is merged, tl;dr below.\n\n",
        suffix=" Questions to Priya.",
    ),
    Copy(
        "decl-51-support",
        "decl-51",
        "wiki/support/payments-faq.md",
        "2024-05-20",
        author="ruth",
        title="Insufficient funds declines",
        edits=(("(ADR-010)", "(see ADR-010)"),),
    ),
    Copy(
        "nw1432-slack",
        "nw1432-ticket",
        "slack/#payments-eng",
        "2024-03-16",
        author="priya",
        kind="chat",
        title="#payments-eng",
        prefix="Shipped: ",
        edits=(("Shipped in v2.14.3.", "Shipped in v2.14.3 today."),),
    ),
    Copy(
        "rel-2143-announce",
        "rel-2143",
        "slack/#eng-announce",
        "2024-03-16",
        kind="chat",
        title="#eng-announce",
        prefix="payments-api ",
        suffix=" Thanks everyone who helped on INC-2291.",
    ),
]

# --- More notes: everyday knowledge and look-alikes ------------------------------------------------------------
DOCS += [
    Doc(
        "pay-merge-queue",
        S,
        "chat",
        "2024-06-05",
        "jonas",
        "slack/#payments-eng",
        "#payments-eng",
        "payments-api is on the GitHub merge queue now. PRs need two approvals and a green queue run; please "
        "don't bypass it with admin merges, even for a typo.",
        ("process",),
    ),
    Doc(
        "pay-sca-exemptions",
        S,
        "note",
        "2024-07-30",
        "priya",
        "notes/priya.md",
        "SCA exemptions",
        "We ask for the low-value exemption under €30 and the merchant-initiated exemption for subscription "
        "renewals. Issuers can still demand a challenge; about 4% of renewals end up needing the customer back "
        "on session.",
        ("3ds", "sca"),
    ),
    Doc(
        "pay-capture-attempts",
        S,
        "note",
        "2024-03-25",
        "amara",
        "notes/amara-ledger.md",
        "capture_attempts table",
        "payments.capture_attempts keeps (idempotency key, response) for 30 days. Stripe's own 24-hour memory of "
        "keys isn't enough: the nightly sweep re-tries stuck captures days later and must get the stored answer.",
        ("idempotency",),
    ),
    Doc(
        "pay-descriptor",
        S,
        "note",
        "2024-08-08",
        "ruth",
        "wiki/support/payments-faq.md",
        "Unrecognised charges",
        "The statement descriptor is NORTHWIND* plus the merchant name, 22 characters at most. Long merchant names "
        "get cut off, and that's behind most 'I don't recognise this charge' tickets. Ask the merchant to set a "
        "short descriptor in their settings.",
        ("support",),
    ),
    Doc(
        "pay-connect-onboarding",
        S,
        "note",
        "2024-05-15",
        "jonas",
        "notes/jonas.md",
        "Connect onboarding",
        "Merchants are Stripe Connect Express accounts. The account.updated webhook drives the 'payouts enabled' "
        "badge in the console; if a merchant says the badge is wrong, look at requirements.currently_due on the "
        "account first.",
        ("connect", "webhooks"),
    ),
    Doc(
        "pay-webhook-dedupe",
        S,
        "note",
        "2024-02-13",
        "jonas",
        "wiki/payments/webhooks-faq.md",
        "Duplicate webhook deliveries",
        "Stripe can send the same event more than once. The handler inserts the event id into webhook_dedupe first "
        "and stops if it's already there; rows are kept for 30 days.",
        ("webhooks", "idempotency"),
    ),
    Doc(
        "pay-fx-question",
        S,
        "chat",
        "2024-05-03",
        "priya",
        "slack/#payments-eng",
        "#payments-eng",
        "Asked finance about showing FX fees per payment in the console. Answer: yes, but only after the statement "
        "redesign, so not this quarter.",
        ("currency",),
    ),
    Doc(
        "pay-refund-script-checkpoint",
        S,
        "chat",
        "2024-03-16",
        "jonas",
        "slack/#payments-eng",
        "#payments-eng",
        "bulk_refund.ts died halfway through the cleanup when my laptop went to sleep. It writes a checkpoint file "
        "now and --resume picks up from the last refund that Stripe confirmed.",
        ("refunds",),
    ),
    Doc(
        "pay-3ds-test",
        S,
        "chat",
        "2024-03-12",
        "jonas",
        "slack/#payments-eng",
        "#payments-eng",
        "3DS redirect fix is in v2.14.2. Tested with six issuers' test pages; the ones that stripped the query "
        "string now land on the right order.",
        ("3ds",),
    ),
    Doc(
        "pay-declines-dashboard",
        S,
        "note",
        "2024-06-20",
        "priya",
        "notes/priya.md",
        "Decline dashboard",
        "Grafana 'Payments / Declines' breaks declines down by code and issuer country. A jump in one code from one "
        "country is usually an issuer problem, not ours; compare with Stripe's status before paging anyone.",
        ("declines", "monitoring"),
    ),
]
