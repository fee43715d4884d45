#!/usr/bin/python3
"""Scrapes a running cluster's /metrics before and after a known load and checks what moved,
parsing the text with the Prometheus Python client's own parser (Debian's
python3-prometheus-client), so the format is checked by a real consumer.

Usage: metrics_test.py BIN_DIR MODEL
Starts `cascade serve` (a coordinator and two in-process workers, a two-stage pipeline)
with --http-listen and --cost-per-hour, sends N completions and one stream it abandons,
and checks: requests_total moved by exactly N completed and 1 cancelled, the token
counters by what the responses report, every latency histogram's count by what the load
implies, the cumulative buckets, per-stage and per-hop series for both stages, and the
cost figures.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

bin_dir, model = (os.path.abspath(a) for a in sys.argv[1:3])
work = tempfile.mkdtemp(prefix="cascade_metrics_")
N = 5
MAX_TOKENS = 12
COST = 2.5


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


http_port = free_port()
base = f"http://127.0.0.1:{http_port}"
log = open(os.path.join(work, "serve.log"), "w")
server = subprocess.Popen(
    [os.path.join(bin_dir, "cascade"), "serve", "--model", model, "--workers", "2",
     "--threads", "1", "--listen", f"127.0.0.1:{free_port()}",
     "--control-listen", f"127.0.0.1:{free_port()}",
     "--http-listen", f"127.0.0.1:{http_port}", "--cost-per-hour", str(COST)],
    stdout=log, stderr=subprocess.STDOUT)


def fail(msg):
    log.flush()
    with open(os.path.join(work, "serve.log")) as f:
        sys.stderr.write(f.read()[-4000:])
    server.kill()
    sys.exit(f"FAIL: {msg}")


def get(path):
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return r.status, r.read().decode()


def post(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def scrape():
    status, text = get("/metrics")
    if status != 200:
        fail(f"/metrics answered {status}")
    samples = {}
    families = {}
    for fam in text_string_to_metric_families(text):  # raises on a malformed exposition
        families[fam.name] = fam
        for s in fam.samples:
            labels = dict(s.labels)
            # Every sample names the served model, as /v1/models does (vLLM's model_name).
            if labels.pop("model_name", None) != model_id:
                fail(f"{s.name}{s.labels}: model_name is not {model_id!r}")
            samples[(s.name, tuple(sorted(labels.items())))] = s.value
    return families, samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


deadline = time.time() + 120
while True:
    try:
        if get("/health")[0] == 200:
            break
    except (urllib.error.URLError, ConnectionError):
        pass
    if time.time() > deadline or server.poll() is not None:
        fail("the cluster did not start serving")
    time.sleep(0.2)

model_id = json.loads(get("/v1/models")[1])["data"][0]["id"]
fam0, before = scrape()
prompt_tokens = completion_tokens = 0
for i in range(N):
    r = post("/v1/completions", {"prompt": f"Once upon a time {i}", "max_tokens": MAX_TOKENS,
                                 "temperature": 0, "ignore_eos": True})
    prompt_tokens += r["usage"]["prompt_tokens"]
    completion_tokens += r["usage"]["completion_tokens"]
if completion_tokens != N * MAX_TOKENS:
    fail(f"{completion_tokens} tokens generated, not {N * MAX_TOKENS}")

# A stream the client abandons after its first chunk: the request ends as cancelled.
sock = socket.create_connection(("127.0.0.1", http_port))
body = json.dumps({"prompt": "Once", "max_tokens": 400, "stream": True, "ignore_eos": True})
sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
got = b""
while b"data: " not in got:
    chunk = sock.recv(4096)
    if not chunk:
        fail("the stream closed before its first chunk")
    got += chunk
sock.close()

# The stages' figures come with their heartbeats (every second): wait for one after the load.
deadline = time.time() + 30
while True:
    fam1, after = scrape()
    d = lambda name, **l: value(after, name, **l) - value(before, name, **l)  # noqa: E731
    stages_reported = all(
        any(n == "cascade_stage_frames_total" and dict(l).get("stage") == st and v > 0
            for (n, l), v in after.items()) for st in ("0", "1"))
    if (d("cascade_requests_total", outcome="cancelled") >= 1 and stages_reported) \
            or time.time() > deadline:
        break
    time.sleep(0.2)

checks = []


def check(what, got, want):
    checks.append(what)
    if got != want:
        fail(f"{what}: got {got}, want {want}")


check("completed requests", d("cascade_requests_total", outcome="completed"), N)
check("cancelled requests", d("cascade_requests_total", outcome="cancelled"), 1)
check("failed requests", d("cascade_requests_total", outcome="failed"), 0)
check("rejected requests", d("cascade_requests_total", outcome="rejected"), 0)
if not (prompt_tokens + 1 <= d("cascade_prompt_tokens_total") <= prompt_tokens + 8):
    fail(f"prompt tokens moved by {d('cascade_prompt_tokens_total')}, the completions had "
         f"{prompt_tokens} and the abandoned stream a few")
gen = d("cascade_generation_tokens_total")
if not (completion_tokens + 1 <= gen <= completion_tokens + 400):
    fail(f"generation tokens moved by {gen}; the completions reported {completion_tokens}")
check("time-to-first-token count", d("cascade_time_to_first_token_seconds_count"), N + 1)
check("end-to-end count", d("cascade_request_duration_seconds_count"), N + 1)
check("queue-time count", d("cascade_request_queue_seconds_count"), N + 1)
check("inter-token count (every token but each request's first)",
      d("cascade_inter_token_latency_seconds_count"), gen - (N + 1))
for name in ("cascade_time_to_first_token_seconds", "cascade_inter_token_latency_seconds",
             "cascade_request_duration_seconds", "cascade_request_queue_seconds"):
    fam = fam1[name]
    if fam.type != "histogram":
        fail(f"{name} is a {fam.type}")
    buckets = [s for s in fam.samples if s.name == name + "_bucket"]
    counts = [s.value for s in buckets]
    if counts != sorted(counts) or buckets[-1].labels["le"] != "+Inf":
        fail(f"{name}: buckets are not cumulative up to +Inf")
    if counts[-1] != value(after, name + "_count"):
        fail(f"{name}: the +Inf bucket is not the count")
    if value(after, name + "_sum") <= 0:
        fail(f"{name}: sum is {value(after, name + '_sum')}")

# Both stages report, and every hop of the two-stage pipeline has seen traffic.
for stage in ("0", "1"):
    frames = [v for (n, l), v in after.items()
              if n == "cascade_stage_frames_total" and dict(l).get("stage") == stage]
    if len(frames) != 1 or frames[0] <= 0:
        fail(f"stage {stage}: frames {frames}")
for hop in ("coordinator->0", "0->1", "1->coordinator"):
    if value(after, "cascade_hop_latency_seconds_count", replica="0", hop=hop) <= 0:
        fail(f"hop {hop} has no latency observations")
if value(after, "cascade_hop_activation_bytes_total", replica="0", hop="0->1") <= 0:
    fail("no activation bytes crossed hop 0->1")
if sum(v for (n, l), v in after.items() if n == "cascade_worker_up") != 2:
    fail("two workers should be up")
# One replica (cascade serve makes its workers one pipeline), serving, with the load's tokens.
if value(after, "cascade_replica_up", replica="0") != 1:
    fail("replica 0 should be up")
if value(after, "cascade_replica_generation_tokens_total", replica="0") != value(
        after, "cascade_generation_tokens_total"):
    fail("replica 0's tokens should be the cluster's")

# The KV cache's use, and each worker's process CPU and memory (with its heartbeats).
ratio = value(after, "cascade_kv_cache_usage_ratio")
if not 0 <= ratio <= 1 or "cascade_kv_cache_usage_ratio" not in fam1:
    fail(f"cascade_kv_cache_usage_ratio is {ratio}")
for fam in ("cascade_worker_cpu_seconds_total", "cascade_worker_resident_memory_bytes"):
    per_worker = [v for (n, l), v in after.items() if n == fam]
    if len(per_worker) != 2 or min(per_worker) <= 0:
        fail(f"{fam}: {per_worker}, not a positive figure for each of the two workers")
utilisation = [v for (n, l), v in after.items() if n == "cascade_worker_cpu_utilization_ratio"]
if len(utilisation) != 2 or not all(0 <= u <= 1 for u in utilisation):
    fail(f"cascade_worker_cpu_utilization_ratio: {utilisation}")

# Cost: the two in-process workers share --cost-per-hour.
price = sum(v for (n, l), v in after.items() if n == "cascade_cost_per_hour_dollars")
if abs(price - COST) > 1e-9:
    fail(f"the workers' price adds up to {price}, not {COST}")
rate = value(after, "cascade_generation_tokens_per_second")
per_dollar = value(after, "cascade_generation_tokens_per_dollar")
if rate <= 0 or abs(per_dollar - rate * 3600 / COST) > 1e-6 * max(1.0, per_dollar):
    fail(f"tokens per dollar {per_dollar} is not the rate {rate} x 3600 / {COST}")
for fam in ("cascade_gpu_utilization_ratio", "cascade_gpu_memory_used_bytes",
            "cascade_gpu_temperature_celsius"):
    if fam not in fam1:
        fail(f"{fam} is not declared")

server.send_signal(signal.SIGTERM)
try:
    server.wait(timeout=60)
except subprocess.TimeoutExpired:
    fail("cascade serve did not exit after SIGTERM")
print(f"metrics_test: {len(checks)} exact checks passed; {N} completions, 1 cancelled stream, "
      f"{int(gen)} tokens")
