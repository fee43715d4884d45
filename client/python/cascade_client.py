#!/usr/bin/env python3
"""A small Python client of Cascade's public gRPC API whose streams survive the loss of
the coordinator serving them.

    from cascade_client import generate
    for piece in generate(["coord-a:50051", "coord-b:50051"], "Once upon a time",
                          max_tokens=64, temperature=0.8):
        print(piece, end="", flush=True)

    python3 cascade_client.py --server coord-a:50051,coord-b:50051 \
        --prompt "Once upon a time" --max-tokens 64

How it resumes (cascade.v1.GenerateRequest.resume_after_tokens, inference.proto):
- The request goes to the first server of the list that serves it. A standby
  coordinator, or one that lost the leadership, refuses with UNAVAILABLE: the next one
  is tried at once. After a whole round of refusals it waits (50 ms, doubling to 1 s).
- The first message of every stream carries the request's id and the seed it samples
  with. When the request named no seed, that seed is remembered.
- When a stream breaks (UNAVAILABLE, ABORTED, CANCELLED, INTERNAL, UNKNOWN or
  DEADLINE_EXCEEDED) the same request is sent again, to the next server after the
  backoff, with that seed and resume_after_tokens = the token ids received so far. The
  server generates the same tokens again and streams only the rest, so the pieces
  yielded are byte for byte those of an unbroken stream.
- Each call's responses are read on a daemon thread of its own, which hands them over
  on a queue. A call that receives nothing for 10 s (a coordinator stopped or cut off
  keeps its connection open but sends nothing) is cancelled, left to that thread and
  resumed the same way: a call cut off so may never complete its receive, cancel() or
  not (grpcio 1.51), and would otherwise hold the caller for good.
- It gives up (GenerateError) after 60 s without a message, and at once on any other
  status (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAUTHENTICATED, ...).

The Python stubs (cascade/v1/inference_pb2.py, inference_pb2_grpc.py) are found, in this
order: in the folder $CASCADE_PY_STUBS names; already importable (on sys.path); or
generated from the repository's proto/ ($CASCADE_PROTO_DIR, default ../../proto beside
this file) with grpc_tools.protoc into a cache folder ($CASCADE_STUB_CACHE, default
$XDG_CACHE_HOME/cascade/python-stubs or ~/.cache/cascade/python-stubs), once per proto
file and protobuf/gRPC version. Needs grpcio and, for generating, grpcio-tools (Debian:
python3-grpcio, python3-grpc-tools).
"""
import argparse
import hashlib
import importlib
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import grpc

__all__ = ["generate", "generate_responses", "load_stubs", "GenerateError", "RETRYABLE"]

# What a lost, stopped or deposed coordinator gives: the request is sent again.
RETRYABLE = frozenset({
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.DEADLINE_EXCEEDED,
})

FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0
GIVE_UP_AFTER_S = 60.0
STALL_TIMEOUT_S = 10.0


class GenerateError(Exception):
    """The request failed for good: `code` (a grpc.StatusCode), `details` (the last
    server's message, prefixed with its address), `resumes` (streams sent again)."""

    def __init__(self, code, details, resumes=0):
        super().__init__(f"{code.name if code else 'ERROR'}: {details}")
        self.code = code
        self.details = details
        self.resumes = resumes


# ---------------------------------------------------------------------------------------
# Stubs.
_stubs = None


