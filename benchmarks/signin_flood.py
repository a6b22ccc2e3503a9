#!/usr/bin/env python
"""What a flood of sign-ins and a guesser cost the Custody service: `custody serve --no-ui` on loopback,
on a home with the demo's directory (its argon2id hashes), measured from other threads of this process.

  idle          p95 of a catalog read (GET /api/v1/catalog, a token) and of a sign-in (POST
                /api/v1/tokens, with the device token the user's earlier sign-in gave, and without)
  flood         the same while 8 clients send sign-ins for random user names, back to back, for
                --seconds; goal: the read's p95 within 2x idle, a sign-in's <= 500 ms
  guesser       one client guesses alice's password back to back; alice signs in from the client she
                used before, --tries times: the time until she is in; goal <= 5 s
  ledger        bad sign-ins sent at --rate a second (with random names, wrong passwords, forged tokens)
                for --seconds: ledger entries added a minute (goal: bounded, by peer) and whether every
                kind of refusal is among them (goal: all)

    .venv/bin/python -m benchmarks.signin_flood
    .venv/bin/python -m benchmarks.signin_flood --seconds 10 --tries 5      # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.service import start_service
from governance.demo import demo_password
from governance.service.refusals import WINDOW_SECONDS

FLOODERS = 8


def p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20)[18] if len(samples) >= 20 else max(samples)


@contextmanager
def service(home: Path) -> Iterator[str]:
    """`custody serve --no-ui` on `home`; its API's address."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUSTODY_", "DAGSTER_"))}
    env.update(CUSTODY_HOME=str(home), CUSTODY_SPECS=str(ROOT / "assets/specs"), CUSTODY_SPECS_APPROVAL="off")
    process, api = start_service(env)
    try:
        yield api
    finally:
        process.terminate()
        process.wait(timeout=30)


def sign_in(api: str, user: str, password: str, device: str | None = None) -> requests.Response:
    return requests.post(f"{api}/tokens", json={"user": user, "password": password, "device": device}, timeout=120)


def timed(call: Callable[[], requests.Response], ok: int) -> float:
    started = time.perf_counter()
    answer = call()
    if answer.status_code != ok:
        raise SystemExit(f"expected {ok}, got {answer.status_code}: {answer.text[:300]}")
    return time.perf_counter() - started


def measured(api: str, token: str, device: str, seconds: float) -> dict[str, list[float]]:
    """Catalog reads and carol's sign-ins, with her device token and without, for `seconds`."""
    found: dict[str, list[float]] = {"read": [], "sign-in (known client)": [], "sign-in (new client)": []}
    headers = {"Authorization": f"Bearer {token}"}
    password = demo_password("carol")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found["read"].append(timed(lambda: requests.get(f"{api}/catalog", headers=headers, timeout=120), 200))
        found["sign-in (known client)"].append(timed(lambda: sign_in(api, "carol", password, device), 201))
        found["sign-in (new client)"].append(timed(lambda: sign_in(api, "carol", password), 201))
        time.sleep(0.05)
    return found


@contextmanager
def clients(count: int, send: Callable[[int], object]):
    """`count` threads calling `send` back to back until the block ends."""
    stop = threading.Event()

    def loop() -> None:
        n = 0
        while not stop.is_set():
            send(n)
            n += 1

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)


