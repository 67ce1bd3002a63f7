"""A LongMemEval-style dated memory collection: facts that change over time, and questions that ask for the
newest value, the first value, or a fact that never changed. Written as a BEIR directory (not committed).

Each of --users people talks with an assistant over 10-18 dated sessions spread over about 18 months. Six of
their attributes change 2-4 times (gym, employer, city, car, phone, coffee place); each change is one
dialogue turn, worded with varied templates that all name the attribute, so BM25 and dense search find
every version and cannot tell which is current. Two attributes are said once (the dog's name, the home
town), and about 20 turns are small talk. Dates use LongMemEval's format, `2023/05/20 (Sat) 02:21`, in
`metadata.date` of documents and queries; a question is dated 1-10 days after its person's last session.

Question types (`metadata.question_type`):
- `knowledge-update`: "Which gym does Ana go to now?"; relevant: the newest version only.
- `temporal-first`: "Which gym did Ana go to first?"; relevant: the oldest version only (recency must hurt).
- `single-fact`: "What is the name of Ana's dog?"; relevant: the one turn that says it.
Every query is scoped to its person (`metadata.scope`); people with an even index are dev, odd are test.

    .venv/bin/python benchmarks/knowledge_update.py --out /tmp/ku --users 60 --seed 0
"""

from __future__ import annotations

import argparse
import json
import random
from datetime import datetime, timedelta
from pathlib import Path

NAMES = ["Ana", "Ben", "Chloe", "Dmitri", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kira", "Liam", "Maya",
         "Nikhil", "Olga", "Pedro", "Quinn", "Rosa", "Sami", "Tara", "Umar", "Vera", "Wen", "Xavi", "Yara", "Zoe"]
ATTRS = {
    "gym": {
        "values": ["Iron Temple", "FitHub Central", "Peak Performance", "the YMCA on Elm Street", "CrossBox North", "Pulse Athletics", "Anytime Fitness downtown", "Granite Gym"],
        "say": ["I signed up at {v} last week, the classes are great.", "Switched gyms again, I'm going to {v} now.",
                "These days I train at {v}, the gym is close to home.", "My new gym is {v}; the membership was cheaper."],
        "now": "Which gym does {n} go to now?", "first": "Which gym did {n} go to first?",
    },
    "job": {
        "values": ["Northwind Logistics", "Bluefin Analytics", "Crescent Health", "Helios Energy", "Quarry Games", "Lumen Bank", "Orchid Labs", "Vantage Media"],
        "say": ["Big news: I accepted an offer at {v}, I start on Monday.", "I work at {v} now, the team is lovely.",
                "Changed jobs, my new employer is {v}.", "I just joined {v} as a senior engineer."],
        "now": "Where does {n} work now?", "first": "Where did {n} work first?",
    },
    "city": {
        "values": ["Lisbon", "Toronto", "Melbourne", "Denver", "Rotterdam", "Osaka", "Edinburgh", "Austin"],
        "say": ["We finally moved, we live in {v} now.", "Unpacking boxes in {v}, our new city!",
                "I relocated to {v} for a fresh start.", "Home is {v} these days, still getting used to the city."],
        "now": "Which city does {n} live in now?", "first": "Which city did {n} live in first?",
    },
    "car": {
        "values": ["a red Mazda 3", "a Tesla Model Y", "an old Volvo estate", "a Honda Civic", "a Ford Ranger", "a Kia EV6", "a Subaru Outback", "a VW Golf"],
        "say": ["I bought {v}, my new car drives like a dream.", "Traded in the old car, I drive {v} now.",
                "Picked up {v} from the dealer today, loving the car.", "My car these days is {v}."],
        "now": "What car does {n} drive now?", "first": "What car did {n} drive first?",
    },
    "phone": {
        "values": ["a Pixel 8", "an iPhone 15", "a Galaxy S23", "a Fairphone 5", "a OnePlus 12", "a Nothing Phone", "an iPhone 13 mini", "a Xperia 10"],
        "say": ["My phone died so I got {v}.", "Upgraded my phone to {v}, the camera is amazing.",
                "I'm using {v} as my phone now.", "New phone: {v}, still moving my apps over."],
        "now": "What phone does {n} use now?", "first": "What phone did {n} use first?",
    },
    "coffee": {
        "values": ["Blue Door Roasters", "Cafe Mercado", "the kiosk by the station", "Bean There", "Little Owl Coffee", "Steam & Co", "Grindhouse", "Morning Ritual"],
        "say": ["My morning coffee comes from {v} lately.", "Found a new coffee place, {v}, best flat white in town.",
                "I get my coffee at {v} every morning now.", "Switched my coffee spot to {v}."],
        "now": "Where does {n} get coffee now?", "first": "Where did {n} get coffee first?",
    },
}
STATIC = {
    "dog": {"values": ["Biscuit", "Pepper", "Nala", "Rufus", "Mochi", "Juniper"], "say": "Our dog is called {v}, she is three.",
            "ask": "What is the name of {n}'s dog?"},
    "hometown": {"values": ["Porto", "Leeds", "Krakow", "Valencia", "Tampere", "Cork"], "say": "I grew up in {v}, a small place by the river.",
                 "ask": "Where did {n} grow up?"},
}
SMALL_TALK = ["Did you watch the game last night?", "The weather has been awful this week.", "I'm trying a new pasta recipe tonight.",
              "Work was busy but fine.", "We went hiking on Saturday, beautiful views.", "I finally finished that novel.",
              "My sister visited, we had a lovely dinner.", "Thinking about a holiday in the spring.", "I can't believe it's already Friday.",
              "The concert was loud but fun.", "Started learning to play the guitar.", "Our neighbours are renovating, so much noise.",
              "I slept badly, too much coffee maybe.", "The garden is finally blooming.", "Binged a whole series this weekend."]


