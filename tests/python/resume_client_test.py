#!/usr/bin/python3
"""The resume logic of client/python/cascade_client.py, against fake servers (no cluster):
Debian's python3-grpcio, stubs generated from proto/ with grpc_tools into a temporary
folder.

Usage: resume_client_test.py [PROTO_DIR]   (default: the repository's proto/)

A fake server streams a fixed text, one or two token ids a message, honours the seed and
resume_after_tokens as Cascade's coordinators do, and can break its stream after N
messages or refuse as a standby does. Checks that a broken stream is sent again with
resume_after_tokens = the token ids received and the seed the first response reported,
that the text yielded is the unbroken stream's, that a standby is passed by at once, the
backoff, giving up, final errors, that closing the generator cancels the call, and that
a call whose receive never completes and whose cancel() does nothing is left after the
stall timeout and resumed; then
the same through real gRPC channels, to in-process Python servers on loopback (one breaks
its stream, one hangs) and to an address where nothing listens.
"""
import atexit
import contextlib
import io
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent import futures

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.normpath(os.path.join(here, "..", ".."))
proto_dir = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(root, "proto")
os.environ.pop("CASCADE_PY_STUBS", None)
os.environ["CASCADE_PROTO_DIR"] = proto_dir
os.environ["CASCADE_STUB_CACHE"] = tempfile.mkdtemp(prefix="cascade_resume_test_")
atexit.register(shutil.rmtree, os.environ["CASCADE_STUB_CACHE"], True)
sys.path.insert(0, os.path.join(root, "client", "python"))
import grpc  # noqa: E402
import cascade_client as cc  # noqa: E402

pb2, _ = cc.load_stubs()

failures = []
def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


class FakeRpcError(grpc.RpcError):
    def __init__(self, code, details):
        super().__init__(details)
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


SERVER_SEED = 4242  # what a fake server picks when the request names none
TOKENS_PER_MESSAGE = [1, 2, 1, 1, 2, 1, 1, 1, 2, 1]  # 13 token ids in 10 messages


def full_stream(req):
    """The messages an unbroken stream of `req` gives: token ids and text derived from the
    seed, request_id and seed on the first message, the finish reason on the last."""
    seed = req.sampling.seed if req.sampling.has_seed else SERVER_SEED
    out, tok = [], 0
    for i, n in enumerate(TOKENS_PER_MESSAGE):
        ids = [(seed * 31 + tok + k) % 997 for k in range(n)]
        tok += n
        out.append(pb2.GenerateResponse(text="".join(f"<{t}>" for t in ids), token_ids=ids))
    out[-1].finish_reason = pb2.FINISH_REASON_LENGTH
    return out, seed


def expected_text(seed):
    req = pb2.GenerateRequest()
    req.sampling.seed, req.sampling.has_seed = seed, True
    return "".join(m.text for m in full_stream(req)[0])


class FakeCall:
    """A response stream: `messages`, then `error` (None: the stream ends OK)."""

    def __init__(self, messages, error):
        self._it = iter(messages)
        self._error = error
        self.cancelled = False

    def __iter__(self):
        return self

    def __next__(self):
        if self.cancelled:
            raise FakeRpcError(grpc.StatusCode.CANCELLED, "Locally cancelled")
        try:
            return next(self._it)
        except StopIteration:
            if self._error is not None:
                raise self._error from None
            raise

    def cancel(self):
        self.cancelled = True


wedge_release = threading.Event()  # set only at the end, to let the wedged readers go


class WedgedCall(FakeCall):
    """A call cut off as nft cuts a coordinator's host off (grpcio 1.51): `messages`, then
    its receive never completes, and cancel() returns False and does nothing."""

    def __next__(self):
        if self._it is None:
            raise StopIteration
        try:
            return next(self._it)
        except StopIteration:
            self._it = None
            wedge_release.wait()
            raise FakeRpcError(grpc.StatusCode.UNAVAILABLE, "released late") from None

    def cancel(self):
        self.cancel_tries = getattr(self, "cancel_tries", 0) + 1
        return False


