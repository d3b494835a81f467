"""Regenerate the bundled toy datasets (deterministic; the .jsonl files are committed).

    python examples/data/make_data.py

sft.jsonl        {"task", "src", "tgt"}            instruction -> answer (SFT; LoRA uses "task" as adapter)
preference.jsonl {"task", "prompt", "chosen", "rejected"}   a correct and a flawed answer (DPO, RM)

Small factual/arithmetic tasks with templated but varied wording, so a tiny model can actually
lower its loss within a few steps and the lengths vary like real chat data (short to long).
"""
from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent

CAPITALS = [("France", "Paris"), ("Japan", "Tokyo"), ("Kenya", "Nairobi"), ("Canada", "Ottawa"),
            ("Peru", "Lima"), ("Egypt", "Cairo"), ("Norway", "Oslo"), ("Chile", "Santiago"),
            ("India", "New Delhi"), ("Spain", "Madrid"), ("Ghana", "Accra"), ("Italy", "Rome"),
            ("Poland", "Warsaw"), ("Vietnam", "Hanoi"), ("Mexico", "Mexico City"),
            ("Australia", "Canberra"), ("Portugal", "Lisbon"), ("Argentina", "Buenos Aires"),
            ("Thailand", "Bangkok"), ("Sweden", "Stockholm"), ("Turkey", "Ankara"),
            ("Brazil", "Brasilia"), ("Germany", "Berlin"), ("Morocco", "Rabat")]
WORDS = ["planet", "garden", "river", "window", "lantern", "harbor", "meadow", "violin", "pepper",
         "castle", "rocket", "pencil", "silver", "forest", "mirror", "tunnel", "candle", "bridge"]
UNITS = [("km", "km", "meters", 1000), ("kg", "kg", "grams", 1000), ("hours", "hour", "minutes", 60),
         ("minutes", "minute", "seconds", 60), ("liters", "liter", "milliliters", 1000),
         ("feet", "foot", "inches", 12)]
ASK = ["", "Please answer briefly. ", "Quick question: ", "I need help with this. "]


def arithmetic(rng):
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    op = rng.choice(["+", "-", "*"])
    val = a + b if op == "+" else a - b if op == "-" else a * b
    wrong = val + rng.choice([-10, -2, -1, 1, 2, 10])
    q = f"{rng.choice(ASK)}What is {a} {op} {b}?"
    return "math", q, f"{a} {op} {b} = {val}.", f"{a} {op} {b} = {wrong}."


def capital(rng):
    country, city = rng.choice(CAPITALS)
    other = rng.choice([c for _, c in CAPITALS if c != city])
    q = f"{rng.choice(ASK)}What is the capital of {country}?"
    good = f"The capital of {country} is {city}."
    if rng.random() < 0.5:
        good += f" {city} is also one of the largest cities in {country}." if rng.random() < 0.3 else ""
    return "geo", q, good, f"The capital of {country} is {other}."


def conversion(rng):
    src, one, dst, factor = rng.choice(UNITS)
    n = rng.randint(2, 40)
    q = f"{rng.choice(ASK)}Convert {n} {src} to {dst}."
    return "units", q, f"{n} {src} is {n * factor} {dst}, because 1 {one} has {factor} {dst}.", \
        f"{n} {src} is {n * factor + rng.choice([-factor, factor])} {dst}."


def reverse(rng):
    w = rng.choice(WORDS)
    q = f"{rng.choice(ASK)}Write the word '{w}' backwards."
    bad = list(w[::-1])
    i = rng.randrange(len(bad) - 1)
    bad[i], bad[i + 1] = bad[i + 1], bad[i]
    return "text", q, f"'{w}' backwards is '{w[::-1]}'.", f"'{w}' backwards is '{''.join(bad)}'."


def sorting(rng):
    xs = rng.sample(range(1, 100), rng.randint(3, 7))
    q = f"{rng.choice(ASK)}Sort these numbers from smallest to largest: {', '.join(map(str, xs))}."
    good = ", ".join(map(str, sorted(xs)))
    bad = sorted(xs)
    bad[0], bad[-1] = bad[-1], bad[0]
    return "math", q, f"Sorted: {good}.", f"Sorted: {', '.join(map(str, bad))}."


def counting(rng):
    w = rng.choice(WORDS)
    q = f"{rng.choice(ASK)}How many letters does the word '{w}' have?"
    return "text", q, f"The word '{w}' has {len(w)} letters: {' '.join(w)}.", f"The word '{w}' has {len(w) + 1} letters."


GENERATORS = [arithmetic, capital, conversion, reverse, sorting, counting]


def main(n_sft: int = 400, n_pref: int = 300, seed: int = 7) -> None:
    rng = random.Random(seed)
    with open(HERE / "sft.jsonl", "w") as f:
        for _ in range(n_sft):
            task, q, good, _bad = rng.choice(GENERATORS)(rng)
            f.write(json.dumps({"task": task, "src": q, "tgt": good}) + "\n")
    with open(HERE / "preference.jsonl", "w") as f:
        for _ in range(n_pref):
            task, q, good, bad = rng.choice(GENERATORS)(rng)
            f.write(json.dumps({"task": task, "prompt": q, "chosen": good, "rejected": bad}) + "\n")


if __name__ == "__main__":
    main()
