"""Make one world of the sqlite-sales environment: ``sales.db``, customers and their orders, seeded.

python make_db.py WORLD_FOLDER --seed N
"""

from __future__ import annotations

import argparse
import random
import sqlite3
from pathlib import Path

NAMES = ["Acme Corp", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay", "Stark Industries", "Wayne Enterprises"]
REGIONS = ["EMEA", "Americas", "APAC"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("world", type=Path)
    parser.add_argument("--seed", type=int, required=True)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    customers = rng.sample(NAMES, 5)
    with sqlite3.connect(args.world / "sales.db") as db:
        db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, region TEXT NOT NULL)")
        db.execute(
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id), "
            "amount REAL NOT NULL, quarter TEXT NOT NULL)"
        )
        db.executemany(
            "INSERT INTO customers (id, name, region) VALUES (?, ?, ?)",
            [(index + 1, name, rng.choice(REGIONS)) for index, name in enumerate(customers)],
        )
        orders = [
            (rng.randint(1, 5), rng.randint(10, 90) * 1000.0, f"Q{rng.randint(1, 4)}") for _ in range(6 + args.seed)
        ]
        db.executemany("INSERT INTO orders (customer_id, amount, quarter) VALUES (?, ?, ?)", orders)


if __name__ == "__main__":
    main()
