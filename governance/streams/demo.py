"""The streaming demo's producer: clicks on the shop's product pages, sent to `sales.clicks` as a
web server would, signed in with the producer's own Kafka credential.

    custody streams credentials --as bob --json | jq -r .password > bob.kafka
    python -m governance.streams.demo bob --count 200 < bob.kafka
"""

from __future__ import annotations

import argparse
import getpass
import json
import random
import sys
from collections.abc import Sequence

from confluent_kafka import KafkaError, Producer

from governance.demo import PRODUCTS_SOLD
from governance.errors import AccessDenied, CustodyError, SourceUnavailable
from governance.streams.settings import KafkaSettings
from governance.zones import AssetKey

CLICKS = AssetKey("sales", "clicks")
PRODUCT_CLICKS = AssetKey("sales", "product_clicks")
TOPIC = "sales.clicks"
SESSIONS = 40
# One record in this many is not JSON, as a misbehaving server would send: the demo's quarantine.
GARBLED_EVERY = 100
SEND_SECONDS = 30


def demo_clicks(count: int, seed: int = 0) -> list[bytes]:
    """`count` clicks by a few dozen sessions on the product pages and the home page."""
    rng = random.Random(seed)
    pages = [(f"/products/{product_id}", product_id) for product_id, *_ in PRODUCTS_SOLD] + [("/", None)]
    clicks = []
    for number in range(count):
        if number % GARBLED_EVERY == GARBLED_EVERY - 1:
            clicks.append(b"<html>502 Bad Gateway</html>")
            continue
        page, product_id = rng.choice(pages)
        click = {"session": f"s{rng.randrange(SESSIONS):03d}", "page": page, "product_id": product_id}
        clicks.append(json.dumps(click).encode())
    return clicks


def send(settings: KafkaSettings, topic: str, user: str, password: str, records: Sequence[bytes]) -> None:
    """Send `records` to `topic` as `user`; the broker's first refusal fails the whole send."""
    config = {**settings.client_config(user, password), "message.timeout.ms": SEND_SECONDS * 1000}
    producer = Producer(config)
    refused: list[KafkaError] = []
    for record in records:
        while True:
            try:
                producer.produce(topic, record, on_delivery=lambda err, _: refused.append(err) if err else None)
                break
            except BufferError:  # the client's queue is full: wait for deliveries to make room
                producer.poll(1)
        producer.poll(0)
    unsent = producer.flush(SEND_SECONDS)
    if refused:
        first = refused[0]
        if first.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._AUTHENTICATION):
            raise AccessDenied(f"{user} may not write {topic} on {settings.bootstrap}: {first.str()}")
        raise SourceUnavailable(f"{topic} on {settings.bootstrap} refused {len(refused)} records: {first.str()}")
    if unsent:
        raise SourceUnavailable(
            f"{unsent} records to {topic} still unsent after {SEND_SECONDS} s: is {settings.bootstrap} up?"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m governance.streams.demo",
        description="Send demo clicks to a topic as a producer, with your own Kafka password "
        "(from `custody streams credentials`) on standard input. The cluster is CUSTODY_KAFKA_BOOTSTRAP's.",
    )
    parser.add_argument("user", help="your user name, as the directory knows it")
    parser.add_argument("--count", type=int, default=200, help="clicks to send (default 200)")
    parser.add_argument("--topic", default=TOPIC, help=f"the topic (default {TOPIC})")
    parser.add_argument("--seed", type=int, default=0, help="makes another run's clicks differ")
    args = parser.parse_args(argv)
    password = getpass.getpass(f"{args.user}'s Kafka password: ") if sys.stdin.isatty() else sys.stdin.readline()
    try:
        send(
            KafkaSettings.cluster_from_env(),
            args.topic,
            args.user,
            password.strip(),
            demo_clicks(args.count, args.seed),
        )
    except CustodyError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{args.user} sent {args.count} clicks to {args.topic}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
