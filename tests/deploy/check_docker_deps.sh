#!/usr/bin/env bash
# Checks, without a Docker engine, that the images' runtime stages install exactly the
# packages the binaries need:
#   1. ldd lists the shared libraries cascade, cascade-coordinator and cascade-worker in
#      BIN_DIR load; dpkg-query -S names each one's Debian package.
#   2. deploy/docker/Dockerfile: the apt-get install lines of its last (runtime) stage,
#      less what that stage purges again, must hold every such package (except libc6,
#      libgcc-s1 and libstdc++6, which debian:12 has) and nothing else.
#      Libraries under /usr/local/cuda (or NVIDIA's) belong to the CUDA toolkit: the CPU
#      image builds with -DCASCADE_CUDA=OFF, so its binaries do not load them, and they
#      are left out of its check (said so when this build has them).
#   3. deploy/docker/Dockerfile.cuda: the same Debian packages, plus NVIDIA's package
#      for each CUDA library the binaries load (libcudart.so.13: cuda-cudart-13-N, ...),
#      and nothing else.
# On a mismatch it prints what is missing and what is not needed, and exits 1.
#
#   tests/deploy/check_docker_deps.sh BIN_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:?usage: check_docker_deps.sh BIN_DIR}
BINARIES=(cascade cascade-coordinator cascade-worker)
BASE_PACKAGES=(libc6 libgcc-s1 libstdc++6)  # in debian:12 (apt itself needs them)
CPU_DOCKERFILE=deploy/docker/Dockerfile
CUDA_DOCKERFILE=deploy/docker/Dockerfile.cuda

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# Where dpkg may know a library: Debian 12 merged /lib into /usr/lib, and dpkg records
# each file under whichever of the two its package ships it.
candidates() {
  local p
  for p in "$1" "$(readlink -f "$1")"; do
    echo "$p"
    case $p in
      /usr/lib/*) echo "${p#/usr}" ;;
      /lib/* | /lib64/*) echo "/usr$p" ;;
    esac
  done
}
is_cuda() {
  case $1 in
    /usr/local/cuda* | */libcudart.so* | */libcublas*.so* | */libnccl.so* | */libcudnn*.so* | */libcuda.so*) return 0 ;;
  esac
  return 1
}

