"""The small vocabulary the content modules are written in: documents, pasted copies, threads, pages."""

from __future__ import annotations

from dataclasses import dataclass

PEOPLE = {
    "priya": "Priya Raman",  # payments lead
    "jonas": "Jonas Weber",  # payments backend, webhooks
    "amara": "Amara Nwosu",  # ledger
    "marcus": "Marcus Oyelaran",  # SRE, deploy pipeline
    "hana": "Hana Kobayashi",  # Postgres
    "leah": "Leah Brennan",  # conveyor (job queue)
    "tomas": "Tomás Ferreira",  # dashboard lead
    "ines": "Inês Duarte",  # dashboard
    "kofi": "Kofi Mensah",  # security
    "sam": "Sam Whitlock",  # engineering manager
    "ruth": "Ruth Adeyemi",  # customer support lead
    "agent": "memory-agent",  # entries an assistant saved from conversations
}

KINDS = ("note", "decision", "incident", "runbook", "meeting", "chat")


@dataclass(frozen=True)
class Doc:
    key: str
    scope: str
    kind: str
    date: str
    author: str
    source: str
    title: str
    text: str
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Copy:
    """The note `of` pasted somewhere else with trivial edits (the near-duplicates dedup must catch)."""

    key: str
    of: str
    source: str
    date: str
    author: str | None = None
    kind: str | None = None
    title: str | None = None
    prefix: str = ""
    suffix: str = ""
    edits: tuple[tuple[str, str], ...] = ()


def thread(
    source: str, scope: str, title: str, tags: tuple[str, ...], entries: list[tuple], kind: str = "chat"
) -> list[Doc]:
    """Messages of one chat thread or channel: entries are (key, date, author, text[, extra tags])."""
    out = []
    for e in entries:
        key, date, author, text = e[:4]
        extra = tuple(e[4]) if len(e) > 4 else ()
        out.append(Doc(key, scope, kind, date, author, source, title, text, tags + extra))
    return out


def page(
    source: str,
    scope: str,
    title: str,
    date: str,
    author: str,
    tags: tuple[str, ...],
    entries: list[tuple],
    kind: str = "meeting",
) -> list[Doc]:
    """Items of one page (meeting notes, a log): entries are (key, text[, extra tags]); one date and author."""
    out = []
    for e in entries:
        key, text = e[:2]
        extra = tuple(e[2]) if len(e) > 2 else ()
        out.append(Doc(key, scope, kind, date, author, source, title, text, tags + extra))
    return out
