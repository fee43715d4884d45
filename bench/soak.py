#!/usr/bin/python3
"""A soak and fault campaign (issue 46): streaming clients against a cluster of standby
coordinators on network-namespace hosts while faults are injected one at a time.

    sudo bench/soak.py --keep-logs /tmp/soak   # 10 minutes, 16 clients (run_benchmarks.sh soak)
    ctest -R soak_short                        # 90 s, 8 clients (tests/CMakeLists.txt)

The cluster: etcd, coordinators A and B (--etcd: one leads, the other stands by) and
workers w0..w2 (a two-stage plan and one spare), each process in a network-namespace host
of its own on a bridge made here; the clients run in this namespace and reach the
coordinators' public ports over the bridge. Needs root, ip(8), nft(8), etcd (Debian's
etcd-server) and Debian's python3-grpcio and python3-grpc-tools; the model defaults to
models/stories260K.gguf.

The clients (client/python/cascade_client.py, the resuming client, one thread each) loop
over a few prompts, 48 tokens each, half greedy, half at temperature 0.8 with a seed of
their own; every text (and its token ids) is checked against a reference taken before
any fault. A request is completed (the reference's text), mismatched (another text),
failed (the client gave up: GenerateError or any other exception) or hung (no end within
--hang-s; a watchdog counts it when that time passes). A resume is a stream the client
sent again after it broke (cascade_client's on_resume); its time is from the last message
before the break to the first after it. At the first hung request, every thread's Python
stack and this namespace's TCP sockets go to hung-client-stacks.txt in the logs folder
(kill -USR1 prints the stacks at any time).

The faults, in this order, one at a time, again and again until the duration ends:
  worker-kill   SIGKILL a worker that holds a stage; start it again (same --id)
                --restart-after-s (1 s) later
  leader-kill   SIGKILL the leading coordinator; start it again --restart-after-s later
                (a standby now)
  worker-stop   SIGSTOP a worker that holds a stage for --stop-s, then SIGCONT
  leader-stop   SIGSTOP the leader for --stop-s, then SIGCONT (it stands by once awake)
  leader-cut    drop everything on the leader host's link (nft) for --cut-s, then heal
  etcd-kill     SIGKILL etcd for --etcd-down-s, then start it again (same data, ports)
  worker-cut    drop everything on the link of a worker that holds a stage for --cut-s
Workers take turns among those that hold a stage (the leader's ClusterStatus); --faults
picks and orders the kinds. The leader is the coordinator whose grpc.health.v1 says
SERVING. After each fault, probes (Complete, 2 tokens, to both coordinators, a new one
every 0.25 s) measure the recovery: the time from the fault's start until a new request
is served. The next fault waits until the cluster has settled (one coordinator serves,
the other stands by, the three workers are alive, the plan's stages are served by
workers that say SERVING and the spare is idle) and then --pause-s more; a fault not
recovered from within --recover-timeout-s ends the campaign (the clients run on to the
end of the duration).

Resources: VmRSS and the open descriptors (/proc/PID/status, /proc/PID/fd) of every
process are sampled every 5 s with the role it has then (etcd; leader or standby, from
grpc health; stage N or spare, from the leader's ClusterStatus: stages differ in what they
hold, the first the embedding, the last the output head and its logits). The report shows each at
the start, after the warm-up (--warmup-s, the first minute) and at the end. The check: no
process may grow its memory or its descriptors by more than --growth-limit-pct after its
warm-up. A process the campaign restarted (killed and started again, or a deposed leader
that exec'd itself as a standby: same pid, a new image) is a new incarnation, measured
from its own warm-up after that restart. Roles change under the faults (a spare takes a
stage or moves to another, a standby leads; a spare holds no weights, KV cache or data
links, a standby no client streams), so an incarnation is measured in the role it has at its end, from its
first --window-s in that role after its warm-up to its last --window-s in that role; the
lowest sample of each window is compared (a request's connection that comes and goes
does not count, what stays does). An incarnation whose two windows start less than
--min-window-s apart is shown, not checked. The clients' own process (this script) is
shown, not checked. With --keep-logs, every process's descriptors and each host's TCP
sockets at the end are in descriptors-at-the-end.txt, and every sample in the JSON.

Exit status 0 when no request failed, hung or mismatched, every fault recovered and no
checked process grew beyond the limit; 1 otherwise; 2 when the cluster could not be set
up; 77 when something it needs is missing (root, ip, nft, etcd, setpriv, grpc_tools).
Namespaces, the bridge and every process started here are removed on exit, on Ctrl-C and
on SIGTERM.
"""
import argparse
import atexit
import faulthandler
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PROMPTS = ["Once upon a time", "The little dog", "In the park", "Tom said",
           "A big red ball", "She was happy", "The sun was", "One day"]
PROMPTS_PER_CLIENT = 3
FAULTS = ["worker-kill", "leader-kill", "worker-stop", "leader-stop", "leader-cut",
          "etcd-kill", "worker-cut"]
PUBLIC_PORT, CONTROL_PORT, ETCD_CLIENT_PORT, ETCD_PEER_PORT = 50051, 50053, 2379, 2380
SAMPLE_EVERY_S = 5.0
# Fresh channels of their own for probes and health checks: not the process-wide
# subchannels (which may sit in a reconnect backoff after a restart).
PROBE_CHANNEL_OPTIONS = [("grpc.use_local_subchannel_pool", 1),
                         ("grpc.initial_reconnect_backoff_ms", 100),
                         ("grpc.max_reconnect_backoff_ms", 500)]

grpc = None   # imported once the stubs are in place
cc = None     # cascade_client
pb2 = pb2_grpc = ctl_pb2 = ctl_pb2_grpc = None

T0 = time.monotonic()  # reset when the clients start


def now():
    return time.monotonic() - T0


_events = []
_events_lock = threading.Lock()
_event_log = None


def event(text):
    line = f"[{now():7.1f}s {time.strftime('%H:%M:%S', time.gmtime())}.{int(time.time() * 1000) % 1000:03d}] {text}"
    with _events_lock:
        _events.append(line)
        if _event_log:
            _event_log.write(line + "\n")
            _event_log.flush()
    print(line, flush=True)


def run(cmd, check=True):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