class Cluster:
    """Fake coordinators by address. behaviour[address] is a list consumed one call at a
    time: ("serve",), ("break", N) (N messages, then UNAVAILABLE), ("wedge", N) (N
    messages, then a WedgedCall), ("refuse", code, details) (at once, before any message)."""

    def __init__(self, behaviour):
        self.behaviour = {a: list(b) for a, b in behaviour.items()}
        self.calls = []     # (address, copy of the request, metadata)
        self.sleeps = []
        self.streams = []

    def stub(self, address):
        cluster = self

        class Stub:
            def Generate(self, request, metadata=()):
                req = pb2.GenerateRequest()
                req.CopyFrom(request)
                cluster.calls.append((address, req, tuple(metadata)))
                plan = cluster.behaviour[address].pop(0)
                if plan[0] == "refuse":
                    call = FakeCall([], FakeRpcError(plan[1], plan[2]))
                else:
                    msgs, seed = full_stream(req)
                    # Resuming: the same tokens again, only those after resume_after_tokens.
                    skip, kept = req.resume_after_tokens, []
                    for m in msgs:
                        if skip >= len(m.token_ids):
                            skip -= len(m.token_ids)
                            continue
                        assert skip == 0, "the fake splits no message"
                        kept.append(m)
                    if kept:
                        kept[0].request_id = f"req-{len(cluster.calls)}"
                        kept[0].seed = seed
                    if plan[0] == "wedge":
                        call = WedgedCall(kept[:plan[1]], None)
                    elif plan[0] == "break":
                        call = FakeCall(kept[:plan[1]], FakeRpcError(
                            grpc.StatusCode.UNAVAILABLE, "Socket closed"))
                    else:
                        call = FakeCall(kept, None)
                cluster.streams.append(call)
                return call

        return Stub()

    def sleep(self, s):
        self.sleeps.append(s)


def run(cluster, **kw):
    return "".join(cc.generate(kw.pop("servers", ["a", "b"]), "Once upon a time",
                               max_tokens=13, stub_factory=cluster.stub, sleep=cluster.sleep,
                               **kw))


def tokens_in(n_messages):
    return sum(TOKENS_PER_MESSAGE[:n_messages])


# 1. A stream that breaks after 3 messages (4 token ids) resumes on the other server with
#    resume_after_tokens 4 and the seed the first response reported.
c = Cluster({"a": [("break", 3)], "b": [("serve",)]})
resumed = []
text = run(c, temperature=0.8, on_resume=lambda s, e: resumed.append((s, e)))
check(text == expected_text(SERVER_SEED), f"the text is the unbroken stream's ({text[:40]}...)")
check([a for a, _, _ in c.calls] == ["a", "b"], f"a, then b ({[a for a, _, _ in c.calls]})")
first, second = c.calls[0][1], c.calls[1][1]
check(not first.sampling.has_seed and first.resume_after_tokens == 0,
      "the first call names no seed and resumes nothing")
check(second.resume_after_tokens == tokens_in(3) == 4,
      f"the second call has resume_after_tokens = the token ids received ({second.resume_after_tokens})")
check(second.sampling.has_seed and second.sampling.seed == SERVER_SEED,
      f"the second call has the reported seed ({second.sampling.has_seed}, {second.sampling.seed})")
same = pb2.GenerateRequest()
same.CopyFrom(second)
same.resume_after_tokens = 0
same.sampling.ClearField("seed")
same.sampling.ClearField("has_seed")
check(same == first, "the resumed request is otherwise the same request")
check(abs(first.sampling.temperature - 0.8) < 1e-6 and first.prompt == "Once upon a time"
      and first.max_tokens == 13, "the request carries prompt, max_tokens and temperature")
