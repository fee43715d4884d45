#!/usr/bin/python3
"""The text Cascade generates, byte for byte, through its three ways in: `cascade generate`
in one process, the public gRPC API (`cascade generate --server`) and the OpenAI HTTP API
of a two-worker `cascade serve`, on the bundled model, greedy and seeded.

Usage: serving_golden_test.py BIN_DIR MODEL GOLDEN_JSON [--record]

The golden file was recorded before the serving core moved out of the coordinator
(issue 41) and must not change when code is only moved or renamed: every case's text
through every surface is compared with it, and within a case the three surfaces must agree
with one another (they are given the same explicit sampling settings). --record rewrites
the file from this build (only when a change of behaviour is intended and explained).
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

bin_dir, model, golden_path = (os.path.abspath(a) for a in sys.argv[1:4])
record = "--record" in sys.argv[4:]
cascade = os.path.join(bin_dir, "cascade")
work = tempfile.mkdtemp(prefix="cascade_golden_")
PROMPT = "Once upon a time"

# Each case: the settings every surface is given, written out in full so that no surface's
# own defaults take part.
CASES = {
    "greedy": dict(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=48),
    "seeded": dict(temperature=0.9, top_k=40, top_p=0.95, min_p=0.05, seed=1234,
                   max_tokens=48),
    "seeded_penalties": dict(temperature=0.7, top_k=0, top_p=1.0, min_p=0.0, seed=99,
                             repetition_penalty=1.3, frequency_penalty=0.5,
                             presence_penalty=0.3, max_tokens=48),
    "greedy_stop": dict(temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, max_tokens=48,
                        stop=["Lily"]),
}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cli_args(c):
    args = ["--prompt", PROMPT, "--no-echo", "--max-tokens", str(c["max_tokens"]),
            "--temperature", str(c["temperature"]), "--top-k", str(c["top_k"]),
            "--top-p", str(c["top_p"]), "--min-p", str(c["min_p"]),
            "--repeat-penalty", str(c.get("repetition_penalty", 1.0)),
            "--frequency-penalty", str(c.get("frequency_penalty", 0.0)),
            "--presence-penalty", str(c.get("presence_penalty", 0.0)),
            "--seed", str(c.get("seed", 0))]
    for s in c.get("stop", []):
        args += ["--stop", s]
    return args


def run_cli(extra, c):
    r = subprocess.run([cascade, "generate"] + extra + cli_args(c), capture_output=True,
                       timeout=300)
    if r.returncode != 0:
        sys.exit(f"FAIL: cascade generate {' '.join(extra)} exited {r.returncode}:\n"
                 f"{r.stderr.decode(errors='replace')[-2000:]}")
    # The CLI ends its output with one newline of its own.
    out = r.stdout.decode()
    return out[:-1] if out.endswith("\n") else out


def http_body(c):
    body = {"prompt": PROMPT, "max_tokens": c["max_tokens"], "temperature": c["temperature"],
            "top_k": c["top_k"], "top_p": c["top_p"], "min_p": c["min_p"],
            "repetition_penalty": c.get("repetition_penalty", 1.0),
            "frequency_penalty": c.get("frequency_penalty", 0.0),
            "presence_penalty": c.get("presence_penalty", 0.0), "seed": c.get("seed", 0)}
    if "stop" in c:
        body["stop"] = c["stop"]
    return body


def post(base, body):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


got = {name: {} for name in CASES}
for name, c in CASES.items():
    got[name]["generate"] = run_cli(["--model", model, "--threads", "1"], c)

grpc_port, http_port = free_port(), free_port()
log = open(os.path.join(work, "serve.log"), "w")
server = subprocess.Popen(
    # An F32 KV cache, as `cascade generate` keeps and the golden text was recorded with
    # (serve's default, F16, rounds keys and values).
    [cascade, "serve", "--model", model, "--workers", "2", "--threads", "1", "--kv-type", "f32",
     "--listen", f"127.0.0.1:{grpc_port}", "--control-listen", f"127.0.0.1:{free_port()}",
     "--http-listen", f"127.0.0.1:{http_port}"], stdout=log, stderr=subprocess.STDOUT)
base = f"http://127.0.0.1:{http_port}"
try:
    deadline = time.time() + 120
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"cascade serve exited with {server.returncode}")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    break
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        if time.time() > deadline:
            raise RuntimeError("cascade serve did not become healthy in 120 s")
        time.sleep(0.2)
    for name, c in CASES.items():
        got[name]["grpc"] = run_cli(["--server", f"127.0.0.1:{grpc_port}"], c)
        got[name]["http"] = post(base, http_body(c))["choices"][0]["text"]
except Exception as e:  # noqa: BLE001 - report with the server's log
    log.flush()
    sys.stderr.write(open(os.path.join(work, "serve.log")).read()[-4000:])
    server.kill()
    sys.exit(f"FAIL: {e}")
finally:
    server.terminate()
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()

if record:
    with open(golden_path, "w") as f:
        json.dump(got, f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    print(f"recorded {golden_path}")
    sys.exit(0)

with open(golden_path) as f:
    golden = json.load(f)
failures = 0
for name in CASES:
    for surface in ("generate", "grpc", "http"):
        want, have = golden[name][surface], got[name][surface]
        ok = want == have
        failures += not ok
        print(("ok   " if ok else "FAIL ") + f"{name} via {surface}: {len(have)} bytes" +
              ("" if ok else f"\n  want {want!r}\n  got  {have!r}"))
    same = got[name]["generate"] == got[name]["grpc"] == got[name]["http"]
    failures += not same
    print(("ok   " if same else "FAIL ") + f"{name}: the three surfaces agree")
    if not got[name]["generate"]:
        failures += 1
        print(f"FAIL {name}: empty text")
print("serving golden: " + ("every check passed" if not failures else f"{failures} check(s) failed"))
sys.exit(1 if failures else 0)
