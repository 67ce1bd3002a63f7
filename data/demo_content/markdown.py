"""The 'folder of markdown' export: the same team wiki as files, for the bring-your-own-corpus tutorial.

Each file is rendered from documents of the memory bank, the way a wiki export would hold them: runbooks and
postmortems whole, decisions as ADR pages, meeting pages with their items as a list, and a few plain .txt files.
"""

from __future__ import annotations

from .model import PEOPLE, Doc

# Decision pages rendered as ADRs: (file, key of the decision)
ADRS = [
    ("decisions/adr-007-idempotency-keys.md", "adr007"),
    ("decisions/adr-008-node-version.md", "node-20111"),
    ("decisions/adr-009-job-retries.md", "adr009"),
    ("decisions/adr-010-dunning.md", "adr010"),
    ("decisions/adr-011-pg16-upgrade.md", "adr011"),
    ("decisions/adr-012-transaction-pooling.md", "adr012"),
    ("decisions/adr-014-live-data.md", "adr014"),
    ("decisions/adr-015-deploy-freezes.md", "adr015"),
]
WHOLE = [
    ("wiki/postgres-failover.md", "rb-failover"),
    ("wiki/stripe-webhooks.md", "rb-webhooks"),
    ("wiki/deploy-pipeline.md", "rb-deploy"),
    ("wiki/oncall-handbook.md", "rb-oncall"),
    ("wiki/postmortem-INC-2291.md", "pm-inc2291"),
    ("wiki/postmortem-INC-2340.md", "pm-inc2340"),
    ("decisions/conveyor-retries-design.md", "dd-conveyor"),
    ("decisions/live-data-design.md", "dd-live-data"),
]
MEETINGS = [
    ("meetings/platform-weekly-2024-06-11.md", "meetings/platform-weekly/2024-06-11.md"),
    ("meetings/platform-weekly-2024-06-25.md", "meetings/platform-weekly/2024-06-25.md"),
    ("meetings/payments-sync-2024-03-19.md", "meetings/payments-sync/2024-03-19.md"),
    ("meetings/payments-sync-2024-04-16.md", "meetings/payments-sync/2024-04-16.md"),
    ("meetings/dashboard-sync-2024-10-01.txt", "meetings/dashboard-sync/2024-10-01.md"),
]
DECLINE_HEADINGS = {
    "decl-05": "05: do not honor",
    "decl-14": "14: invalid card number",
    "decl-41-43": "41 and 43: lost or stolen card",
    "decl-51": "51: insufficient funds",
    "decl-54": "54: expired card",
    "decl-57": "57: transaction not permitted",
    "decl-61": "61: exceeds withdrawal limit",
    "decl-91": "91: issuer unavailable",
}
CONVEYOR_TXT = [
    "conveyor-overview",
    "conveyor-schedules",
    "conveyor-concurrency",
    "conveyor-visibility",
    "conveyor-dlq",
    "conveyor-keepalive",
    "conveyor-new-queue",
]


def render(docs: dict[str, Doc]) -> dict[str, str]:
    """Relative path -> file text."""
    files: dict[str, str] = {}
    for path, key in ADRS:
        d = docs[key]
        files[path] = (
            f"# {d.title}\n\nStatus: accepted, {d.date}. Author: {PEOPLE[d.author]}.\n\n"
            f"## Decision\n\n{d.text}\n"
        )
    for path, key in WHOLE:
        files[path] = docs[key].text
    by_source: dict[str, list[Doc]] = {}
    for d in docs.values():
        by_source.setdefault(d.source, []).append(d)
    for path, source in MEETINGS:
        items = by_source[source]  # authored order
        first = items[0]
        if path.endswith(".txt"):
            body = "\n\n".join(d.text for d in items)
            files[path] = f"{first.title}\nNotes taken by {PEOPLE[first.author]}.\n\n{body}\n"
        else:
            body = "\n".join(f"- {d.text}" for d in items)
            files[path] = f"# {first.title}\n\nNotes taken by {PEOPLE[first.author]}.\n\n{body}\n"
    decl = by_source["wiki/payments/decline-codes.md"]
    parts = ["# Decline codes", next(d.text for d in decl if d.key == "decl-overview")]
    parts += [f"## {DECLINE_HEADINGS[d.key]}\n\n{d.text}" for d in decl if d.key in DECLINE_HEADINGS]
    files["wiki/decline-codes.md"] = "\n\n".join(parts) + "\n"
    conveyor = [docs[k] for k in CONVEYOR_TXT]
    files["wiki/conveyor-notes.txt"] = (
        "conveyor: notes collected from the README and the operations page\n\n"
        + "\n\n".join(f"{d.title.upper()}\n{d.text}" for d in conveyor)
        + "\n"
    )
    return dict(sorted(files.items()))
