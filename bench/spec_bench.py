#!/usr/bin/env python3
"""One stream's decode speed through an OpenAI-compatible server (streamed
/v1/completions, temperature 0, ignore_eos): the tokens/s after the first token, for a
given prompt. Prints one JSON object.

  spec_bench.py --url http://127.0.0.1:8080 --prompt TEXT [--max-tokens 128] [--rounds 2]

Standard library only.
"""
import argparse
import http.client
import json
import time
import urllib.parse


def one(url, prompt, max_tokens):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True}
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    first, chunks, text = None, 0, []
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    best, text = 0.0, ""
    for _ in range(a.rounds):
        first, end, text = one(a.url, a.prompt, a.max_tokens)
        best = max(best, (a.max_tokens - 1) / (end - first))
    print(json.dumps({"decode_tokens_per_s": best, "text": text[:200]}))


if __name__ == "__main__":
    main()