# ---------------------------------------------------------------------------------------
# Hosts: network namespaces on a bridge.
class Hosts:
    """N hosts TAG-1..TAG-N on the bridge brTAG; this namespace at NET.1, host h at
    NET.(10+h)."""

    def __init__(self, tag, count):
        self.tag, self.count = tag, count
        self.bridge = f"br{tag}"
        self.made = []
        self.bridge_made = False
        used = run(["ip", "-4", "-o", "addr"], check=False).stdout
        third = os.getpid() % 200 + 20
        while f"10.86.{third}." in used:
            third = (third + 1) % 250
        self.net = f"10.86.{third}"

    def ns(self, h):
        return f"{self.tag}-{h}"

    def ip(self, h):
        return f"{self.net}.{10 + h}"

    def gateway(self):
        return f"{self.net}.1"

    def make(self):
        run(["ip", "link", "add", self.bridge, "type", "bridge"])
        self.bridge_made = True
        run(["ip", "addr", "add", f"{self.gateway()}/24", "dev", self.bridge])
        run(["ip", "link", "set", self.bridge, "up"])
        for h in range(1, self.count + 1):
            ns, veth = self.ns(h), f"v{self.tag}{h}"
            run(["ip", "netns", "add", ns])
            self.made.append(ns)
            run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
            run(["ip", "link", "set", veth, "master", self.bridge, "up"])
            run(["ip", "-n", ns, "addr", "add", f"{self.ip(h)}/24", "dev", "eth0"])
            run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def cut(self, h):
        """Drops every packet in or out of host h's link."""
        rules = ("table inet soakcut {\n"
                 " chain in { type filter hook input priority -10; policy accept; iifname \"eth0\" drop; }\n"
                 " chain out { type filter hook output priority -10; policy accept; oifname \"eth0\" drop; }\n"
                 "}\n")
        r = subprocess.run(["ip", "netns", "exec", self.ns(h), "nft", "-f", "-"], input=rules,
                           text=True, capture_output=True)
        if r.returncode != 0:
            raise RuntimeError(f"nft in {self.ns(h)}: {r.stderr.strip()}")

    def heal(self, h):
        run(["ip", "netns", "exec", self.ns(h), "nft", "delete", "table", "inet", "soakcut"],
            check=False)

    def remove(self):
        for ns in self.made:
            pids = run(["ip", "netns", "pids", ns], check=False).stdout.split()
            for p in pids:
                try:
                    os.kill(int(p), signal.SIGCONT)
                    os.kill(int(p), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
        for ns in self.made:
            run(["ip", "netns", "del", ns], check=False)
        self.made = []
        if self.bridge_made:
            run(["ip", "link", "del", self.bridge], check=False)
            self.bridge_made = False


# ---------------------------------------------------------------------------------------
# Processes.
class Proc:
    """One process of the cluster in its host; its log is appended to across restarts.
    Every start (and every re-exec a coordinator announces in its log) begins a new
    incarnation, whose resource samples are checked on their own. Started only from the
    main thread (the parent-death signal follows the thread that forked)."""

    def __init__(self, name, hosts, host, argv, log_path, reexec_marker=None):
        self.name, self.hosts, self.host, self.argv = name, hosts, host, argv
        self.log_path = log_path
        self.reexec_marker = reexec_marker
        self.popen = None
        self.incarnations = []  # dicts: start_t, pid, why, samples [(t, rss_kib, fds)]
        self._marks_seen = 0
        self.stopped = False

    @property
    def pid(self):
        return self.popen.pid if self.popen else None

    def count_marks(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read().count(self.reexec_marker)
        except OSError:
            return 0

    def start(self, why="start"):
        if self.reexec_marker:  # those of the incarnations before are theirs
            self._marks_seen = self.count_marks()
        with open(self.log_path, "a") as log:
            log.write(f"\n===== soak.py: {why} at t={now():.1f}s =====\n")
            log.flush()
            self.popen = subprocess.Popen(
                # setpriv --pdeathsig: should this script be SIGKILLed, its processes go
                # too (the namespaces stay). ip and setpriv exec: the pid is the program's.
                ["ip", "netns", "exec", self.hosts.ns(self.host), "setpriv", "--pdeathsig",
                 "KILL"] + self.argv,
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        self.stopped = False
        self.incarnations.append({"start_t": now(), "pid": self.popen.pid, "why": why,
                                  "samples": []})

    def alive(self):
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig):
        if self.alive():
            os.kill(self.popen.pid, sig)
        self.stopped = sig == signal.SIGSTOP

    def kill(self):
        if self.popen is None:
            return
        if self.alive():
            os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait()
        self.incarnations[-1]["end_t"] = now()
        self.stopped = False

    def terminate(self, grace_s=5.0):
        if self.popen is None:
            return
        if self.alive():
            try:
                os.kill(self.popen.pid, signal.SIGCONT)
                os.kill(self.popen.pid, signal.SIGTERM)
            except OSError:
                pass
            try:
                self.popen.wait(grace_s)
            except subprocess.TimeoutExpired:
                os.kill(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
        if self.incarnations and "end_t" not in self.incarnations[-1]:
            self.incarnations[-1]["end_t"] = now()

    def check_reexec(self):
        """A coordinator that lost the leadership exec's itself as a standby (same pid): a
        new incarnation from the time its log says so."""
        if not self.reexec_marker or not self.alive():
            return
        marks = self.count_marks()
        while self._marks_seen < marks:
            self._marks_seen += 1
            self.incarnations[-1]["end_t"] = now()
            self.incarnations.append({"start_t": now(), "pid": self.popen.pid,
                                      "why": "re-exec as a standby", "samples": []})
            event(f"{self.name} (pid {self.popen.pid}) re-exec'd itself as a standby")

    def read(self):
        """This incarnation's reading now (None when it is not running)."""
        if not self.alive():
            return None
        self.check_reexec()
        return read_proc(self.popen.pid)

    def record(self, t, reading, role):
        if reading:
            rss, fds, kinds = reading
            self.incarnations[-1]["samples"].append((t, rss, fds, role, kinds))


def read_proc(pid):
    """(VmRSS in KiB, open descriptors, {kind: count} of them) of a process, None when it
    is gone. Kinds: socket, pipe, anon_inode:[eventfd] ..., file, dev."""
    try:
        rss = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
        kinds = {}
        fds = os.listdir(f"/proc/{pid}/fd")
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            kind = (target.split(":", 1)[0] if target.startswith(("socket:", "pipe:"))
                    else target if target.startswith("anon_inode:")
                    else "dev" if target.startswith("/dev/") else "file")
            kinds[kind] = kinds.get(kind, 0) + 1
        return rss, len(fds), kinds
    except (OSError, ValueError):
        return None


def cpu_ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, ValueError, IndexError):
        return 0


def wait_port(host, port, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


# ---------------------------------------------------------------------------------------
# The cluster.
class Cluster:
    ETCD, COORD_A, COORD_B, W0 = 1, 2, 3, 4

    def __init__(self, a, hosts, logdir, datadir):
        self.a, self.hosts = a, hosts
        bin_dir = os.path.abspath(a.bin)
        etcd_url_c = f"http://{hosts.ip(self.ETCD)}:{ETCD_CLIENT_PORT}"
        etcd_url_p = f"http://{hosts.ip(self.ETCD)}:{ETCD_PEER_PORT}"
        self.etcd = Proc("etcd", hosts, self.ETCD, [
            "etcd", "--name", "soak", "--data-dir", os.path.join(datadir, "etcd-data"),
            "--listen-client-urls", etcd_url_c, "--advertise-client-urls", etcd_url_c,
            "--listen-peer-urls", etcd_url_p, "--initial-advertise-peer-urls", etcd_url_p,
            "--initial-cluster", f"soak={etcd_url_p}", "--log-level", "warn"],
            os.path.join(logdir, "etcd.log"))
        self.publics = [f"{hosts.ip(h)}:{PUBLIC_PORT}" for h in (self.COORD_A, self.COORD_B)]
        self.controls = [f"{hosts.ip(h)}:{CONTROL_PORT}" for h in (self.COORD_A, self.COORD_B)]
        cluster_name = f"soak{os.getpid()}"
        self.coords = []
        for i, h in enumerate((self.COORD_A, self.COORD_B)):
            self.coords.append(Proc(f"coordinator-{'AB'[i]}", hosts, h, [
                os.path.join(bin_dir, "cascade-coordinator"), "--model", os.path.abspath(a.model),
                "--listen", self.publics[i], "--control-listen", self.controls[i],
                "--workers", "2", "--min-stages", "2", "--replicas", "1",
                "--etcd", f"{hosts.ip(self.ETCD)}:{ETCD_CLIENT_PORT}", "--cluster-name", cluster_name,
                "--lease-ttl-s", "2", "--kv-sequences", "16", "--max-running", "16",
                "--log-level", "info"],
                os.path.join(logdir, f"coordinator-{'AB'[i]}.log"),
                reexec_marker="starting again as a standby"))
        self.workers = []
        for w in range(3):
            self.workers.append(Proc(f"worker-w{w}", hosts, self.W0 + w, [
                os.path.join(bin_dir, "cascade-worker"), "--coordinator", ",".join(self.controls),
                "--listen", f"{hosts.ip(self.W0 + w)}:0", "--threads", "1", "--memory", "2GiB",
                "--id", f"w{w}", "--log-level", "info"],
                os.path.join(logdir, f"worker-w{w}.log")))
        self.procs = [self.etcd] + self.coords + self.workers

    def start(self):
        self.etcd.start()
        if not wait_port(self.hosts.ip(self.ETCD), ETCD_CLIENT_PORT, 30):
            raise RuntimeError("etcd did not listen within 30 s")
        for p in self.coords + self.workers:
            p.start()

    def restart_etcd(self):
        self.etcd.start("restart")
        return wait_port(self.hosts.ip(self.ETCD), ETCD_CLIENT_PORT, 30)

    def stop_all(self):
        for p in self.procs:
            if p.alive():
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except OSError:
                    pass
        for p in self.workers + self.coords + [self.etcd]:
            p.terminate(grace_s=5.0)

    # grpc.health.v1.Health/Check by method path: an empty request; the response's field 1
    # (status) is 1 for SERVING.
    def health(self, i, timeout=0.5):
        ch = grpc.insecure_channel(self.publics[i], options=PROBE_CHANNEL_OPTIONS)
        try:
            check = ch.unary_unary("/grpc.health.v1.Health/Check")
            resp = check(b"", timeout=timeout)
            return "SERVING" if resp == b"\x08\x01" else "NOT_SERVING"
        except grpc.RpcError:
            return None
        finally:
            ch.close()

    def leader(self):
        """The index of the coordinator that says SERVING, None when none does; (both) when
        two do (recorded by the caller)."""
        states = [self.health(i) for i in range(2)]
        serving = [i for i in range(2) if states[i] == "SERVING"]
        if len(serving) == 2:
            return "both"
        return serving[0] if serving else None

    def status(self, i, timeout=1.0):
        ch = grpc.insecure_channel(self.controls[i], options=PROBE_CHANNEL_OPTIONS)
        try:
            return ctl_pb2_grpc.CoordinatorStub(ch).ClusterStatus(
                ctl_pb2.ClusterStatusRequest(), timeout=timeout)
        except grpc.RpcError:
            return None
        finally:
            ch.close()

    def settled(self):
        """'' when settled, else what is missing."""
        for p in self.procs:
            if not p.alive():
                return f"{p.name} is not running"
        lead = self.leader()
        if lead is None:
            return "no coordinator serves"
        if lead == "both":
            return "both coordinators say SERVING"
        if self.health(1 - lead) != "NOT_SERVING":
            return f"{self.coords[1 - lead].name} does not answer as a standby"
        st = self.status(lead)
        if st is None:
            return f"no cluster status from {self.coords[lead].name}"
        if not st.serving:
            return f"the leader's cluster is {st.state}: {st.error}"
        alive = {w.worker_id for w in st.workers if w.alive}
        if len(alive) < 3:
            return f"workers alive: {sorted(alive)}"
        staged = {s.worker_id for s in st.stages if s.alive}
        if len(staged) < 2:
            return f"stages alive on {sorted(staged)}"
        state = {w.worker_id: w.state for w in st.workers if w.alive}
        for sid in sorted(staged):
            if state.get(sid) != ctl_pb2.WORKER_STATE_SERVING:
                return (f"the plan's stage on {sid} is on a worker that is "
                        f"{ctl_pb2.WorkerState.Name(state.get(sid, 0))}")
        for w in st.workers:
            if w.alive and w.worker_id not in staged and w.state != ctl_pb2.WORKER_STATE_IDLE:
                return f"the spare {w.worker_id} is {ctl_pb2.WorkerState.Name(w.state)}"
        return ""

    def roles(self):
        """Each process's role now: etcd; leader or standby (grpc health); stage N or spare
        (the leader's status); '?' when it cannot be told (stopped, cut off, in a change)."""
        states = [self.health(i) for i in range(2)]
        roles = {"etcd": "etcd"}
        for i, p in enumerate(self.coords):
            roles[p.name] = {"SERVING": "leader", "NOT_SERVING": "standby"}.get(states[i], "?")
        serving = [i for i in range(2) if states[i] == "SERVING"]
        st = self.status(serving[0]) if len(serving) == 1 else None
        # A stage's role names its index: stages differ in what they hold (the embedding,
        # the output head, how many layers), so memory is compared within one of them.
        staged = {x.worker_id: f"stage {x.index}" for x in st.stages if x.alive} if st else {}
        alive = {x.worker_id for x in st.workers if x.alive} if st else set()
        for w in self.workers:
            wid = w.argv[w.argv.index("--id") + 1]
            roles[w.name] = staged.get(wid) or ("spare" if wid in alive else "?")
        return roles

    def staged_workers(self, lead):
        st = self.status(lead) if lead in (0, 1) else None
        if st is None:
            return []
        ids = {s.worker_id for s in st.stages if s.alive}
        return [w for w in self.workers if w.argv[w.argv.index("--id") + 1] in ids]

    def probe(self, t_fault, timeout_s):
        """Seconds from t_fault (monotonic) until a new request (Complete, 2 tokens) is
        served by either coordinator; a new probe to each every 0.25 s (1 s after the first
        10 s), each with a 10 s deadline. None when none is served within timeout_s."""
        req = pb2.GenerateRequest(prompt="Once upon a time", max_tokens=2)
        lock = threading.Lock()
        first = []
        done = threading.Event()
        calls, channels = [], []

        def finished(fut):
            try:
                ok = fut.exception() is None
            except Exception:  # cancelled
                ok = False
            if ok:
                with lock:
                    if not first:
                        first.append(time.monotonic())
                done.set()

        try:
            while not done.is_set() and time.monotonic() - t_fault < timeout_s:
                for addr in self.publics:
                    ch = grpc.insecure_channel(addr, options=PROBE_CHANNEL_OPTIONS)
                    channels.append(ch)
                    fut = pb2_grpc.InferenceStub(ch).Complete.future(req, timeout=10)
                    calls.append(fut)
                    fut.add_done_callback(finished)
                done.wait(0.25 if time.monotonic() - t_fault < 10 else 1.0)
        finally:
            for fut in calls:
                fut.cancel()
            for ch in channels:
                ch.close()
        return first[0] - t_fault if first else None


# ---------------------------------------------------------------------------------------
# Clients.
class Clients:
    def __init__(self, servers, count, max_tokens, hang_s, stacks_path):
        self.servers, self.count, self.max_tokens, self.hang_s = servers, count, max_tokens, hang_s
        self.stacks_path = stacks_path  # every thread's Python stack, written at the first hang
        self.stacks_written = False
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.reference = {}
        self.completed = self.failed = self.hung = self.mismatched = 0
        self.completed_with_resume = 0
        self.resumes = 0        # every stream sent again after a break (cascade_client's on_resume)
        self.resume_gaps = []   # seconds, one per resume
        self.stalls = []        # the longest silence of each request, seconds
        self.failures = []      # (t, client, text)
        self.in_flight = {}     # client -> [start monotonic, counted hung]
        self.threads = []

    def request(self, client, k):
        prompt = PROMPTS[(client + k) % len(PROMPTS)]
        sampled = client % 2 == 1
        sampling = pb2.SamplingParams(temperature=0.8 if sampled else 0.0, top_k=40)
        if sampled:
            sampling.seed = 1000 + client
            sampling.has_seed = True
        req = pb2.GenerateRequest(prompt=prompt, max_tokens=self.max_tokens, sampling=sampling,
                                  ignore_eos=True)
        key = (prompt, sampled, 1000 + client if sampled else 0)
        return req, key

    def servers_for(self, client):
        s = list(self.servers)
        return s[client % len(s):] + s[:client % len(s)]

    def stream(self, client, req):
        """(text, token ids, resume gaps, the longest silence) of one request."""
        text, ids, gaps = [], [], []
        state = {"last": time.monotonic(), "broke": None}
        longest = 0.0

        def resumed(server, error):
            state["broke"] = (state["last"], error)
            with self.lock:
                self.resumes += 1

        for r in cc.generate_responses(self.servers_for(client), req, on_resume=resumed):
            t = time.monotonic()
            longest = max(longest, t - state["last"])
            if state["broke"] is not None:
                gaps.append(t - state["broke"][0])
                state["broke"] = None
            state["last"] = t
            text.append(r.text)
            ids.extend(r.token_ids)
        if state["broke"] is not None:  # resumed with nothing left to send
            gaps.append(time.monotonic() - state["broke"][0])
        return "".join(text), tuple(ids), gaps, longest

    def compute_references(self):
        for client in range(self.count):
            for k in range(PROMPTS_PER_CLIENT):
                req, key = self.request(client, k)
                if key not in self.reference:
                    text, ids, gaps, _ = self.stream(client, req)
                    self.reference[key] = (text, ids)
        return len(self.reference)

    def start(self):
        for client in range(self.count):
            t = threading.Thread(target=self.loop, args=(client,), daemon=True,
                                 name=f"client-{client}")
            t.start()
            self.threads.append(t)
        threading.Thread(target=self.watchdog, daemon=True, name="watchdog").start()

    def loop(self, client):
        k = 0
        while not self.stop.is_set():
            req, key = self.request(client, k)
            k = (k + 1) % PROMPTS_PER_CLIENT
            entry = [time.monotonic(), False]
            with self.lock:
                self.in_flight[client] = entry
            outcome, detail = None, ""
            try:
                text, ids, gaps, longest = self.stream(client, req)
                outcome = "ok" if (text, ids) == self.reference[key] else "mismatched"
                if outcome == "mismatched":
                    detail = (f"prompt {req.prompt!r}: got {len(ids)} ids {text!r}, "
                              f"reference {len(self.reference[key][1])} ids {self.reference[key][0]!r}")
            except Exception as e:  # cc.GenerateError and anything else
                outcome, detail, gaps, longest = "failed", f"{type(e).__name__}: {e}", [], 0.0
            with self.lock:
                del self.in_flight[client]
                if entry[1]:  # the watchdog counted it hung already
                    self.failures.append((now(), client, f"the hung request ended after "
                                          f"{time.monotonic() - entry[0]:.1f} s: {outcome} {detail}"))
                    continue
                self.stalls.append(longest)
                self.resume_gaps.extend(gaps)
                if outcome == "ok":
                    self.completed += 1
                    if gaps:
                        self.completed_with_resume += 1
                elif outcome == "mismatched":
                    self.mismatched += 1
                    self.failures.append((now(), client, "mismatched: " + detail))
                else:
                    self.failed += 1
                    self.failures.append((now(), client, "failed: " + detail))
            if outcome != "ok" and len(self.failures) <= 20:
                event(f"client {client}: {outcome}: {detail[:300]}")

    def watchdog(self):
        while True:
            time.sleep(1.0)
            with self.lock:
                for client, entry in self.in_flight.items():
                    if not entry[1] and time.monotonic() - entry[0] > self.hang_s:
                        entry[1] = True
                        self.hung += 1
                        self.failures.append((now(), client, f"hung: no end within {self.hang_s:g} s"))
                        event(f"client {client}: a request hung (no end within {self.hang_s:g} s)")
                if self.hung and not self.stacks_written:
                    self.stacks_written = True
                    with open(self.stacks_path, "w") as f:
                        faulthandler.dump_traceback(f, all_threads=True)
                        f.write("\n---- ss -tanpie (this namespace: the clients' connections)\n")
                        f.write(run(["ss", "-tanpie"], check=False).stdout)
                    event(f"every thread's stack: {self.stacks_path}")

    def finish(self):
        """Stops starting requests and waits for those in flight (the watchdog counts the
        ones that pass hang_s)."""
        self.stop.set()
        deadline = time.monotonic() + self.hang_s + 5
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in self.threads if t.is_alive()]


# ---------------------------------------------------------------------------------------
# Faults.
class Campaign:
    def __init__(self, a, cluster, hosts):
        self.a, self.c, self.hosts = a, cluster, hosts
        self.faults = []  # dicts: kind, target, t, served_after_s, settled_after_s, note
        self.worker_turn = 0
        self.split_brain = []

    def pick_worker(self):
        """A worker that holds a stage (the leader's status), taking turns."""
        lead = self.c.leader()
        staged = self.c.staged_workers(lead)
        if not staged:  # fall back to the busiest by CPU time
            before = {w.name: cpu_ticks(w.pid) for w in self.c.workers if w.alive()}
            time.sleep(1.0)
            staged = sorted((w for w in self.c.workers if w.alive()),
                            key=lambda w: before.get(w.name, 0) - cpu_ticks(w.pid))[:2]
        staged.sort(key=lambda w: w.name)
        self.worker_turn += 1
        return staged[self.worker_turn % len(staged)]

    def find_leader(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lead = self.c.leader()
            if lead in (0, 1):
                return lead
            if lead == "both":
                self.split_brain.append(now())
            time.sleep(0.2)
        return None

    def inject(self, kind):
        """Injects one fault; returns (target name, fault start monotonic, an end step to
        run while the probes go on, or None)."""
        a = self.a
        if kind.startswith("worker"):
            w = self.pick_worker()
            host = w.host
            if kind == "worker-kill":
                w.kill()
                t = time.monotonic()
                return w.name, t, lambda: (time.sleep(a.restart_after_s),
                                           w.start("restart after SIGKILL"))
            if kind == "worker-stop":
                w.signal(signal.SIGSTOP)
                t = time.monotonic()
                return w.name, t, lambda: (time.sleep(a.stop_s), w.signal(signal.SIGCONT))
            self.hosts.cut(host)
            t = time.monotonic()
            return w.name, t, lambda: (time.sleep(a.cut_s), self.hosts.heal(host))
        if kind == "etcd-kill":
            self.c.etcd.kill()
            t = time.monotonic()

            def back():
                time.sleep(a.etcd_down_s)
                if not self.c.restart_etcd():
                    event("etcd did not listen again within 30 s")
            return "etcd", t, back
        lead = self.find_leader()
        if lead is None:
            raise RuntimeError("no leader to fault")
        p = self.c.coords[lead]
        if kind == "leader-kill":
            p.kill()
            t = time.monotonic()
            return p.name, t, lambda: (time.sleep(a.restart_after_s),
                                       p.start("restart after SIGKILL"))
        if kind == "leader-stop":
            p.signal(signal.SIGSTOP)
            t = time.monotonic()
            return p.name, t, lambda: (time.sleep(a.stop_s), p.signal(signal.SIGCONT))
        host = p.host
        self.hosts.cut(host)
        t = time.monotonic()
        return p.name, t, lambda: (time.sleep(a.cut_s), self.hosts.heal(host))

    def one(self, kind):
        t_rel = now()
        target, t_fault, end_step = self.inject(kind)
        event(f"fault {kind} on {target}")
        result = {}
        prober = threading.Thread(
            target=lambda: result.setdefault("served", self.c.probe(t_fault, self.a.recover_timeout_s)),
            daemon=True, name="probe")
        prober.start()
        end_step()  # in this thread: a restart must come from the main thread
        prober.join()
        served = result.get("served")
        # Settled: the whole cluster back as it was (a spare again), checked every 0.25 s.
        settled = None
        while True:
            why = self.c.settled()
            if why == "both coordinators say SERVING":
                self.split_brain.append(now())
            if not why:
                settled = time.monotonic() - t_fault
                break
            if time.monotonic() - t_fault >= self.a.recover_timeout_s:
                break
            time.sleep(0.25)
        f = {"kind": kind, "target": target, "t": round(t_rel, 1),
             "served_after_s": None if served is None else round(served, 2),
             "settled_after_s": None if settled is None else round(settled, 2)}
        if served is None or settled is None:
            f["note"] = ("no new request served" if served is None else "") + \
                        (f"; not settled: {why}" if settled is None else "")
        self.faults.append(f)
        event(f"  {kind} on {target}: served after "
              f"{'-' if served is None else f'{served:.2f} s'}, settled after "
              f"{'-' if settled is None else f'{settled:.2f} s'}"
              + (f" ({f['note']})" if 'note' in f else ""))
        return served is not None and settled is not None

    def loop(self, end_t):
        """Faults in turn until end_t (now() seconds), the last starting no later than
        end_t - quiet_tail_s."""
        i = 0
        while now() < end_t - self.a.quiet_tail_s:
            if not self.one(self.a.faults[i % len(self.a.faults)]):
                event("the cluster did not recover: the campaign stops here")
                return False
            i += 1
            pause_until = now() + self.a.pause_s
            while now() < min(pause_until, end_t):
                time.sleep(0.2)
        return True


# ---------------------------------------------------------------------------------------
# Resources.
class Sampler:
    """VmRSS and descriptors of every process, with its role, every SAMPLE_EVERY_S."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.me = {"start_t": 0.0, "pid": os.getpid(), "why": "start", "samples": []}
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def sample(self):
        with self.lock:
            # /proc first: the health and status calls that tell the roles open connections
            # to the coordinators, which would count among their descriptors.
            t = now()
            readings = [(p, p.read()) for p in self.cluster.procs]
            mine = read_proc(os.getpid())
            roles = self.cluster.roles()
            for p, reading in readings:
                p.record(t, reading, roles.get(p.name, "?"))
            if mine:
                self.me["samples"].append((t, mine[0], mine[1], "clients", mine[2]))

    def run(self):
        while not self.stop.wait(SAMPLE_EVERY_S - (now() % SAMPLE_EVERY_S)):
            self.sample()

    def start(self):
        threading.Thread(target=self.run, daemon=True, name="sampler").start()


def log_tail(path, lines=25):
    """The last lines of a process's log, without the per-request lines."""
    try:
        with open(path, errors="replace") as f:
            kept = [l.rstrip("\n") for l in f if " request " not in l or " W " in l or " E " in l]
    except OSError:
        return []
    return kept[-lines:]


def dump_descriptors(cluster, hosts, path):
    """What every process holds open at the end, and each host's TCP sockets (for a report
    of descriptors that grew)."""
    with open(path, "w") as out:
        for p in cluster.procs:
            out.write(f"==== {p.name} pid {p.pid}\n")
            if p.alive():
                try:
                    for fd in sorted(os.listdir(f"/proc/{p.pid}/fd"), key=int):
                        try:
                            out.write(f"{fd} -> {os.readlink(f'/proc/{p.pid}/fd/{fd}')}\n")
                        except OSError:
                            pass
                except OSError:
                    pass
            out.write(f"---- ss -tanpe in {hosts.ns(p.host)}\n")
            out.write(run(["ip", "netns", "exec", hosts.ns(p.host), "ss", "-tanpe"],
                          check=False).stdout)


def nearest(samples, t):
    """The first sample at or after t (else the last one)."""
    for s in samples:
        if s[0] >= t - 0.01:
            return s
    return samples[-1] if samples else None


def growth(a, b):
    return None if not a else 100.0 * (b - a) / a


def resource_rows(procs, me, a, end_t):
    """Per process: its samples at the start, after the warm-up and at the end (whatever
    its incarnation and role), and the check of each incarnation, in the role it has at
    its end (a spare worker holds no stage, a standby no client streams: each is compared
    with itself in that role only). Baseline: the lowest of its samples in that role over
    the first --window-s from the end of its warm-up; end: the lowest over its last
    --window-s in that role (descriptors of connections that come and go, a request's
    channel, do not count; what stays does). Checked when the two windows' starts are
    at least --min-window-s apart."""
    window_s = a.window_s
    rows = []
    for name, incs in [(p.name, p.incarnations) for p in procs] + [("clients (this script)", [me])]:
        checked = name != "clients (this script)"
        all_samples = [s for inc in incs for s in inc["samples"] if s[0] <= end_t + 0.01]
        point = lambda s: s and {"t": round(s[0], 1), "rss_kib": s[1], "fds": s[2], "role": s[3]}
        per_inc = []
        for n, inc in enumerate(incs):
            warmup_s = a.warmup_s if n == 0 else a.restart_warmup_s
            known = [s for s in inc["samples"] if s[0] <= end_t + 0.01 and s[3] != "?"]
            if not known:
                continue
            role = known[-1][3]
            cands = [s for s in known if s[3] == role and s[0] >= inc["start_t"] + warmup_s - 0.01]
            entry = {"pid": inc["pid"], "why": inc["why"], "from_t": round(inc["start_t"], 1),
                     "to_t": round(inc.get("end_t", end_t), 1), "role": role,
                     "roles": sorted({s[3] for s in known}), "checked": False,
                     "samples": [[round(s[0], 1), s[1], s[2], s[3]] for s in inc["samples"]]}
            if cands:
                first, last = cands[0][0], cands[-1][0]
                base_w = [s for s in cands if s[0] <= first + window_s]
                end_w = [s for s in cands if s[0] >= last - window_s]
                rss0, rss1 = min(s[1] for s in base_w), min(s[1] for s in end_w)
                fd0, fd1 = min(s[2] for s in base_w), min(s[2] for s in end_w)
                entry.update({
                    "base_window_t": [round(first, 1), round(base_w[-1][0], 1)],
                    "end_window_t": [round(end_w[0][0], 1), round(last, 1)],
                    "rss_base_kib": rss0, "rss_end_kib": rss1, "fds_base": fd0, "fds_end": fd1,
                    "rss_growth_pct": growth(rss0, rss1), "fds_growth_pct": growth(fd0, fd1),
                    "fd_kinds_base": min(base_w, key=lambda s: s[2])[4],
                    "fd_kinds_end": min(end_w, key=lambda s: s[2])[4],
                    "checked": checked and last - first >= a.min_window_s - 0.01})
            entry["over_limit"] = entry["checked"] and (
                entry["rss_growth_pct"] > a.growth_limit_pct or
                entry["fds_growth_pct"] > a.growth_limit_pct)
            per_inc.append(entry)
        rows.append({"process": name, "checked": checked,
                     "start": point(all_samples[0] if all_samples else None),
                     "after_warmup": point(nearest(all_samples, a.warmup_s) if all_samples else None),
                     "end": point(all_samples[-1] if all_samples else None),
                     "incarnations": per_inc})
    return rows


def pct(v):
    return "-" if v is None else f"{v:+.1f}%"


def quantile(v, q):
    if not v:
        return None
    v = sorted(v)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


# ---------------------------------------------------------------------------------------
def report(a, clients, campaign, rows, duration, recovered, stuck, setup):
    faults_by_kind = {}
    for f in campaign.faults:
        faults_by_kind.setdefault(f["kind"], []).append(f)
    failed_total = clients.failed + clients.hung + clients.mismatched
    over = [(r["process"], e) for r in rows for e in r["incarnations"] if e["over_limit"]]
    gaps = clients.resume_gaps
    out = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "cpu": setup["cpu"], "cores": os.cpu_count(),
        "duration_s": round(duration, 1), "clients": a.clients, "max_tokens": a.max_tokens,
        "warmup_s": a.warmup_s, "restart_warmup_s": a.restart_warmup_s,
        "min_window_s": a.min_window_s, "window_s": a.window_s,
        "growth_limit_pct": a.growth_limit_pct,
        "references": setup["references"], "commit": setup["commit"],
        "settings": {k: v for k, v in vars(a).items()},
        "requests": {"completed": clients.completed, "failed": clients.failed,
                     "hung": clients.hung, "mismatched": clients.mismatched,
                     "completed_after_a_resume": clients.completed_with_resume,
                     "still_running_at_the_end": stuck},
        "resumes": {"count": clients.resumes, "timed": len(gaps),
                    "p50_s": quantile(gaps, 0.5), "p95_s": quantile(gaps, 0.95),
                    "max_s": max(gaps) if gaps else None},
        "longest_silence_in_a_request_s": max(clients.stalls) if clients.stalls else None,
        "faults": campaign.faults,
        "both_coordinators_serving_seen_at": [round(t, 1) for t in campaign.split_brain],
        "processes": rows,
        "failures": [{"t": round(t, 1), "client": c, "what": w} for t, c, w in clients.failures],
        "campaign_recovered": recovered,
    }
    ok = failed_total == 0 and not over and recovered and not stuck
    out["pass"] = ok

    L = []
    L.append(f"Cascade soak: {duration:.0f} s, {a.clients} streaming clients "
             f"({a.max_tokens} tokens a request, half greedy, half temperature 0.8 seeded), "
             f"etcd + 2 coordinators + 3 workers on network-namespace hosts")
    L.append(f"date {out['date_utc']} UTC; {setup['cpu']}, {os.cpu_count()} cores; commit "
             f"{setup['commit']}; model {os.path.basename(a.model)}; {setup['references']} "
             f"reference texts taken before any fault")
    L.append(f"faults: SIGKILLed processes started again after {a.restart_after_s:g} s, SIGSTOP "
             f"{a.stop_s:g} s, nft cut {a.cut_s:g} s, etcd down {a.etcd_down_s:g} s; "
             f"{a.pause_s:g} s between a fault's recovery and the next")
    L.append("")
    L.append(f"requests: {clients.completed} completed ({clients.completed_with_resume} of them "
             f"after a resume), {clients.failed} failed, {clients.hung} hung, "
             f"{clients.mismatched} mismatched" + (f"; {len(stuck)} still running at the end" if stuck else ""))
    timed = "" if len(gaps) == clients.resumes else f" ({len(gaps)} in requests that ended)"
    if gaps:
        L.append(f"resumes: {clients.resumes}; time from the last message before the break to "
                 f"the first after it{timed}: p50 {quantile(gaps, .5):.2f} s, p95 "
                 f"{quantile(gaps, .95):.2f} s, max {max(gaps):.2f} s")
    else:
        L.append(f"resumes: {clients.resumes}")
    if clients.stalls:
        L.append(f"longest silence within a request (resumed or not): {max(clients.stalls):.2f} s")
    L.append("")
    L.append(f"faults: {len(campaign.faults)} (recovery: from the fault until a new request is "
             f"served; settled: until the cluster is whole again, spare idle)")
    L.append(f"  {'kind':12} {'n':>3} {'served after s (each)':40} {'settled after s max':>19}")
    for kind in FAULTS:
        fs = faults_by_kind.get(kind, [])
        if not fs:
            L.append(f"  {kind:12} {0:>3}")
            continue
        served = [f["served_after_s"] for f in fs]
        settled = [f["settled_after_s"] for f in fs if f["settled_after_s"] is not None]
        each = ", ".join("-" if s is None else f"{s:.2f}" for s in served)
        L.append(f"  {kind:12} {len(fs):>3} {each:40} "
                 f"{(f'{max(settled):.1f}' if settled else '-'):>19}")
    for f in campaign.faults:
        if "note" in f:
            L.append(f"  ! {f['kind']} on {f['target']} at {f['t']} s: {f['note']}")
    if campaign.split_brain:
        L.append(f"  ! both coordinators said SERVING at t = "
                 f"{', '.join(f'{t:.1f}' for t in campaign.split_brain[:10])} s")
    L.append("")
    L.append(f"memory (VmRSS MiB) and descriptors at the start, after the warm-up "
             f"({a.warmup_s:g} s) and at the end, with the role then")
    L.append(f"growth, each incarnation in its final role: the lowest sample of its first "
             f"{a.window_s:g} s in that role after its warm-up ({a.warmup_s:g} s from the start, "
             f"{a.restart_warmup_s:g} s from a restart) against the lowest of its last "
             f"{a.window_s:g} s; limit {a.growth_limit_pct:g}%, checked over {a.min_window_s:g} s "
             f"or more")
    L.append(f"  {'process':21} {'roles start/warm/end':>26} {'RSS start/warm/end':>19} "
             f"{'fds start/warm/end':>18}")
    for r in rows:
        s, w, e = r["start"], r["after_warmup"], r["end"]
        if not s:
            continue
        roles = f"{s['role']}/{w['role']}/{e['role']}"
        rss = f"{s['rss_kib'] / 1024:.1f}/{w['rss_kib'] / 1024:.1f}/{e['rss_kib'] / 1024:.1f}"
        fds = f"{s['fds']}/{w['fds']}/{e['fds']}"
        L.append(f"  {r['process']:21} {roles:>26} {rss:>19} {fds:>18}")
        for i in r["incarnations"]:
            head = (f"      pid {i['pid']} t={i['from_t']:.0f}-{i['to_t']:.0f} s ({i['why']}), "
                    f"as {i['role']}")
            if "base_window_t" not in i:
                L.append(head + ": no sample in that role after its warm-up")
                continue
            verdict = ("OVER THE LIMIT" if i["over_limit"] else "ok" if i["checked"]
                       else "not checked" if not r["checked"] else "too short to check")
            L.append(head + f" from t={i['base_window_t'][0]:.0f} s to {i['end_window_t'][1]:.0f} s: "
                     f"RSS {i['rss_base_kib'] / 1024:.1f}->{i['rss_end_kib'] / 1024:.1f} MiB "
                     f"({pct(i['rss_growth_pct'])}), fds {i['fds_base']}->{i['fds_end']} "
                     f"({pct(i['fds_growth_pct'])}): {verdict}")
            if i["over_limit"]:
                L.append(f"        descriptors then: {i['fd_kinds_base']} -> {i['fd_kinds_end']}")
    L.append("")
    if clients.failures:
        L.append("failures:")
        for t, c, w in clients.failures[:30]:
            L.append(f"  t={t:.1f} s client {c}: {w[:400]}")
        L.append("")
    verdict = []
    if failed_total:
        verdict.append(f"{failed_total} requests failed, hung or mismatched")
    if over:
        verdict.append(f"{len(over)} process incarnation(s) grew by more than {a.growth_limit_pct:g}%")
    if not recovered:
        verdict.append("a fault was not recovered from")
    if stuck:
        verdict.append(f"{len(stuck)} clients did not finish")
    L.append("PASS" if ok else "FAIL: " + "; ".join(verdict))
    return "\n".join(L), out, ok


# ---------------------------------------------------------------------------------------
def parse_args(argv):
    p = argparse.ArgumentParser(description="Soak and fault campaign against a Cascade cluster "
                                "of standby coordinators on network-namespace hosts.")
    p.add_argument("--duration-s", type=float, default=600)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--model", default=os.path.join(ROOT, "models", "stories260K.gguf"))
    p.add_argument("--keep-logs", metavar="DIR", help="write the processes' logs, the event "
                   "log and the JSON report here (kept)")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--hang-s", type=float, default=120, help="a request not ended this long is hung")
    p.add_argument("--warmup-s", type=float, default=60,
                   help="resources are checked from this long after each (re)start")
    p.add_argument("--restart-warmup-s", type=float, default=20,
                   help="the warm-up of a process the campaign restarted, from its restart")
    p.add_argument("--min-window-s", type=float, default=30,
                   help="check an incarnation only when its samples span this long after its warm-up")
    p.add_argument("--window-s", type=float, default=30,
                   help="the growth compares the lowest sample of two windows this long")
    p.add_argument("--growth-limit-pct", type=float, default=10)
    p.add_argument("--faults", default=",".join(FAULTS),
                   help="the faults, in turn (default: all of them, in the order above)")
    p.add_argument("--restart-after-s", type=float, default=1,
                   help="a killed worker or leader is started again this long after the kill")
    p.add_argument("--stop-s", type=float, default=5, help="SIGSTOP length")
    p.add_argument("--cut-s", type=float, default=5, help="nft cut length")
    p.add_argument("--etcd-down-s", type=float, default=5)
    p.add_argument("--pause-s", type=float, default=8, help="pause after a fault has settled")
    p.add_argument("--first-fault-s", type=float, default=10,
                   help="seconds of load before the first fault")
    p.add_argument("--quiet-tail-s", type=float, default=20,
                   help="no fault starts in the last this many seconds")
    p.add_argument("--recover-timeout-s", type=float, default=90,
                   help="a fault not recovered from (served and settled) within this is a failure")
    a = p.parse_args(argv)
    a.faults = [f.strip() for f in a.faults.split(",") if f.strip()]
    unknown = [f for f in a.faults if f not in FAULTS]
    if unknown or not a.faults:
        p.error(f"--faults: unknown {unknown}; known: {','.join(FAULTS)}")
    return a


SKIPPED = 77  # what is needed is missing (ctest's SKIP_RETURN_CODE)


class Interrupted(BaseException):
    pass


def main(argv=None):
    global grpc, cc, pb2, pb2_grpc, ctl_pb2, ctl_pb2_grpc, T0, _event_log
    a = parse_args(argv)
    # ip and nft live in sbin, which a plain PATH (getconf PATH) lacks.
    path = os.environ.get("PATH", "").split(":")
    os.environ["PATH"] = ":".join(path + [d for d in ("/usr/sbin", "/sbin") if d not in path])
    for need, why in (("ip", "iproute2"), ("nft", "nftables"), ("etcd", "etcd-server"),
                      ("setpriv", "util-linux")):
        if not shutil.which(need):
            print(f"soak: skipped: {need} not found (Debian: {why})", file=sys.stderr)
            return SKIPPED
    if os.geteuid() != 0:
        print("soak: skipped: network namespaces need root", file=sys.stderr)
        return SKIPPED
    try:
        import grpc_tools  # noqa: F401
        import grpc  # noqa: F401
    except ImportError as e:
        print(f"soak: skipped: {e} (Debian: python3-grpcio, python3-grpc-tools)", file=sys.stderr)
        return SKIPPED
    for b in ("cascade-coordinator", "cascade-worker"):
        if not os.access(os.path.join(a.bin, b), os.X_OK):
            print(f"soak: no {b} in {a.bin}", file=sys.stderr)
            return 2
    if not os.path.isfile(a.model):
        print(f"soak: no model at {a.model}", file=sys.stderr)
        return 2

    work = tempfile.mkdtemp(prefix="cascade_soak_")
    logdir = os.path.abspath(a.keep_logs) if a.keep_logs else os.path.join(work, "logs")
    os.makedirs(logdir, exist_ok=True)
    _event_log = open(os.path.join(logdir, "soak-events.log"), "a")

    # Stubs: the public API and the control plane's ClusterStatus, generated here;
    # cascade_client takes them from $CASCADE_PY_STUBS.
    stubs = os.path.join(work, "stubs")
    os.makedirs(stubs)
    r = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", os.path.join(ROOT, "proto"),
                        "--python_out", stubs, "--grpc_python_out", stubs,
                        "cascade/v1/inference.proto", "cascade/v1/control_plane.proto"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"soak: grpc_tools.protoc failed (python3-grpc-tools?): {r.stderr}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
        return 2
    for pkg in ("cascade", os.path.join("cascade", "v1")):
        open(os.path.join(stubs, pkg, "__init__.py"), "a").close()
    os.environ["CASCADE_PY_STUBS"] = stubs
    sys.path.insert(0, os.path.join(ROOT, "client", "python"))
    import grpc as grpc_mod
    import cascade_client
    grpc, cc = grpc_mod, cascade_client
    pb2, pb2_grpc = cc.load_stubs()
    from cascade.v1 import control_plane_pb2, control_plane_pb2_grpc
    ctl_pb2, ctl_pb2_grpc = control_plane_pb2, control_plane_pb2_grpc

    hosts = Hosts(f"sk{os.getpid() % 100000}", 6)
    cluster = None
    cleaned = []

    def cleanup():
        if cleaned:
            return
        cleaned.append(True)
        for h in range(1, 7):
            if hosts.made:
                hosts.heal(h)
        if cluster:
            cluster.stop_all()
        hosts.remove()
        if _event_log:
            _event_log.close()
        shutil.rmtree(work, ignore_errors=True)

    atexit.register(cleanup)

    def on_signal(sig, frame):
        raise Interrupted(signal.Signals(sig).name)

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: every thread's stack

    try:
        cpu = "?"
        lscpu = run(["lscpu"], check=False).stdout
        for line in lscpu.splitlines():
            if line.startswith("Model name"):
                cpu = line.split(":", 1)[1].strip()
        commit = run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                     check=False).stdout.strip() or "?"
        built = max(os.path.getmtime(os.path.join(a.bin, b))
                    for b in ("cascade-coordinator", "cascade-worker"))
        commit += time.strftime(", binaries built %Y-%m-%d %H:%M UTC", time.gmtime(built))
        hosts.make()
        cluster = Cluster(a, hosts, logdir, work)
        T0 = time.monotonic()
        cluster.start()
        deadline = time.monotonic() + 120
        why = "?"
        while time.monotonic() < deadline:
            why = cluster.settled()
            if not why:
                break
            time.sleep(0.25)
        if why:
            print(f"soak: the cluster did not come up within 120 s: {why} (logs: {logdir})",
                  file=sys.stderr)
            if not a.keep_logs:
                for p in cluster.procs:
                    print(f"---- {p.name}\n" + open(p.log_path, errors="replace").read()[-3000:],
                          file=sys.stderr)
            return 2
        event(f"cluster up: etcd {hosts.ip(1)}, coordinators {cluster.publics}, "
              f"workers on {[hosts.ip(h) for h in (4, 5, 6)]}")

        clients = Clients(cluster.publics, a.clients, a.max_tokens, a.hang_s,
                          os.path.join(logdir, "hung-client-stacks.txt"))
        t = time.monotonic()
        refs = clients.compute_references()
        event(f"{refs} reference texts in {time.monotonic() - t:.1f} s")

        T0 = time.monotonic()  # the campaign's clock starts with the clients
        for p in cluster.procs:  # its incarnations began before t = 0
            for inc in p.incarnations:
                inc["start_t"] = 0.0
        sampler = Sampler(cluster)
        sampler.sample()
        clients.start()
        sampler.start()
        event(f"{a.clients} clients started")
        time.sleep(a.first_fault_s)
        campaign = Campaign(a, cluster, hosts)
        recovered = campaign.loop(a.duration_s)
        while now() < a.duration_s:
            time.sleep(0.2)
        sampler.stop.set()
        sampler.sample()
        end_t = now()
        dump_descriptors(cluster, hosts, os.path.join(logdir, "descriptors-at-the-end.txt"))
        event("duration over: stopping the clients")
        stuck = clients.finish()
        duration = end_t
        rows = resource_rows(cluster.procs, sampler.me, a, end_t)
        text, out, ok = report(a, clients, campaign, rows, duration, recovered, stuck,
                               {"cpu": cpu, "references": refs, "commit": commit})
        out["events"] = list(_events)
        print()
        print(text, flush=True)
        for path in filter(None, [a.json, a.keep_logs and os.path.join(logdir, "soak-report.json")]):
            with open(path, "w") as f:
                json.dump(out, f, indent=1)
        if a.keep_logs:
            with open(os.path.join(logdir, "soak-report.txt"), "w") as f:
                f.write(text + "\n")
            print(f"(logs kept in {logdir})")
        elif not ok:  # the logs go with this run: their ends, for the failure's story
            for p in cluster.procs:
                print(f"\n---- the end of {p.name}'s log (without its request lines)")
                print("\n".join(log_tail(p.log_path)))
        return 0 if ok else 1
    except Interrupted as e:
        print(f"\nsoak: interrupted ({e}); cleaning up", file=sys.stderr)
        return 130
    except Exception:
        traceback.print_exc()
        if a.keep_logs:
            print(f"(logs kept in {logdir})", file=sys.stderr)
        return 2
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        cleanup()


if __name__ == "__main__":
    sys.exit(main())