def _proto_dir():
    return os.environ.get("CASCADE_PROTO_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "proto")


def _cache_root():
    if os.environ.get("CASCADE_STUB_CACHE"):
        return os.environ["CASCADE_STUB_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cascade", "python-stubs")


def _generate_stubs(proto_dir):
    """Runs grpc_tools.protoc on cascade/v1/inference.proto into a cache folder named after
    the proto's contents and the protobuf and gRPC versions; returns the folder."""
    proto = os.path.join(proto_dir, "cascade", "v1", "inference.proto")
    if not os.path.isfile(proto):
        raise ImportError(f"cascade_client: no Python stubs, and no {proto} to generate them "
                          "from (set CASCADE_PY_STUBS or CASCADE_PROTO_DIR)")
    import google.protobuf
    key = hashlib.sha256()
    with open(proto, "rb") as f:
        key.update(f.read())
    key.update(f"{google.protobuf.__version__} {grpc.__version__}".encode())
    out = os.path.join(_cache_root(), key.hexdigest()[:16])
    if os.path.isfile(os.path.join(out, "cascade", "v1", "inference_pb2_grpc.py")):
        return out
    try:
        os.makedirs(_cache_root(), exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".gen-", dir=_cache_root())
    except OSError:  # no writable cache: a folder of this process's own
        out = tmp = tempfile.mkdtemp(prefix="cascade_stubs_")
    run = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", proto_dir,
                          "--python_out", tmp, "--grpc_python_out", tmp,
                          "cascade/v1/inference.proto"], capture_output=True, text=True)
    if run.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ImportError("cascade_client: grpc_tools.protoc failed (is grpcio-tools, Debian's "
                          f"python3-grpc-tools, installed?): {run.stderr.strip()}")
    # Regular packages: a namespace folder would lose to any other "cascade" package.
    for pkg in ("cascade", os.path.join("cascade", "v1")):
        open(os.path.join(tmp, pkg, "__init__.py"), "a").close()
    if tmp != out:
        try:
            os.rename(tmp, out)  # atomic; another process may have won the race
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def load_stubs():
    """(inference_pb2, inference_pb2_grpc), found or generated as the module says."""
    global _stubs
    if _stubs is not None:
        return _stubs
    where = os.environ.get("CASCADE_PY_STUBS")
    if where:
        sys.path.insert(0, where)
    try:
        pb2 = importlib.import_module("cascade.v1.inference_pb2")
        pb2_grpc = importlib.import_module("cascade.v1.inference_pb2_grpc")
    except ImportError:
        if where:
            raise
        sys.path.insert(0, _generate_stubs(_proto_dir()))
        importlib.invalidate_caches()
        for name in [m for m in sys.modules if m == "cascade" or m.startswith("cascade.")]:
            del sys.modules[name]  # a failed import may have left a partial package
        pb2 = importlib.import_module("cascade.v1.inference_pb2")
        pb2_grpc = importlib.import_module("cascade.v1.inference_pb2_grpc")
    if "resume_after_tokens" not in pb2.GenerateRequest.DESCRIPTOR.fields_by_name:
        raise ImportError(f"cascade_client: the stubs at {pb2.__file__} predate "
                          "resume_after_tokens; regenerate them from proto/")
    _stubs = (pb2, pb2_grpc)
    return _stubs


# ---------------------------------------------------------------------------------------
# Resuming streams.
class _Stalled(grpc.RpcError):
    """A call that received nothing for the stall timeout: resumed like a broken one."""

    def code(self):
        return grpc.StatusCode.CANCELLED

    def details(self):
        return "the stream stalled (nothing received)"


class _Ended:
    """What follows a call's last response on its queue: `error`, the exception that ended
    it (None: it ended OK)."""

    def __init__(self, error=None):
        self.error = error


def _read(call, responses):
    """Puts every response of `call` on `responses`, then an _Ended. Runs on a daemon thread
    of its own, so that a call whose receive never completes holds only that thread."""
    try:
        for r in call:
            responses.put(r)
        responses.put(_Ended())
    except BaseException as e:  # noqa: B036 - the end must always be handed over
        responses.put(_Ended(e))


def _cancel(call):
    """Cancels `call`, best effort: one cut off may ignore it."""
    try:
        call.cancel()
    except Exception:  # noqa: BLE001
        pass