def fmt(d: datetime) -> str:
    """LongMemEval's date format."""
    return d.strftime("%Y/%m/%d (%a) %H:%M")


def build(users: int, seed: int) -> tuple[list[dict], list[dict], dict[str, list[tuple[str, str]]]]:
    rng = random.Random(seed)
    corpus, queries, qrels = [], [], {"dev": [], "test": []}
    for u in range(users):
        name = f"{NAMES[u % len(NAMES)]}{'' if u < len(NAMES) else u // len(NAMES) + 1}"
        scope, split = f"user-{u:03d}", "dev" if u % 2 == 0 else "test"
        start = datetime(2022, 1, 3) + timedelta(days=rng.randint(0, 120))
        n_sessions = rng.randint(10, 18)
        days = sorted(rng.sample(range(0, 540), n_sessions))
        sessions = [start + timedelta(days=d, hours=rng.randint(8, 21), minutes=rng.randint(0, 59)) for d in days]
        turns: list[tuple[int, str, str | None]] = []  # (session index, text, fact key)
        for attr, spec in ATTRS.items():
            k = rng.randint(2, 4)
            at = sorted(rng.sample(range(n_sessions), k))
            for i, (s, v) in enumerate(zip(at, rng.sample(spec["values"], k), strict=True)):
                turns.append((s, rng.choice(spec["say"]).format(v=v), f"{attr}:{i}:{k}"))
        for attr, spec in STATIC.items():
            turns.append((rng.randrange(n_sessions), spec["say"].format(v=rng.choice(spec["values"])), f"{attr}:0:1"))
        for _ in range(20):
            turns.append((rng.randrange(n_sessions), rng.choice(SMALL_TALK), None))
        turns.sort(key=lambda t: t[0])
        facts: dict[str, list[str]] = {}
        for j, (s, text, key) in enumerate(turns):
            doc_id = f"{scope}:t{j:03d}"
            when = sessions[s] + timedelta(minutes=j % 30)
            corpus.append({"_id": doc_id, "title": "", "text": f"{name}: {text}",
                           "metadata": {"scope": scope, "source": f"{scope}:session_{s + 1}", "date": fmt(when)}})
            if key:
                facts.setdefault(key.split(":")[0], []).append(doc_id)
        qdate = fmt(sessions[-1] + timedelta(days=rng.randint(1, 10)))
        for attr, spec in ATTRS.items():
            ids = facts[attr]
            for kind, text, rel in (("knowledge-update", spec["now"], ids[-1]), ("temporal-first", spec["first"], ids[0])):
                qid = f"{scope}:{attr}:{kind}"
                queries.append({"_id": qid, "text": text.format(n=name),
                                "metadata": {"scope": scope, "question_type": kind, "date": qdate}})
                qrels[split].append((qid, rel))
        for attr, spec in STATIC.items():
            qid = f"{scope}:{attr}:single-fact"
            queries.append({"_id": qid, "text": spec["ask"].format(n=name), "metadata": {"scope": scope, "question_type": "single-fact", "date": qdate}})
            qrels[split].append((qid, facts[attr][0]))
    return corpus, queries, qrels


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--users", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    corpus, queries, qrels = build(a.users, a.seed)
    (a.out / "qrels").mkdir(parents=True, exist_ok=True)
    (a.out / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    (a.out / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    for split, rows in qrels.items():
        (a.out / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, d in rows))
    (a.out / "SOURCE.md").write_text(f"Generated by benchmarks/knowledge_update.py --users {a.users} --seed {a.seed}.\n")
    print(f"{len(corpus)} documents, {len(queries)} queries ({len(qrels['dev'])} dev, {len(qrels['test'])} test) -> {a.out}")


if __name__ == "__main__":
    main()
