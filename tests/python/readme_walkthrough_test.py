#!/usr/bin/python3
"""Runs the README's walk-through as written and compares what each step prints with the
output the README shows for it.

Usage: readme_walkthrough_test.py README BIN_DIR REPO_ROOT

The walk-through is the part of the README between `<!-- walkthrough:begin -->` and
`<!-- walkthrough:end -->`. Each ```sh block is one step; a ```text block right after it is
the output that step must give. The steps run in order in one bash session (so a process
started with `&` in one step serves the next), in a scratch folder where `build/bin` is
BIN_DIR and `models` is the repository's models/ folder, as on a fresh clone after
`./scripts/setup.sh`.

Matching an expected block against a step's output (stdout and stderr together):
- blank lines and runs of spaces do not count;
- a line that is only `...` stands for any number of lines (none included);
- `...` inside a line stands for any text on that line;
- every other line must match one line of the output, in order, with nothing between
  two expected lines unless a `...` line is there.

The addresses the README names (127.0.0.1:PORT, localhost:PORT) are moved to free ports,
in the commands and in the expected output alike, so that the test can run beside others.
Every process the walk-through starts is killed at the end, whatever happens.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

STEP_TIMEOUT_S = 120


def read_steps(readme_path):
    text = open(readme_path, encoding="utf-8").read()
    m = re.search(r"<!-- walkthrough:begin -->(.*?)<!-- walkthrough:end -->", text, re.S)
    if not m:
        sys.exit(f"{readme_path}: no walk-through between <!-- walkthrough:begin --> and end")
    blocks = re.findall(r"```(sh|text)\n(.*?)```", m.group(1), re.S)
    steps = []
    for kind, body in blocks:
        if kind == "sh":
            steps.append([body, None])
        elif not steps or steps[-1][1] is not None:
            sys.exit("a ```text block must follow a ```sh block")
        else:
            steps[-1][1] = body
    if not steps:
        sys.exit("the walk-through has no ```sh step")
    return steps


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_map(steps):
    ports = set()
    for cmd, out in steps:
        for t in (cmd, out or ""):
            ports.update(re.findall(r"(?:127\.0\.0\.1|localhost):(\d{4,5})\b", t))
    return {p: str(free_port()) for p in sorted(ports)}


def move_ports(text, mapping):
    return re.sub(r"(127\.0\.0\.1|localhost):(\d{4,5})\b",
                  lambda m: f"{m.group(1)}:{mapping.get(m.group(2), m.group(2))}", text)


def norm(line):
    return " ".join(line.split())


def line_matches(pattern, line):
    parts = [re.escape(p) for p in norm(pattern).split("...")]
    return re.fullmatch(".*".join(parts), norm(line)) is not None


def matches(expected, actual):
    """Returns None when `actual` matches `expected`, else a description of the first miss."""
    exp = [norm(l) for l in expected.splitlines() if norm(l)]
    act = [norm(l) for l in actual.splitlines() if norm(l)]

    # Backtracking over the `...` lines; the blocks are short.
    def go(i, j):
        if i == len(exp):
            return j == len(act)
        if exp[i] == "...":
            return any(go(i + 1, k) for k in range(j, len(act) + 1))
        return j < len(act) and line_matches(exp[i], act[j]) and go(i + 1, j + 1)

    if go(0, 0):
        return None
    # Name the first expected line that appears nowhere, or say that the order differs.
    for e in exp:
        if e != "..." and not any(line_matches(e, a) for a in act):
            return f"no output line matches: {e!r}"
    return "every expected line occurs, but not in this order or with other lines between"


def on_alarm(signum, frame):
    raise TimeoutError(f"a step ran over {STEP_TIMEOUT_S} s")


def main():
    signal.signal(signal.SIGALRM, on_alarm)
    readme, bin_dir, repo = (os.path.abspath(a) for a in sys.argv[1:4])
    steps = read_steps(readme)
    mapping = port_map(steps)
    work = tempfile.mkdtemp(prefix="cascade_walkthrough_")
    os.makedirs(os.path.join(work, "build"))
    os.symlink(bin_dir, os.path.join(work, "build", "bin"))
    os.symlink(os.path.join(repo, "models"), os.path.join(work, "models"))

    sh = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=work, text=True,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, start_new_session=True)
    failures = 0
    try:
        for n, (cmd, expected) in enumerate(steps, 1):
            cmd = move_ports(cmd, mapping)
            mark = f"__cascade_step_{n}_done__"
            # Each step's output ends at a marker line; background jobs write to files.
            sh.stdin.write(cmd + f"\necho; echo {mark}\n")
            sh.stdin.flush()
            out = []
            signal.alarm(STEP_TIMEOUT_S)  # a step that hangs fails the test, see on_alarm
            for line in sh.stdout:
                if line.strip() == mark:
                    break
                out.append(line)
            else:
                print(f"step {n}: the shell ended early:\n{''.join(out)}")
                return 1
            signal.alarm(0)
            got = "".join(out)
            print(f"--- step {n}\n$ {cmd.strip()}\n{got.rstrip()}")
            if expected is not None:
                miss = matches(move_ports(expected, mapping), got)
                if miss:
                    failures += 1
                    print(f"*** step {n} does not give the output the README shows: {miss}")
    finally:
        try:
            os.killpg(sh.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            sh.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(sh.pid, signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(steps)} steps, {failures} with other output than the README shows")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