def ledger_entries(api: str, token: str) -> list[dict]:
    headers = {"Authorization": f"Bearer {token}"}
    found, start = [], 1
    while True:
        page = requests.get(f"{api}/ledger", params={"from_seq": start, "limit": 10000}, headers=headers, timeout=120)
        entries = page.json()
        found.extend(entries)
        if len(entries) < 10000:
            return found
        start = entries[-1]["seq"] + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60, help="how long the flood and the bad sign-ins last")
    parser.add_argument("--tries", type=int, default=20, help="alice's sign-ins while the guesser guesses")
    parser.add_argument("--rate", type=float, default=200, help="bad sign-ins a second in the ledger's part")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="custody-signin-bench-") as folder, service(Path(folder) / "home") as api:
        carol = sign_in(api, "carol", demo_password("carol")).json()
        token, device = carol["token"], carol["device"]
        measured(api, token, device, 3)  # warm-up
        idle = measured(api, token, device, min(args.seconds, 20))

        def flood(n: int) -> None:
            sign_in(api, f"user{secrets.token_hex(4)}", f"guess-{n}")

        with clients(FLOODERS, flood):
            time.sleep(2)
            flooded = measured(api, token, device, args.seconds)
        print(f"{FLOODERS} clients sending sign-ins for random user names, {args.seconds:g} s:")
        for name in idle:
            print(
                f"  {name:<24} p95 idle {p95(idle[name]) * 1000:7.1f} ms   flooded {p95(flooded[name]) * 1000:7.1f} ms"
                f"   ({len(flooded[name])} samples)"
            )
        ratio = p95(flooded["read"]) / p95(idle["read"])
        known = p95(flooded["sign-in (known client)"])
        print(
            f"  catalog read p95 flooded/idle {ratio:.2f} (goal <= 2); known client's sign-in p95 {known * 1000:.0f} ms (goal <= 500)"
        )

        alice = sign_in(api, "alice", demo_password("alice")).json()["device"]

        def guess(n: int) -> None:
            sign_in(api, "alice", f"guess-{n}")

        waits = []
        with clients(1, guess):
            time.sleep(2)
            for _ in range(args.tries):
                waits.append(timed(lambda: sign_in(api, "alice", demo_password("alice"), alice), 201))
                time.sleep(0.5)
        print(
            f"alice signs in from her client while a guesser guesses: {args.tries} of {args.tries} at the first try, "
            f"p50 {statistics.median(waits) * 1000:.0f} ms, max {max(waits) * 1000:.0f} ms (goal <= 5 s)"
        )

        kinds = {
            "forged token": "this token is expired or was not made by this service",
            "wrong password": "unknown user or wrong password",
            "slowed down": "too many failed logins in a row",
            "too many sign-ins at once": "too many sign-ins are being checked at once",
        }
        auditor = sign_in(api, "dave", demo_password("dave")).json()["token"]
        time.sleep(WINDOW_SECONDS + 5)  # what came before is recorded: the count below is this part's alone
        before = len(ledger_entries(api, auditor))
        sent: list[str] = []
        interval = FLOODERS / args.rate

        def bad(n: int) -> None:
            started = time.perf_counter()
            if n % 3 == 0:
                answer = requests.get(f"{api}/whoami", headers={"Authorization": f"Bearer forged.{n}"}, timeout=120)
            elif n % 3 == 1:
                answer = sign_in(api, "bob", f"guess-{n}")
            else:
                answer = sign_in(api, f"nobody{n}", "guess")
            sent.append(next((name for name, said in kinds.items() if said in answer.text), answer.text[:80]))
            time.sleep(max(0.0, interval - (time.perf_counter() - started)))

        started = time.monotonic()
        with clients(FLOODERS, bad):
            time.sleep(args.seconds)
        elapsed = time.monotonic() - started
        time.sleep(WINDOW_SECONDS + 5)  # the last windows' repeats are recorded
        added = ledger_entries(api, auditor)[before:]
        refused = [e for e in added if e["details"].get("result") == "denied"]
        counted = sum(e["details"].get("repeats", 1) for e in refused)
        reasons = json.dumps([e["details"] for e in refused])
        seen = sorted(set(sent))
        present = [name for name in seen if name in kinds and kinds[name] in reasons]
        print(
            f"{len(sent)} bad requests in {elapsed:.0f} s ({len(sent) / elapsed:.0f}/s): {len(added)} ledger entries "
            f"({len(added) / elapsed * 60:.0f} a minute), counting {counted} refusals "
            f"({'all' if counted == len(sent) else 'NOT all'} of them); kinds answered: {', '.join(seen)}; "
            f"recorded: {len(present)} of {len(seen)}"
        )


if __name__ == "__main__":
    main()
