#!/usr/bin/env python3
"""Drives an OpenAI-compatible server's streamed /v1/completions with N concurrent streams
and prints one JSON object: aggregate generated tokens per second, time to first token and
inter-token latency (p50 / p99), per-stream rates.

  serving_bench.py --url http://127.0.0.1:8080 --streams 16 --prompt-tokens 128 \
                   --max-tokens 128 [--vocab 32000] [--seed 1] [--model NAME]

Every stream sends a prompt of exactly --prompt-tokens token ids (drawn from the seed, so
two servers get the same prompts) and asks for exactly --max-tokens tokens (ignore_eos),
so Cascade and llama.cpp's server do the same work. Tokens are counted from the streamed
chunks: each chunk a server sends is one or more tokens; the count used is the usage's
completion_tokens when the server reports it, else the number of chunks with text.
Standard library only.
"""
import argparse
import http.client
import json
import random
import statistics
import threading
import time
import urllib.parse


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def one_stream(url, prompt, max_tokens, model, result):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=3600)
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        result["error"] = f"HTTP {resp.status}: {resp.read()[:300]!r}"
        return
    times, usage, buf = [], None, b""
    while True:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if not line.startswith(b"data: "):
                    continue
                data = line[6:].strip()
                if data == b"[DONE]":
                    continue
                j = json.loads(data)
                if j.get("usage"):
                    usage = j["usage"]
                for c in j.get("choices", []):
                    if c.get("text"):
                        times.append(time.monotonic())
    t1 = time.monotonic()
    result.update(start=t0, end=t1, times=times,
                  tokens=(usage or {}).get("completion_tokens") or len(times))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", default="")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    # Ids past the first few hundred: no control or byte tokens in the prompt.
    prompts = [[rng.randrange(300, a.vocab) for _ in range(a.prompt_tokens)]
               for _ in range(a.streams)]
    results = [dict() for _ in range(a.streams)]
    threads = [threading.Thread(target=one_stream,
                                args=(a.url, prompts[i], a.max_tokens, a.model, results[i]))
               for i in range(a.streams)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        print(json.dumps({"error": errors[0], "failed": len(errors)}))
        raise SystemExit(1)
    ttft = [r["times"][0] - r["start"] for r in results if r["times"]]
    itl = []
    for r in results:
        itl += [b - a_ for a_, b in zip(r["times"], r["times"][1:])]
    tokens = sum(r["tokens"] for r in results)
    print(json.dumps({
        "streams": a.streams, "prompt_tokens": a.prompt_tokens, "max_tokens": a.max_tokens,
        "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
        "per_stream_tokens_per_s": statistics.mean(
            r["tokens"] / (r["end"] - r["start"]) for r in results),
        "ttft_p50_s": percentile(ttft, 50), "ttft_p99_s": percentile(ttft, 99),
        "itl_p50_s": percentile(itl, 50), "itl_p99_s": percentile(itl, 99),
        "chunks": sum(len(r["times"]) for r in results)}))


if __name__ == "__main__":
    main()
