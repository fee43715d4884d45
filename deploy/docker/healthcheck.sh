#!/bin/bash
# HEALTHCHECK of the Cascade images (installed as /usr/local/bin/cascade-healthcheck).
# Bash alone (its /dev/tcp), so the image needs no curl and no grpc_health_probe
# (Debian has none). It finds the Cascade process in the container and checks what its
# role can tell:
#   cascade-coordinator, or cascade serve, with an HTTP API (--http-listen, or
#     http_listen in its --config file): GET /health must answer 200, i.e. the whole
#     pipeline is loaded and serving. While it waits for workers, loads, is degraded or
#     drains, /health answers 503 and Docker shows "unhealthy": that is the state.
#   a worker, or a coordinator without HTTP: its --listen port accepts a connection.
#   a worker without a fixed --listen port: the process exists.
# Kubernetes ignores HEALTHCHECK; deploy/kubernetes has its own probes.
# CASCADE_HEALTHCHECK=http:HOST:PORT, tcp:HOST:PORT or off overrides the choice.
set -u

# shellcheck disable=SC2016  # $0 and $1 belong to the inner bash
tcp_ok() { timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$1" "$2" 2>/dev/null; }
http_ok() {
  local line
  # shellcheck disable=SC2016
  line=$(timeout 5 bash -c '
    exec 3<>"/dev/tcp/$0/$1" || exit 1
    printf "GET /health HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n" "$0" >&3
    IFS= read -r line <&3 && printf "%s" "$line"' "$1" "$2" 2>/dev/null) || true
  case $line in
    "HTTP/1."?" 200"*) return 0 ;;
  esac
  echo "GET http://$1:$2/health: ${line:-no answer}"
  return 1
}
# HOST:PORT -> $host and $port, a wildcard host as loopback.
split() {
  host=${1%:*} port=${1##*:}
  case $host in "" | 0.0.0.0 | "[::]" | "::") host=127.0.0.1 ;; esac
  host=${host#[} && host=${host%]}
}

case ${CASCADE_HEALTHCHECK:-} in
  off) exit 0 ;;
  http:*) split "${CASCADE_HEALTHCHECK#http:}" && http_ok "$host" "$port"; exit ;;
  tcp:*) split "${CASCADE_HEALTHCHECK#tcp:}" && tcp_ok "$host" "$port"; exit ;;
esac

# The Cascade process and its flags.
for cmdline in /proc/[0-9]*/cmdline; do
  mapfile -d '' argv <"$cmdline" 2>/dev/null || continue
  ((${#argv[@]})) || continue
  role=${argv[0]##*/}
  case $role in
    cascade-coordinator | cascade-worker) ;;
    cascade) [[ ${argv[1]:-} == serve ]] || continue ;;
    *) continue ;;
  esac
  listen="" http="" config=""
  for ((i = 1; i < ${#argv[@]}; i++)); do
    a=${argv[i]} next=${argv[i + 1]:-}
    case $a in
      --listen=*) listen=${a#*=} ;;
      --listen | -l) listen=$next ;;
      --http-listen=*) http=${a#*=} ;;
      --http-listen) http=$next ;;
      --config=*) config=${a#*=} ;;
      --config) config=$next ;;
    esac
  done
  # Settings not on the command line may be in the cluster file (flags win).
  if [[ -n $config && -r $config ]]; then
    from_file() { sed -n "s/^$1:[[:space:]]*[\"']\{0,1\}\([^\"'#[:space:]]*\).*/\1/p" "$config" | tail -n 1; }
    [[ -n $http ]] || http=$(from_file http_listen)
    [[ -n $listen ]] || listen=$(from_file listen)
  fi
  case $role in
    cascade-coordinator) listen=${listen:-0.0.0.0:50051} ;;
    cascade) listen=${listen:-127.0.0.1:50051} ;;
  esac
  if [[ -n $http && $role != cascade-worker ]]; then
    split "$http" && http_ok "$host" "$port"
    exit
  fi
  if [[ -n $listen && ${listen##*:} != 0 ]]; then
    split "$listen"
    tcp_ok "$host" "$port" || { echo "nothing accepts connections on $listen"; exit 1; }
    exit 0
  fi
  exit 0  # a worker on a port picked at run time: it is running
done
echo "no Cascade process in this container"
exit 1
