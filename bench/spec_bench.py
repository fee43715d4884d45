#!/usr/bin/env python3
"""One stream's decode speed through an OpenAI-compatible server (streamed
/v1/completions, ignore_eos): the tokens/s after the first token, for a given prompt,
greedy or seeded. Against a Cascade server it also reads /metrics before and after, and
reports the speculative drafts of its rounds: drafted and accepted tokens, the acceptance
rate a, trips (the stream's steps through the pipeline: generated - accepted) and tokens
per trip. Prints one JSON object.

  spec_bench.py --url http://127.0.0.1:8080 --prompt TEXT [--max-tokens 128] [--rounds 2]
                [--temperature 0] [--seed 1]

Every round sends the same request, so every round has the same text and drafts.
Standard library only.
"""
import argparse
import http.client
import json
import time
import urllib.parse


def one(url, prompt, max_tokens, temperature, seed):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": temperature,
            "seed": seed, "stream": True, "ignore_eos": True}
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    first, text = None, []
    for line in resp:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        ev = json.loads(line[6:])
        for c in ev.get("choices", []):
            if c.get("text"):
                text.append(c["text"])
                if first is None:
                    first = time.monotonic()
    end = time.monotonic()
    return first, end, "".join(text)


def spec_counters(url):
    """(drafted, accepted) summed over replicas; (0, 0) where the server has no such series."""
    u = urllib.parse.urlparse(url)
    try:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        conn.request("GET", "/metrics")
        body = conn.getresponse().read().decode()
    except OSError:
        return 0, 0
    sums = {"cascade_spec_draft_tokens_total": 0.0, "cascade_spec_accepted_tokens_total": 0.0}
    for line in body.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in sums:
            sums[name] += float(line.rsplit(" ", 1)[1])
    return sums["cascade_spec_draft_tokens_total"], sums["cascade_spec_accepted_tokens_total"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    best, text = 0.0, ""
    drafted0, accepted0 = spec_counters(a.url)
    for _ in range(a.rounds):
        first, end, text = one(a.url, a.prompt, a.max_tokens, a.temperature, a.seed)
        best = max(best, (a.max_tokens - 1) / (end - first))
    drafted1, accepted1 = spec_counters(a.url)
    drafted, accepted = drafted1 - drafted0, accepted1 - accepted0
    generated = a.rounds * a.max_tokens
    trips = generated - accepted
    print(json.dumps({
        "decode_tokens_per_s": best, "text": text[:200], "drafted": drafted,
        "accepted": accepted, "acceptance": accepted / drafted if drafted else 0.0,
        "trips": trips, "tokens_per_trip": generated / trips if trips else 0.0,
        "drafts_per_trip": drafted / trips if trips else 0.0}))


if __name__ == "__main__":
    main()
