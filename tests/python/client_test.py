#!/usr/bin/python3
"""An independent client of Cascade's public API: Debian's python3-grpcio, stubs generated
from proto/ at test time with grpc_tools. It shares no code with the project.

Usage: client_test.py BIN_DIR MODEL PROTO_DIR
Starts a coordinator, checks that grpc.health.v1 says NOT_SERVING, starts two workers,
waits for SERVING, streams a generation and checks it against the single-process CLI;
checks that server reflection describes both services, that a prompt that is not UTF-8
is INVALID_ARGUMENT naming the field, and the alternatives top_logprobs reports.
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

bin_dir, model, proto_dir = (os.path.abspath(a) for a in sys.argv[1:4])
work = tempfile.mkdtemp(prefix="cascade_py_")
# The part of gRPC's server reflection protocol (grpc.reflection.v1alpha) this test uses,
# written from its published field numbers.
os.makedirs(os.path.join(work, "refl"), exist_ok=True)
with open(os.path.join(work, "refl", "reflection.proto"), "w") as f:
    f.write("""syntax = "proto3";
package grpc.reflection.v1alpha;
message ServerReflectionRequest {
  string host = 1;
  oneof message_request { string file_containing_symbol = 4; string list_services = 7; }
}
message FileDescriptorResponse { repeated bytes file_descriptor_proto = 1; }
message ServiceResponse { string name = 1; }
message ListServiceResponse { repeated ServiceResponse service = 1; }
message ErrorResponse { int32 error_code = 1; string error_message = 2; }
message ServerReflectionResponse {
  string valid_host = 1;
  ServerReflectionRequest original_request = 2;
  oneof message_response {
    FileDescriptorResponse file_descriptor_response = 4;
    ListServiceResponse list_services_response = 6;
    ErrorResponse error_response = 7;
  }
}
service ServerReflection {
  rpc ServerReflectionInfo(stream ServerReflectionRequest) returns (stream ServerReflectionResponse);
}
""")
subprocess.check_call([sys.executable, "-m", "grpc_tools.protoc", "-I", proto_dir,
                       "--python_out", work, "--grpc_python_out", work,
                       "cascade/v1/inference.proto", "cascade/v1/control_plane.proto",
                       "cascade/v1/data_plane.proto",
                       "grpc/health/v1/health.proto"], cwd=proto_dir)
subprocess.check_call([sys.executable, "-m", "grpc_tools.protoc", "-I", os.path.join(work, "refl"),
                       "--python_out", work, "--grpc_python_out", work, "reflection.proto"])
sys.path.insert(0, work)
import grpc  # noqa: E402
from cascade.v1 import inference_pb2, inference_pb2_grpc  # noqa: E402

# The generated health module lives under grpc/health/v1, which would shadow the real
# grpc package: load it from its file instead.
import importlib.util  # noqa: E402
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
health_pb2 = load("grpc.health.v1.health_pb2", os.path.join(work, "grpc/health/v1/health_pb2.py"))


class HealthStub:
    """grpc.health.v1.Health/Check, called by method path."""
    def __init__(self, channel):
        self.Check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


port = free_port()
addr = f"127.0.0.1:{port}"
control = f"127.0.0.1:{free_port()}"  # the control plane workers register with
procs = []
logs = open(os.path.join(work, "cluster.log"), "w")


def start(args):
    p = subprocess.Popen(args, stdout=logs, stderr=subprocess.STDOUT)
    procs.append(p)
    return p


def stop_all():
    for p in reversed(procs):
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def health(stub):
    try:
        return stub.Check(health_pb2.HealthCheckRequest(), timeout=2).status
    except grpc.RpcError:
        return None


failures = []
def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


try:
    start([f"{bin_dir}/cascade-coordinator", "--model", model, "--listen", addr,
           "--control-listen", control, "--workers", "2", "--min-stages", "2",
           "--kv-type", "f32",  # exact, as `cascade generate`'s cache, which it is compared with
           "--log-level", "info"])
    channel = grpc.insecure_channel(addr)
    hstub = HealthStub(channel)
    deadline = time.time() + 20
    status = health(hstub)
    while status is None and time.time() < deadline:
        time.sleep(0.05)
        status = health(hstub)
    check(status == health_pb2.HealthCheckResponse.NOT_SERVING,
          f"health is NOT_SERVING before the workers load (got {status})")

    for i in range(2):
        start([f"{bin_dir}/cascade-worker", "--coordinator", control, "--listen", "127.0.0.1:0",
               "--threads", "1", "--memory", "1GiB", "--id", f"py{i}"])
    deadline = time.time() + 60
    while health(hstub) != health_pb2.HealthCheckResponse.SERVING and time.time() < deadline:
        time.sleep(0.1)
    check(health(hstub) == health_pb2.HealthCheckResponse.SERVING, "health is SERVING after loading")

    stub = inference_pb2_grpc.InferenceStub(channel)
    req = inference_pb2.GenerateRequest(
        prompt="Once upon a time", max_tokens=64,
        sampling=inference_pb2.SamplingParams(temperature=0.0))
    text, ids, finish, usage, pieces = "", [], None, None, 0
    for r in stub.Generate(req, timeout=60):
        pieces += 1
        text += r.text
        ids.extend(r.token_ids)
        if r.finish_reason:
            finish, usage = r.finish_reason, r.usage
    check(pieces > 10, f"the generation streamed in pieces ({pieces})")
    check(finish == inference_pb2.FINISH_REASON_LENGTH, f"finish reason LENGTH ({finish})")
    check(usage is not None and usage.completion_tokens == 64 and usage.prompt_tokens > 0,
          f"usage counts ({usage})")
    local = subprocess.run([f"{bin_dir}/cascade", "generate", "--model", model, "--prompt",
                            "Once upon a time", "--max-tokens", "64", "--temperature", "0",
                            "--no-echo"], capture_output=True, text=True, timeout=120)
    check(text == local.stdout.rstrip("\n"),
          "streamed text equals the single-process CLI's\n  cluster: %r\n  local:   %r"
          % (text, local.stdout))
    toks = stub.Tokenize(inference_pb2.TokenizeRequest(text="Once upon a time", add_special=True))
    check(list(toks.ids)[:1] == [1] and len(toks.ids) > 1, f"tokenize ({list(toks.ids)})")
    try:
        stub.Complete(inference_pb2.GenerateRequest(prompt="", max_tokens=4), timeout=10)
        check(False, "an empty prompt is refused")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, f"empty prompt -> {e.code()}")

    # A prompt that is not UTF-8 (bytes no Python str can hold, so sent as raw bytes):
    # field 2 (prompt), length 3, then 0xff 0xfe 'a'; field 5 (max_tokens) = 4.
    raw = channel.unary_unary("/cascade.v1.Inference/Complete",
                              request_serializer=lambda b: b,
                              response_deserializer=inference_pb2.CompleteResponse.FromString)
    try:
        raw(b"\x12\x03\xff\xfea\x28\x04", timeout=10)
        check(False, "a prompt that is not UTF-8 is refused")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.INVALID_ARGUMENT and "prompt" in e.details()
              and "UTF-8" in e.details(), f"invalid UTF-8 -> {e.code()}: {e.details()!r}")
    ok = raw(b"\x12\x04Once\x28\x02", timeout=30)  # the same call with valid text works
    check(ok.usage.completion_tokens == 2, "the raw call with UTF-8 text completes")

    # Alternatives: the sampled (greedy) token is the likeliest of them; a logit bias of
    # -100 on it moves the choice elsewhere.
    r = stub.Complete(inference_pb2.GenerateRequest(
        prompt="Once upon a time", max_tokens=3, logprobs=True, top_logprobs=3,
        sampling=inference_pb2.SamplingParams(temperature=0.0)), timeout=30)
    check(len(r.top_logprobs) == 3 and all(len(t.token_ids) == 3 for t in r.top_logprobs)
          and all(t.token_ids[0] == i for t, i in zip(r.top_logprobs, r.token_ids))
          and all(abs(t.logprobs[0] - lp) < 1e-5 for t, lp in zip(r.top_logprobs, r.logprobs)),
          "top_logprobs: three per token, the greedy token first with its own logprob")
    banned = r.token_ids[0]
    b = stub.Complete(inference_pb2.GenerateRequest(
        prompt="Once upon a time", max_tokens=1,
        sampling=inference_pb2.SamplingParams(temperature=0.0, logit_bias={banned: -100.0})),
        timeout=30)
    check(list(b.token_ids) == [r.top_logprobs[0].token_ids[1]],
          f"logit_bias -100 on {banned} gives the runner-up ({list(b.token_ids)})")

    # Reflection describes the Inference service and the health service.
    import reflection_pb2, reflection_pb2_grpc  # noqa: E402
    rstub = reflection_pb2_grpc.ServerReflectionStub(channel)
    reqs = [reflection_pb2.ServerReflectionRequest(list_services="*"),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="grpc.health.v1.Health"),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol="cascade.v1.Inference")]
    answers = list(rstub.ServerReflectionInfo(iter(reqs), timeout=10))
    names = {x.name for x in answers[0].list_services_response.service}
    check({"grpc.health.v1.Health", "cascade.v1.Inference"} <= names,
          f"reflection lists both services ({sorted(names)})")
    for a, sym in zip(answers[1:], ("grpc.health.v1.Health", "cascade.v1.Inference")):
        check(a.WhichOneof("message_response") == "file_descriptor_response"
              and len(a.file_descriptor_response.file_descriptor_proto) > 0,
              f"reflection describes {sym} ({a.WhichOneof('message_response')}: "
              f"{a.error_response.error_message})")
finally:
    stop_all()

if failures:
    print(open(os.path.join(work, "cluster.log")).read())
    sys.exit(1)
print("python client: all checks passed")