def generate_responses(servers, request, *, api_key=None, credentials=None,
                       give_up_after_s=GIVE_UP_AFTER_S, stall_timeout_s=STALL_TIMEOUT_S,
                       stub_factory=None, sleep=time.sleep, clock=time.monotonic,
                       on_resume=None):
    """Streams `request` (a cascade.v1.GenerateRequest) from the first of `servers`
    (host:port, the coordinators' public gRPC addresses) that serves it, resuming on
    another when a stream breaks; yields every cascade.v1.GenerateResponse received, in
    order, as an unbroken stream would give them.

    api_key:      sent as "authorization: Bearer <key>".
    credentials:  grpc.ChannelCredentials for TLS (default: plaintext).
    give_up_after_s: give up after this long without a message.
    stall_timeout_s: a call that receives nothing for this long (a coordinator stopped
                  or cut off keeps its connection open but sends nothing) is cancelled
                  and resumed like a broken one; None: only after give_up_after_s.
                  Longer than the longest wait a request may have for its first token.
    stub_factory: address -> an object with Generate(request, metadata=...) (the
                  generated InferenceStub by default; tests pass a fake).
    on_resume:    called with (server, error text) before each resend after a break.
    Raises GenerateError when it gives up. Closing the generator cancels the call."""
    if isinstance(servers, str):
        servers = [s for s in servers.split(",") if s.strip()]
    servers = [s.strip() for s in servers]
    if not servers:
        raise ValueError("no server given")
    channels = []  # the ones made here, closed when the generator ends
    if stub_factory is None:
        _, pb2_grpc = load_stubs()

        def stub_factory(address):
            channel = (grpc.secure_channel(address, credentials) if credentials
                       else grpc.insecure_channel(address))
            channels.append(channel)
            return pb2_grpc.InferenceStub(channel)

    try:
        yield from _resume_loop(servers, request, stub_factory, api_key, give_up_after_s,
                                stall_timeout_s, sleep, clock, on_resume)
    finally:
        for channel in channels:
            channel.close()


def _resume_loop(servers, request, stub_factory, api_key, give_up_after_s, stall_timeout_s,
                 sleep, clock, on_resume):
    stubs = {}
    req = type(request)()
    req.CopyFrom(request)
    metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()
    already = req.resume_after_tokens
    received = 0        # token ids received, across resumes
    resumes = 0
    current = 0
    refused_in_round = 0  # servers in a row that failed before sending a message
    backoff = FIRST_BACKOFF_S
    last_message = clock()
    while True:
        req.resume_after_tokens = already + received
        server = servers[current]
        if server not in stubs:
            stubs[server] = stub_factory(server)
        got = 0
        call = None
        try:
            call = stubs[server].Generate(req, metadata=metadata)
            # A queue of this call's own: what an abandoned reader puts later reaches no
            # other call.
            responses = queue.Queue()
            threading.Thread(target=_read, args=(call, responses), daemon=True,
                             name="cascade-read").start()
            while True:
                # The wait starts afresh at each get: the caller's time with a piece (the
                # generator suspended at its yield) does not count.
                try:
                    r = responses.get(timeout=stall_timeout_s or give_up_after_s)
                except queue.Empty:
                    _cancel(call)
                    raise _Stalled() from None
                if isinstance(r, _Ended):
                    if r.error is not None:
                        raise r.error
                    return
                last_message = clock()
                backoff = FIRST_BACKOFF_S
                got += 1
                # The first run's seed: what a resumed request must sample with.
                if not req.sampling.has_seed and r.request_id:
                    req.sampling.seed = r.seed
                    req.sampling.has_seed = True
                received += len(r.token_ids)
                yield r
                last_message = clock()
        except grpc.RpcError as e:
            code = e.code() if callable(getattr(e, "code", None)) else None
            details = e.details() if callable(getattr(e, "details", None)) else str(e)
            error = f"{server}: {details}"
            if code not in RETRYABLE:
                raise GenerateError(code, error, resumes) from None
            if clock() - last_message > give_up_after_s:
                raise GenerateError(code, f"{error} (no message for {give_up_after_s:g} s: "
                                    "giving up)", resumes) from None
        except GeneratorExit:
            if call is not None:
                _cancel(call)
            raise
        # A server that refused before streaming anything (a standby) is passed by at
        # once, until a whole round has refused; a stream that broke is resumed on the
        # next server after a pause (the cluster may be electing a new leader).
        current = (current + 1) % len(servers)
        if got > 0:
            resumes += 1
            refused_in_round = 0
            if on_resume is not None:
                on_resume(servers[current], error)
            pause = True
        else:
            refused_in_round += 1
            pause = refused_in_round >= len(servers)
            if pause:
                refused_in_round = 0
        if pause:
            sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)