check(c.sleeps == [0.05], f"one pause of 50 ms before resuming ({c.sleeps})")
check(resumed == [("b", "a: Socket closed")],
      f"on_resume says where and why ({resumed})")

# 2. Breaks on both servers: each resend counts every token id received so far.
c = Cluster({"a": [("break", 2), ("serve",)], "b": [("break", 3)]})
text = run(c, temperature=1.0)
check(text == expected_text(SERVER_SEED), "two breaks: the text is the unbroken stream's")
check([r.resume_after_tokens for _, r, _ in c.calls] == [0, tokens_in(2), tokens_in(5)],
      f"resume_after_tokens 0, 3, 7 ({[r.resume_after_tokens for _, r, _ in c.calls]})")
check(all(r.sampling.seed == SERVER_SEED for _, r, _ in c.calls[1:]), "the seed is kept")
check(c.sleeps == [0.05, 0.05], f"the backoff starts again after a message ({c.sleeps})")

# 3. A standby refuses at once: the next server is tried without a pause.
c = Cluster({"s": [("refuse", grpc.StatusCode.UNAVAILABLE,
                    "this coordinator is a standby (no leader yet): send requests to the leader")],
             "a": [("serve",)]})
text = run(c, servers="s,a")
check(text == expected_text(SERVER_SEED) and [a for a, _, _ in c.calls] == ["s", "a"],
      "a standby is passed by (servers given as 'host,host')")
check(c.sleeps == [], f"no pause before the second server ({c.sleeps})")
check(c.calls[1][1].resume_after_tokens == 0 and not c.calls[1][1].sampling.has_seed,
      "nothing received: the request is sent as it was")

# 4. A seed the caller gives is the one sent every time; an API key goes as a bearer token.
c = Cluster({"a": [("break", 4)], "b": [("serve",)]})
text = run(c, temperature=0.9, seed=7, api_key="k3y")
check(text == expected_text(7), "seed 7: the text is that seed's unbroken stream")
check(all(r.sampling.has_seed and r.sampling.seed == 7 for _, r, _ in c.calls),
      "seed 7 on both calls")
check(all(("authorization", "Bearer k3y") in m for _, _, m in c.calls), "authorization: Bearer")

# 5. Everyone refuses: round after round, with a pause after each round, 50 ms doubling
#    to 1 s, until 60 s have passed without a message.
now = [0.0]
def fake_sleep(s):
    c.sleeps.append(s)
    now[0] += s
c = Cluster({"a": [("refuse", grpc.StatusCode.UNAVAILABLE, "lost the leadership")] * 1000,
             "b": [("refuse", grpc.StatusCode.UNAVAILABLE, "connection refused")] * 1000})
try:
    req = pb2.GenerateRequest(prompt="x", max_tokens=3)
    list(cc.generate_responses(["a", "b"], req, stub_factory=c.stub, sleep=fake_sleep,
                               clock=lambda: now[0]))
    check(False, "gives up when no server answers")
except cc.GenerateError as e:
    check(e.code == grpc.StatusCode.UNAVAILABLE and "giving up" in e.details,
          f"gives up with UNAVAILABLE ({e})")
check(c.sleeps[:6] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0] and max(c.sleeps) == 1.0,
      f"backoff 50 ms doubling to 1 s ({c.sleeps[:7]})")
check(len(c.calls) == 2 * len(c.sleeps) + 1 and 60.0 < now[0] <= 61.0,
      f"a round of two calls, then a pause; about 60 s in all ({len(c.calls)} calls, {now[0]:.2f} s)")

# 6. A final status ends it at once.
c = Cluster({"a": [("refuse", grpc.StatusCode.INVALID_ARGUMENT, "prompt: empty")],
             "b": [("serve",)]})
try:
    run(c)
    check(False, "INVALID_ARGUMENT is final")
except cc.GenerateError as e:
    check(e.code == grpc.StatusCode.INVALID_ARGUMENT and e.details == "a: prompt: empty"
          and len(c.calls) == 1, f"INVALID_ARGUMENT is final, naming the server ({e})")

