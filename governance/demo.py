"""The demo of seed 004 made real: client batches labelled 15, 16, … and a product catalogue."""

from __future__ import annotations

import json
from dataclasses import dataclass

from governance.batches import BatchMeta, drop_batch, ready_batches
from governance.zones import AssetKey, Lake

CLIENTS = AssetKey("sales", "clients")
PRODUCTS = AssetKey("sales", "products")
NAMES_AND_PRODUCTS = AssetKey("sales", "names_and_products")
PRODUCT_SUMMARY = AssetKey("sales", "product_summary")
FIRST_LABEL = 15
PRODUCER = "bob"
OWNER = "alice"


def demo_password(user: str) -> str:
    """The password assets/directory.yaml documents for a demo user: for the demo only."""
    return f"{user}-demo"


_PEOPLE = [("Mike", "Bike"), ("Kevin", "Poll"), ("Ada", "Stone"), ("Lin", "Park"), ("Omar", "Reyes"), ("Zoe", "Brandt")]
PRODUCTS_SOLD = [
    ("B12", "Bicycle", "outdoor", 249.0),
    ("R23", "Rain jacket", "clothing", 89.5),
    ("T07", "Tent", "outdoor", 179.0),
    ("L31", "Lamp", "home", 35.25),
]


@dataclass(frozen=True)
class DemoRound:
    """The batches one run of the demo drops: a product catalogue and two client extracts."""

    products_batch: str
    client_batches: tuple[str, str]


def drop_demo_batches(lake: Lake) -> DemoRound:
    """Drop a new round of demo batches; each round has new labels and content, so it adds versions."""
    round_number = _rounds(lake)
    products_batch = _drop_products(lake, round_number)
    client_batches = []
    for offset in (0, 1):
        label = FIRST_LABEL + 2 * round_number + offset
        batch_id = f"demo-clients-v{label}"
        drop_batch(
            lake,
            CLIENTS,
            batch_id,
            {f"clients-v{label}.json": _clients_json(label)},
            BatchMeta(requested_by=PRODUCER, label=str(label), note="demo client extract"),
        )
        client_batches.append(batch_id)
    return DemoRound(products_batch, (client_batches[0], client_batches[1]))


def drop_products(lake: Lake) -> str:
    """Drop a new round's product catalogue alone; its batch id."""
    return _drop_products(lake, _rounds(lake))


def _rounds(lake: Lake) -> int:
    return sum(1 for b in ready_batches(lake, PRODUCTS) if b.startswith("demo-"))


def _drop_products(lake: Lake, round_number: int) -> str:
    batch_id = f"demo-products-{round_number + 1:03d}"
    drop_batch(
        lake,
        PRODUCTS,
        batch_id,
        {"products.csv": _products_csv(round_number)},
        BatchMeta(requested_by=PRODUCER, note=f"demo round {round_number + 1}"),
    )
    return batch_id


def _products_csv(round_number: int) -> bytes:
    lines = ["product_id,product_name,category,unit_price"]
    for product_id, name, category, price in PRODUCTS_SOLD:
        lines.append(f"{product_id},{name},{category},{price + round_number:.2f}")
    return ("\n".join(lines) + "\n").encode()


def _clients_json(label: int) -> bytes:
    records = []
    for i, (name, surname) in enumerate(_PEOPLE[: 3 + label % 4]):
        product_id = PRODUCTS_SOLD[(i + label) % len(PRODUCTS_SOLD)][0]
        records.append(
            {
                "name": name,
                "surname": surname,
                "order": {"product_id": product_id, "quantity": 1 + (i * label) % 4},
                "version": str(label),
            }
        )
    return "".join(json.dumps(r) + "\n" for r in records).encode()