def generate(servers, prompt, max_tokens=256, temperature=0.0, seed=None, *, top_k=0,
             top_p=0.0, stop=(), ignore_eos=False, api_key=None, credentials=None,
             give_up_after_s=GIVE_UP_AFTER_S, stall_timeout_s=STALL_TIMEOUT_S,
             on_resume=None, stub_factory=None, sleep=time.sleep):
    """Yields the text of a generation piece by piece, resuming on another coordinator
    when a stream breaks (generate_responses). `servers`: a list of host:port or one
    comma-separated string. `seed` None: the server picks one (and it is kept for
    resumes); at temperature 0 none is needed."""
    pb2, _ = load_stubs()
    sampling = pb2.SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    if seed is not None:
        sampling.seed = seed
        sampling.has_seed = True
    request = pb2.GenerateRequest(prompt=prompt, max_tokens=max_tokens, sampling=sampling,
                                  stop=list(stop), ignore_eos=ignore_eos)
    for r in generate_responses(servers, request, api_key=api_key, credentials=credentials,
                                give_up_after_s=give_up_after_s,
                                stall_timeout_s=stall_timeout_s, stub_factory=stub_factory,
                                sleep=sleep, on_resume=on_resume):
        if r.text:
            yield r.text


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Stream a generation from a Cascade cluster, resuming on another "
                    "coordinator when the one serving it is lost.")
    p.add_argument("--server", required=True,
                   help="the coordinators' public gRPC addresses, host:port,host:port,...")
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=None, help="default: the server picks one")
    p.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    p.add_argument("--api-key-file", help="file holding the API key (else $CASCADE_API_KEY)")
    p.add_argument("--tls-ca", help="PEM file of the CA: connect with TLS")
    p.add_argument("--give-up-after-s", type=float, default=GIVE_UP_AFTER_S,
                   help="give up after this long without a message")
    p.add_argument("--stall-timeout-s", type=float, default=STALL_TIMEOUT_S,
                   help="resume elsewhere a stream silent this long (0: no such limit)")
    p.add_argument("-v", "--verbose", action="store_true", help="say on stderr when it resumes")
    a = p.parse_args(argv)
    api_key = os.environ.get("CASCADE_API_KEY")
    if a.api_key_file:
        with open(a.api_key_file) as f:
            api_key = f.read().strip()
    credentials = None
    if a.tls_ca:
        with open(a.tls_ca, "rb") as f:
            credentials = grpc.ssl_channel_credentials(root_certificates=f.read())

    def resumed(server, error):
        if a.verbose:
            print(f"\n[cascade_client: stream broke ({error}); resuming on {server}]",
                  file=sys.stderr, flush=True)

    wrote = False
    try:
        for piece in generate(a.server, a.prompt, a.max_tokens, a.temperature, a.seed,
                              top_k=a.top_k, top_p=a.top_p, stop=a.stop, api_key=api_key,
                              credentials=credentials, give_up_after_s=a.give_up_after_s,
                              stall_timeout_s=a.stall_timeout_s or None, on_resume=resumed):
            sys.stdout.write(piece)
            sys.stdout.flush()
            wrote = True
    except GenerateError as e:
        if wrote:
            sys.stdout.write("\n")
        print(f"cascade_client: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