# 7. Every code a lost coordinator gives is retried.
for code in sorted(cc.RETRYABLE, key=lambda x: x.name):
    c = Cluster({"a": [("refuse", code, "gone")], "b": [("serve",)]})
    check(run(c) == expected_text(SERVER_SEED), f"{code.name} is retried")

# 8. Closing the generator cancels the call.
c = Cluster({"a": [("serve",)]})
gen = cc.generate(["a"], "x", stub_factory=c.stub, sleep=c.sleep)
next(gen)
gen.close()
check(c.streams[0].cancelled, "closing the generator cancels the call")

# 9. A call whose receive never completes and whose cancel() does nothing (a coordinator's
#    host cut off with nft, grpcio 1.51): given up on after stall_timeout_s, resumed on the
#    next server with resume_after_tokens = the token ids received. Twice, so the second
#    wedged call follows an abandoned one.
c = Cluster({"a": [("wedge", 3), ("serve",)], "b": [("wedge", 2)]})
resumed = []
t0 = time.monotonic()
text = run(c, temperature=0.6, stall_timeout_s=0.3,
           on_resume=lambda s, e: resumed.append((s, e)))
took = time.monotonic() - t0
check(text == expected_text(SERVER_SEED),
      f"wedged calls: the text is the unbroken stream's ({text[:40]}...)")
check([(a, r.resume_after_tokens) for a, r, _ in c.calls]
      == [("a", 0), ("b", tokens_in(3)), ("a", tokens_in(5))]
      and all(r.sampling.seed == SERVER_SEED for _, r, _ in c.calls[1:]),
      f"wedged calls: resumed on b with resume_after_tokens 4, then on a with 7, the seed kept "
      f"({[(a, r.resume_after_tokens) for a, r, _ in c.calls]})")
check(resumed == [("b", "a: the stream stalled (nothing received)"),
                  ("a", "b: the stream stalled (nothing received)")]
      and c.sleeps == [0.05, 0.05],
      f"wedged calls: on_resume says they stalled, the usual backoff ({resumed}, {c.sleeps})")
check([getattr(s, "cancel_tries", 0) for s in c.streams[:2]] == [1, 1] and 0.5 < took < 5,
      f"wedged calls: cancelled (in vain) once each, left after stall_timeout_s ({took:.1f} s)")
wedge_release.set()  # their readers end now, on queues no call reads any more

# 9b. Wedged from the start, everywhere: given up on after give_up_after_s.
wedge_release.clear()
c = Cluster({"a": [("wedge", 0)] * 100, "b": [("wedge", 0)] * 100})
t0 = time.monotonic()
try:
    run(c, stall_timeout_s=0.2, give_up_after_s=0.7)
    check(False, "wedged from the start: given up on")
except cc.GenerateError as e:
    took = time.monotonic() - t0
    check(e.code == grpc.StatusCode.CANCELLED and "giving up" in e.details
          and 0.6 < took < 5 and len(c.calls) >= 3,
          f"wedged from the start: given up after give_up_after_s ({len(c.calls)} calls, "
          f"{took:.1f} s: {e})")
wedge_release.set()

# 10. The CLI through real gRPC channels: nothing listens on port 1, so UNAVAILABLE until
#    it gives up.
err = io.StringIO()
with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
    rc = cc.main(["--server", "127.0.0.1:1,127.0.0.1:1", "--prompt", "x", "--max-tokens", "2",
                  "--give-up-after-s", "0.5"])
check(rc == 1 and "UNAVAILABLE" in err.getvalue() and "giving up" in err.getvalue(),
      f"the CLI gives up on servers that do not answer (rc {rc}: {err.getvalue().strip()[:120]})")