# 1. What the binaries load: "soname path binary" lines.
: >"$tmp/libs"
for b in "${BINARIES[@]}"; do
  exe=$bin/$b
  if [[ ! -x $exe ]]; then
    echo "check_docker_deps: $exe is missing (build it first)" >&2
    exit 1
  fi
  if ! ldd "$exe" >"$tmp/ldd" 2>&1; then
    echo "check_docker_deps: ldd $exe failed:" >&2
    cat "$tmp/ldd" >&2
    exit 1
  fi
  if grep -q 'not found' "$tmp/ldd"; then
    echo "check_docker_deps: $b loads libraries this machine lacks:" >&2
    grep 'not found' "$tmp/ldd" >&2
    exit 1
  fi
  while read -r soname arrow path _; do
    [[ $arrow == "=>" ]] || { path=$soname; soname=${soname##*/}; }
    if [[ $path == /* ]]; then  # not linux-vdso.so.1
      echo "$soname $path $b" >>"$tmp/libs"
    fi
  done <"$tmp/ldd"
done
# Their packages, with one dpkg-query for all of them.
declare -A package_of=()
mapfile -t paths < <(awk '{print $2}' "$tmp/libs" | sort -u | while read -r p; do is_cuda "$p" || candidates "$p"; done | sort -u)
while IFS= read -r line; do
  [[ $line == diversion* ]] && continue
  package_of[${line#*: }]=${line%%[:,]*}
done < <(dpkg-query -S "${paths[@]}" 2>/dev/null || true)
: >"$tmp/debian" && : >"$tmp/cuda"
while read -r soname path b; do
  if is_cuda "$path"; then
    echo "$soname $b $path" >>"$tmp/cuda"
    continue
  fi
  pkg=""
  while read -r c; do
    if [[ -n ${package_of[$c]:-} ]]; then
      pkg=${package_of[$c]}
      break
    fi
  done < <(candidates "$path")
  if [[ -n $pkg ]]; then
    echo "$pkg $soname $b" >>"$tmp/debian"
  else
    echo "check_docker_deps: $b loads $path, which no Debian package installed here owns" >&2
    fail=1
  fi
done <"$tmp/libs"
awk '{print $1}' "$tmp/debian" | sort -u | grep -vxF -f <(printf '%s\n' "${BASE_PACKAGES[@]}") >"$tmp/needed" || true
if [[ ! -s $tmp/needed ]]; then
  echo "check_docker_deps: the check is blind: no library of the binaries maps to a Debian package" >&2
  exit 1
fi
# "package: soname (binaries)" for the messages.
why() {
  awk -v p="$1" '$1 == p {libs[$2] = libs[$2] (libs[$2] ? ", " : "") $3}
    END {for (l in libs) printf "%s%s (%s)", (n++ ? "; " : ""), l, libs[l]}' "$tmp/debian"
}

# 2. The packages a Dockerfile's last stage installs and keeps: apt-get/apt install
# arguments less apt-get purge/remove ones, ${ARG}s replaced by their defaults.
installed_by() {
  python3 - "$1" <<'PY'
import re, shlex, sys

text = open(sys.argv[1]).read()
# Continuation lines joined; comment lines dropped (also inside a continued RUN).
instrs, buf = [], ""
for raw in text.splitlines():
    if raw.strip().startswith("#"):
        continue
    if raw.rstrip().endswith("\\"):
        buf += raw.rstrip()[:-1] + " "
        continue
    buf += raw
    m = re.match(r"\s*([A-Za-z]+)\s+(.*)", buf, re.S)
    if m:
        instrs.append((m.group(1).upper(), m.group(2).strip()))
    buf = ""
froms = [i for i, (k, _) in enumerate(instrs) if k == "FROM"]
if not froms:
    sys.exit(f"{sys.argv[1]}: no FROM")

def arg_defaults(items, inherited):
    out = {}
    for k, v in items:
        if k != "ARG":
            continue
        for tok in shlex.split(v):
            name, eq, default = tok.partition("=")
            out[name] = default if eq else inherited.get(name, "")
    return out

global_args = arg_defaults(instrs[: froms[0]], {})
stage = instrs[froms[-1] + 1 :]
env = arg_defaults(stage, global_args)
def subst(s):
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), m.group(0)), s)

installed, purged = [], set()
WITH_VALUE = {"-o", "-t", "-c", "--option", "--target-release", "--config-file"}
for k, v in stage:
    if k != "RUN":
        continue
    for cmd in re.split(r"&&|\|\||;|\|", subst(v)):
        try:
            toks = shlex.split(cmd)
        except ValueError:
            toks = cmd.split()
        i = next((j for j, t in enumerate(toks) if t in ("apt-get", "apt")), None)
        if i is None:
            continue
        words, skip = [], False
        for t in toks[i + 1 :]:
            if skip:
                skip = False
            elif t in WITH_VALUE:
                skip = True
            elif not t.startswith("-"):
                words.append(t)
        if not words:
            continue
        pkgs = [re.split(r"[=:]", w)[0] for w in words[1:]]
        if words[0] == "install":
            installed += pkgs
        elif words[0] in ("purge", "remove", "autoremove"):
            purged.update(pkgs)
for p in sorted(set(installed) - purged):
    print(p)
PY
}

# needed-file installed-file label: prints the differences, returns 1 if any.
compare() {
  local needed=$1 installed=$2 label=$3 bad=0 p
  local missing extra
  missing=$(comm -23 "$needed" "$installed")
  extra=$(comm -13 "$needed" "$installed" | grep -vxF -f <(printf '%s\n' "${BASE_PACKAGES[@]}") || true)
  if [[ -n $missing ]]; then
    echo "$label: MISSING from its apt-get install (the binaries load these packages' libraries):"
    for p in $missing; do echo "  + $p    $(why "$p")"; done
    bad=1
  fi
  if [[ -n $extra ]]; then
    echo "$label: NOT NEEDED (no binary loads a library of theirs; dead weight):"
    for p in $extra; do echo "  - $p"; done
    bad=1
  fi
  return $bad
}

for f in "$CPU_DOCKERFILE" "$CUDA_DOCKERFILE"; do
  [[ -f $root/$f ]] || { echo "check_docker_deps: $f is missing" >&2; exit 1; }
done
if ! grep -q -- '-DCASCADE_CUDA=OFF' "$root/$CPU_DOCKERFILE"; then
  echo "$CPU_DOCKERFILE must build with -DCASCADE_CUDA=OFF (its runtime stage has no CUDA libraries)"
  fail=1
fi
if ! grep -q -- '-DCASCADE_CUDA=ON' "$root/$CUDA_DOCKERFILE"; then
  echo "$CUDA_DOCKERFILE must build with -DCASCADE_CUDA=ON"
  fail=1
fi

installed_by "$root/$CPU_DOCKERFILE" | sort -u >"$tmp/cpu-installed"
if compare "$tmp/needed" "$tmp/cpu-installed" "$CPU_DOCKERFILE (runtime stage)"; then
  echo "$CPU_DOCKERFILE: installs exactly the $(wc -l <"$tmp/needed") Debian packages the binaries need: $(tr '\n' ' ' <"$tmp/needed")"
else
  fail=1
fi
if [[ -s $tmp/cuda ]]; then
  echo "$CPU_DOCKERFILE: left out, as CUDA toolkit libraries: $(awk '{b[$1] = b[$1] (b[$1] ? ", " : "") $2} END {for (s in b) printf "%s (%s) ", s, b[s]}' "$tmp/cuda")- this build has CUDA; the CPU image builds with -DCASCADE_CUDA=OFF, so its binaries do not load them"
fi

# 3. The CUDA image: NVIDIA's package for each CUDA library (soname major = the CUDA
# major version in the package name; any minor).
installed_by "$root/$CUDA_DOCKERFILE" | sort -u >"$tmp/cuda-installed"
nvidia_pkg='^(cuda-|libcublas|libnccl|libcudnn|libnv|nvidia-)'
grep -Ev "$nvidia_pkg" "$tmp/cuda-installed" >"$tmp/cuda-installed-debian" || true
grep -E "$nvidia_pkg" "$tmp/cuda-installed" >"$tmp/cuda-installed-nvidia" || true
if compare "$tmp/needed" "$tmp/cuda-installed-debian" "$CUDA_DOCKERFILE (runtime stage, Debian packages)"; then
  echo "$CUDA_DOCKERFILE: the same Debian packages"
else
  fail=1
fi
if [[ -s $tmp/cuda ]]; then
  : >"$tmp/nvidia-used"
  while read -r soname; do
    major=${soname##*.so.}
    major=${major%%.*}
    case $soname in
      libcudart.so.*) want="cuda-cudart-$major-[0-9]+" ;;
      libcublas.so.* | libcublasLt.so.*) want="libcublas-$major-[0-9]+" ;;
      libnccl.so.*) want="libnccl$major" ;;
      *)
        echo "$CUDA_DOCKERFILE: no known NVIDIA package for $soname: add its mapping to $0"
        fail=1
        continue
        ;;
    esac
    if found=$(grep -Ex "$want" "$tmp/cuda-installed-nvidia"); then
      echo "$found" >>"$tmp/nvidia-used"
      echo "$CUDA_DOCKERFILE: $soname ($(awk -v s="$soname" '$1 == s {print $2}' "$tmp/cuda" | sort -u | tr '\n' ' ' | sed 's/ $//')) from $found"
    else
      echo "$CUDA_DOCKERFILE (runtime stage): MISSING the NVIDIA package for $soname (want ${want//\[0-9\]+/N})"
      fail=1
    fi
  done < <(awk '{print $1}' "$tmp/cuda" | sort -u)
  unused=$(comm -23 "$tmp/cuda-installed-nvidia" <(sort -u "$tmp/nvidia-used"))
  if [[ -n $unused ]]; then
    echo "$CUDA_DOCKERFILE (runtime stage): NOT NEEDED (no binary loads a library of theirs): $unused"
    fail=1
  fi
else
  echo "$CUDA_DOCKERFILE: these binaries were built without CUDA, so its NVIDIA packages ($(tr '\n' ' ' <"$tmp/cuda-installed-nvidia")) are not checked"
fi

if ((fail)); then
  echo "check_docker_deps: FAILED" >&2
  exit 1
fi
echo "check_docker_deps: passed"
