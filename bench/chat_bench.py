#!/usr/bin/env python3
"""Multi-turn chat load on an OpenAI-compatible server's streamed /v1/completions: the
workload a prefix cache is for. Prints one JSON object.

  chat_bench.py --url http://127.0.0.1:8080 [--conversations 16] [--turns 4]
                [--system-words 750] [--user-words 38] [--max-tokens 64] [--seed 1]

Every conversation starts with the same system prompt (--system-words words, about 1,000
tokens for a Llama tokenizer), and each turn appends a user message of its own
(--user-words words, ~50 tokens) to the whole history so far, as chat clients do: turn k
sends the system prompt, every earlier user message and answer, and the new message. The
conversations run at once, each sending its next turn when the previous answer has ended.
Each answer is exactly --max-tokens tokens (ignore_eos, temperature 0). The words are
drawn from a fixed list by the seed, so two servers get the same text.

Reported: wall time, generated and prompt tokens per second, time to first token (p50,
p90) over all requests and for the first turn and the later ones, and the prompt tokens
the server says it took from its cache (usage.prompt_tokens_details.cached_tokens, or
llama.cpp's timings.cache_n). Standard library only.
"""
import argparse
import http.client
import json
import random
import threading
import time
import urllib.parse

from serving_bench import percentile

WORDS = ("the a and of to in is was that for on with as at by from his her they we you "
         "said one all would there their what so up out if about who get which go me when "
         "make can like time no just him know take people into year your good some could "
         "them see other than then now look only come its over think also back after use "
         "two how our work first well way even new want because any these give day most "
         "us river garden window morning summer story little house water light music paper "
         "table friend letter mountain forest village market winter evening bridge teacher "
         "student kitchen doctor animal city country ocean island train station library "
         "picture question answer number reason family").split()


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def complete(url, prompt, max_tokens, model):
    """One streamed completion: (answer text, seconds to the first text, usage dict)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=3600)
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    text, first, usage, cache_n, buf = [], None, {}, None, b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if not line.startswith(b"data: ") or line[6:].strip() == b"[DONE]":
                    continue
                j = json.loads(line[6:])
                usage = j.get("usage") or usage
                if "timings" in j:  # llama.cpp's server: prompt tokens taken from its cache
                    cache_n = j["timings"].get("cache_n", cache_n)
                for c in j.get("choices", []):
                    if c.get("text"):
                        if first is None:
                            first = time.monotonic() - t0
                        text.append(c["text"])
    conn.close()
    cached = ((usage.get("prompt_tokens_details") or {}).get("cached_tokens"))
    if cached is None:
        cached = cache_n
    return "".join(text), first, usage, cached


def conversation(a, system, seed, out):
    rng = random.Random(seed)
    history = system
    try:
        for turn in range(a.turns):
            history += "\nUser: " + words(rng, a.user_words) + "\nAssistant:"
            answer, ttft, usage, cached = complete(a.url, history, a.max_tokens, a.model)
            out.append({"turn": turn, "ttft": ttft, "prompt": usage.get("prompt_tokens", 0),
                        "generated": usage.get("completion_tokens", 0), "cached": cached})
            history += answer
    except Exception as e:  # reported, and the run fails
        out.append({"error": str(e)})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--conversations", type=int, default=16)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--system-words", type=int, default=750)
    ap.add_argument("--user-words", type=int, default=38)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", default="")
    a = ap.parse_args()
    system = "System: " + words(random.Random(a.seed), a.system_words)
    results = [[] for _ in range(a.conversations)]
    threads = [threading.Thread(target=conversation, args=(a, system, a.seed * 1000 + i, results[i]))
               for i in range(a.conversations)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    rows = [r for conv in results for r in conv]
    errors = [r["error"] for r in rows if "error" in r]
    if errors:
        print(json.dumps({"error": errors[0], "failed": len(errors)}))
        raise SystemExit(1)
    ttft = [r["ttft"] for r in rows if r["ttft"] is not None]
    later = [r["ttft"] for r in rows if r["turn"] > 0 and r["ttft"] is not None]
    first = [r["ttft"] for r in rows if r["turn"] == 0 and r["ttft"] is not None]
    prompt = sum(r["prompt"] for r in rows)
    cached = [r["cached"] for r in rows if r["cached"] is not None]
    generated = sum(r["generated"] for r in rows)
    print(json.dumps({
        "conversations": a.conversations, "turns": a.turns, "requests": len(rows),
        "wall_s": wall, "generated_tokens": generated, "prompt_tokens": prompt,
        "tokens_per_s": generated / wall, "prompt_tokens_per_s": prompt / wall,
        "ttft_p50_s": percentile(ttft, 50), "ttft_p90_s": percentile(ttft, 90),
        "ttft_first_turn_p50_s": percentile(first, 50), "ttft_later_turns_p50_s": percentile(later, 50),
        "cached_prompt_tokens": sum(cached) if cached else None,
        "cached_ratio": (sum(cached) / prompt) if cached and prompt else None}))


if __name__ == "__main__":
    main()