# 11. Real gRPC, in-process Python servers on loopback: one breaks its stream (aborts
#     with UNAVAILABLE after two messages), the other takes the resumed request; one that
#     stops sending after a message is left after stall_timeout_s and the stream resumed;
#     one that never sends is given up on after give_up_after_s; a caller that takes its
#     time with each piece is no stall.
_, pb2_grpc = cc.load_stubs()
seen = []
hang = threading.Event()


class Servicer(pb2_grpc.InferenceServicer):
    def __init__(self, name, mode):
        self.name, self.mode = name, mode

    def Generate(self, request, context):
        seen.append((self.name, pb2.GenerateRequest.FromString(request.SerializeToString()),
                     dict(context.invocation_metadata()).get("authorization")))
        if self.mode == "mute":
            hang.wait(10)
            return
        msgs, seed = full_stream(request)
        skip, first = request.resume_after_tokens, True
        for i, m in enumerate(msgs):
            if skip >= len(m.token_ids):
                skip -= len(m.token_ids)
                continue
            if first:
                m.request_id, m.seed, first = "r1", seed, False
            yield m
            if self.mode == "break" and i == 1:
                context.abort(grpc.StatusCode.UNAVAILABLE, "lost the leadership (test)")
            if self.mode == "hang":
                hang.wait(10)
                return


servers = []
def serve(name, mode):
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb2_grpc.add_InferenceServicer_to_server(Servicer(name, mode), srv)
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    servers.append(srv)
    return f"127.0.0.1:{port}"


try:
    a, b, h, m = serve("a", "break"), serve("b", "serve"), serve("h", "hang"), serve("m", "mute")
    text = "".join(cc.generate([a, b], "Once upon a time", max_tokens=13, temperature=0.7,
                               api_key="k"))
    check(text == expected_text(SERVER_SEED), "real gRPC: the resumed text is the unbroken stream's")
    check([n for n, _, _ in seen] == ["a", "b"] and seen[1][1].resume_after_tokens == tokens_in(2)
          and seen[1][1].sampling.has_seed and seen[1][1].sampling.seed == SERVER_SEED
          and seen[1][2] == "Bearer k",
          "real gRPC: resumed on b with resume_after_tokens 3, the seed and the API key")

    seen.clear()
    resumed = []
    t0 = time.monotonic()
    text = "".join(cc.generate([h, b], "x", temperature=0.5, stall_timeout_s=0.5,
                               on_resume=lambda s, e: resumed.append(e)))
    took = time.monotonic() - t0
    check(text == expected_text(SERVER_SEED) and [n for n, _, _ in seen] == ["h", "b"]
          and seen[1][1].resume_after_tokens == tokens_in(1) and 0.4 < took < 5
          and len(resumed) == 1 and "stalled" in resumed[0],
          f"a stream that stalls is resumed elsewhere after stall_timeout_s ({took:.1f} s, {resumed})")

    seen.clear()
    t0 = time.monotonic()
    try:
        list(cc.generate([m], "x", stall_timeout_s=0.3, give_up_after_s=1.0))
        check(False, "a server that never answers is given up on")
    except cc.GenerateError as e:
        took = time.monotonic() - t0
        check(e.code == grpc.StatusCode.CANCELLED and "giving up" in e.details
              and 0.9 < took < 5 and len(seen) >= 3,
              f"a server that never answers: tried again after each stall, given up after "
              f"give_up_after_s ({len(seen)} calls, {took:.1f} s: {e})")

    seen.clear()
    pieces = []
    for piece in cc.generate([b], "x", stall_timeout_s=0.2, give_up_after_s=0.3):
        if len(pieces) < 2:
            time.sleep(0.5)  # the caller's own time: neither a stall nor silence
        pieces.append(piece)
    check("".join(pieces) == expected_text(SERVER_SEED) and len(seen) == 1,
          f"a caller slower than stall_timeout_s causes no resume ({len(seen)} calls)")
finally:
    hang.set()
    for srv in servers:
        srv.stop(0)

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all checks passed")
