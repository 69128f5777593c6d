#!/usr/bin/env bash
# Hosts on this machine: network namespaces joined by veth links to a bridge, so that a job runs
# across "hosts" the way it runs across a cluster (docs/multihost.md).
#
#   scripts/netns-hosts.sh check                       can hosts be made here? (exit 0, or 77 and why)
#   scripts/netns-hosts.sh up N [--rate RATE]          make hosts 0..N-1 (N = 2..4); RATE limits every
#                                                      link in both directions (tc token bucket, e.g. 10gbit)
#   scripts/netns-hosts.sh mpirun [ARGS...]            mpirun across the hosts (it runs on host 0; its
#                                                      daemons enter the other hosts instead of ssh)
#   scripts/netns-hosts.sh exec HOST CMD [ARGS...]     a command on host HOST (its namespaces)
#   scripts/netns-hosts.sh link HOST down|up           cut or restore host HOST's link to the switch
#   scripts/netns-hosts.sh rate HOST RATE|off          limit (or stop limiting) host HOST's link
#   scripts/netns-hosts.sh traffic                     bytes every host's link sent and received (JSON)
#   scripts/netns-hosts.sh status                      the hosts, their addresses and link states
#   scripts/netns-hosts.sh down                        remove every namespace, link and file of the set
#
# ODC_NETNS (default odcnet; letters, digits, '-', at most 10 characters) names the set: namespaces
# NAME-sw (the switch: a bridge) and NAME-h0.., their state in ${TMPDIR:-/tmp}/NAME-hosts/ (hostfile,
# launcher agent). Host i's address is 10.231.K.(i+2)/24, where K is derived from NAME; the
# addresses exist only inside the namespaces, and nothing is routed anywhere else. Each host has its
# own hostname (host-i), its own /dev/shm and System V IPC namespace, so the ranks of one host share
# memory and those of different hosts only the network: MPI and UCX see separate machines. The file
# system is shared (as a cluster's shared file system would be).
#
# Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2; `down` is safe to run at any time.
set -euo pipefail

name="${ODC_NETNS:-odcnet}"
if ! [[ "$name" =~ ^[A-Za-z0-9-]{1,10}$ ]]; then
  echo "netns-hosts.sh: ODC_NETNS '$name': use 1-10 letters, digits or '-'" >&2
  exit 2
fi
state="${TMPDIR:-/tmp}/$name-hosts"
switch="$name-sw"
subnet_octet=$(( $(printf '%s' "$name" | cksum | cut -d' ' -f1) % 200 + 20 ))
address_of() { echo "10.231.$subnet_octet.$(( $1 + 2 ))"; }
host_ns() { echo "$name-h$1"; }

die() { echo "netns-hosts.sh: $*" >&2; exit 1; }
usage() { sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

hosts_up() {  # the number of hosts the set has now
  [ -f "$state/hosts" ] && cat "$state/hosts" || echo 0
}
need_hosts() {
  [ "$(hosts_up)" -gt 0 ] || die "no hosts of set '$name' are up (scripts/netns-hosts.sh up N first)"
}
check_host() {
  [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -lt "$(hosts_up)" ] || die "no host '$1' in set '$name' (hosts 0..$(( $(hosts_up) - 1 )))"
}

# Why hosts cannot be made here, or nothing.
why_not() {
  [ "$(id -u)" -eq 0 ] || { echo "network namespaces need root (this is uid $(id -u))"; return; }
  command -v ip > /dev/null || { echo "iproute2's ip is not installed"; return; }
  command -v unshare > /dev/null || { echo "util-linux's unshare is not installed"; return; }
  local probe="$name-probe$$"
  if ! ip netns add "$probe" 2> /dev/null; then echo "ip netns add failed (no CAP_NET_ADMIN?)"; return; fi
  if ! ip netns exec "$probe" unshare --uts --ipc --mount --propagation private \
      sh -c 'mount -t tmpfs tmpfs /dev/shm && hostname probe' 2> /dev/null; then
    ip netns delete "$probe" 2> /dev/null || true
    echo "a namespace cannot get its own hostname and /dev/shm (unshare --uts --ipc --mount failed)"
    return
  fi
  ip netns delete "$probe"
}

# tc token bucket on `dev` in namespace `ns`: RATE (tc syntax) with a burst of about 1 ms of it.
limit_link() {
  local ns="$1" dev="$2" rate="$3"
  if [ "$rate" = off ]; then
    ip -n "$ns" link show "$dev" > /dev/null
    tc -n "$ns" qdisc del dev "$dev" root 2> /dev/null || true
    return
  fi
  local bits
  bits=$(/usr/bin/python3 - "$rate" <<'EOF'
import re, sys
m = re.fullmatch(r"([0-9.]+)([kmgt]?)(bit|bps)?", sys.argv[1].lower())
if not m:
    sys.exit(1)
scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
print(int(float(m.group(1)) * scale * (8 if m.group(3) == "bps" else 1)))
EOF
) || die "rate '$rate': expected a number with an optional k/m/g unit and bit or bps (e.g. 10gbit, 500mbit)"
  [ "$bits" -gt 0 ] || die "rate '$rate' must be positive"
  local burst=$(( bits / 8 / 1000 ))
  [ "$burst" -ge 65536 ] || burst=65536
  tc -n "$ns" qdisc replace dev "$dev" root tbf rate "${bits}bit" burst "$burst" latency 20ms \
    || die "tc could not limit $dev in $ns to $rate"
}

cmd_down() {
  local ns
  for ns in $(ip netns list 2> /dev/null | awk '{print $1}'); do
    case "$ns" in "$switch"|"$name"-h[0-9]*) ip netns pids "$ns" 2> /dev/null | xargs -r kill -9 2> /dev/null || true
                                              ip netns delete "$ns" ;; esac
  done
  rm -rf "$state"
}

cmd_up() {
  local n="${1:-}" rate=""
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 4 ] || die "up: the number of hosts must be 2, 3 or 4 (got '${n}')"
  shift
  while [ $# -gt 0 ]; do
    case "$1" in
      --rate) [ $# -ge 2 ] || die "up: --rate needs a value (e.g. 10gbit)"; rate="$2"; shift 2 ;;
      *) die "up: unknown argument '$1'" ;;
    esac
  done
  local reason
  reason="$(why_not)"
  [ -z "$reason" ] || { echo "netns-hosts.sh: cannot make hosts here: $reason" >&2; exit 77; }
  cmd_down
  mkdir -p "$state"
  # A failure part-way leaves nothing behind.
  trap 'cmd_down' ERR
  ip netns add "$switch"
  ip -n "$switch" link add br0 type bridge
  ip -n "$switch" link set br0 up
  : > "$state/hostfile"
  local i ns
  for (( i = 0; i < n; i++ )); do
    ns="$(host_ns "$i")"
    ip netns add "$ns"
    ip link add eth0 netns "$ns" type veth peer name "h$i" netns "$switch"
    ip -n "$switch" link set "h$i" master br0
    ip -n "$switch" link set "h$i" up
    ip -n "$ns" addr add "$(address_of "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    # A connection to a peer behind a cut link fails after ~13 s of retransmissions instead of
    # Linux's ~15 minutes (net.ipv4.tcp_retries2 = 15), so the launcher gives up on a daemon it
    # cannot reach once the ranks have reported the fault (docs/multihost.md).
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2=5
    if [ -n "$rate" ]; then limit_link "$ns" eth0 "$rate"; limit_link "$switch" "h$i" "$rate"; fi
    echo "$(address_of "$i") slots=64" >> "$state/hostfile"
  done
  # mpirun's launcher agent: instead of ssh, enter the host's namespaces and run the command string.
  {
    echo '#!/bin/sh'
    echo '# Written by scripts/netns-hosts.sh: mpirun calls it as it would call ssh (options, host, command).'
    echo 'while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done'
    echo 'host="$1"; shift'
    echo 'case "$host" in'
    for (( i = 0; i < n; i++ )); do echo "  $(address_of "$i")|host-$i) i=$i ;;"; done
    echo '  *) echo "netns agent: unknown host $host" >&2; exit 255 ;;'
    echo 'esac'
    echo "exec ip netns exec $name-h\$i unshare --uts --ipc --mount --propagation private \\"
    echo '  sh -c "hostname host-$i && mount -t tmpfs tmpfs /dev/shm && $*"'
  } > "$state/agent"
  chmod +x "$state/agent"
  echo "$n" > "$state/hosts"
  trap - ERR
  echo "netns-hosts.sh: $n hosts of set '$name' up: $(for (( i = 0; i < n; i++ )); do printf 'host-%d %s  ' "$i" "$(address_of "$i")"; done)${rate:+(links limited to $rate)}" >&2
}

# A command inside host i's namespaces (its own hostname and /dev/shm).
run_on() {
  local i="$1"
  shift
  ip netns exec "$(host_ns "$i")" unshare --uts --ipc --mount --propagation private \
    sh -c 'hostname "host-$0" && mount -t tmpfs tmpfs /dev/shm && exec "$@"' "$i" "$@"
}

cmd_mpirun() {
  need_hosts
  # TCP keepalives on the launcher's idle connections: a daemon behind a cut link is declared lost
  # after ~16 s of silence (Open MPI's default: 300 s + 9 x 20 s).
  run_on 0 mpirun --mca plm_rsh_agent "$state/agent" --hostfile "$state/hostfile" \
    --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 -x UCX_NET_DEVICES=eth0 \
    --mca oob_tcp_keepalive_time 10 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 "$@"
}

# Cut (down) or restore (up) host i's link at the switch. Restoring waits until both ends have
# carrier again and forgets the neighbours every host failed to reach meanwhile, so the next
# connection does not wait for a retry.
set_link() {
  local i="$1" state="$2" tries
  ip -n "$switch" link set "h$i" "$state"
  [ "$state" = up ] || return 0
  for (( tries = 0; tries < 50; tries++ )); do
    if ip -n "$switch" link show "h$i" | grep -q LOWER_UP && ip -n "$(host_ns "$i")" link show eth0 | grep -q LOWER_UP; then
      break
    fi
    sleep 0.1
  done
  local h
  for (( h = 0; h < $(hosts_up); h++ )); do ip -n "$(host_ns "$h")" neigh flush all 2> /dev/null || true; done
  # A link whose carrier is up can still drop the first packets (the bridge port's state, stale
  # neighbour entries): the link counts as restored once a TCP connection from this host to another
  # one (the direction in which mpirun's daemons call back their launcher) gets through.
  probe_link "$i" || die "host $i's link is up but no TCP connection to host $(( i == 0 ? 1 : 0 )) got through in 15 s"
}

# probe_link I: a TCP connection from host I to host 0 (host 1 when I is 0) succeeds within 15 s.
probe_link() {
  local i="$1" peer=$(( $1 == 0 ? 1 : 0 )) port=$(( 20000 + RANDOM % 20000 )) listener rc=0
  ip netns exec "$(host_ns "$peer")" /usr/bin/python3 -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen()
s.settimeout(16)
try:
    s.accept()[0].close()
except OSError:
    sys.exit(1)' "$(address_of "$peer")" "$port" &
  listener=$!
  ip netns exec "$(host_ns "$i")" /usr/bin/python3 -c '
import socket, sys, time
end = time.monotonic() + 15
while True:
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()
        break
    except OSError:
        if time.monotonic() > end:
            sys.exit(1)
        time.sleep(0.1)' "$(address_of "$peer")" "$port" || rc=1
  [ $rc -eq 0 ] || kill "$listener" 2> /dev/null
  wait "$listener" 2> /dev/null || rc=1
  return $rc
}

cmd_traffic() {
  need_hosts
  local i ns first=1
  printf '{"hosts": ['
  for (( i = 0; i < $(hosts_up); i++ )); do
    ns="$(host_ns "$i")"
    [ $first -eq 1 ] || printf ', '
    first=0
    printf '{"host": %d, "tx_bytes": %s, "rx_bytes": %s}' "$i" \
      "$(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/tx_bytes)" \
      "$(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/rx_bytes)"
  done
  printf ']}\n'
}

cmd_status() {
  need_hosts
  local i
  for (( i = 0; i < $(hosts_up); i++ )); do
    printf 'host-%d  %-15s  switch port %s  %s\n' "$i" "$(address_of "$i")" \
      "$(ip -n "$switch" -br link show "h$i" | awk '{print $2}')" \
      "$(tc -n "$(host_ns "$i")" qdisc show dev eth0 | grep -o 'rate [^ ]*' || echo 'no rate limit')"
  done
}

case "${1:-}" in
  check) reason="$(why_not)"; if [ -n "$reason" ]; then echo "netns-hosts.sh: cannot make hosts here: $reason"; exit 77; fi
         echo "netns-hosts.sh: hosts can be made here" ;;
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  mpirun) shift; cmd_mpirun "$@" ;;
  exec) [ $# -ge 3 ] || die "exec: HOST and a command are needed"; need_hosts; check_host "$2"; h="$2"; shift 2; run_on "$h" "$@" ;;
  link) [ $# -eq 3 ] || die "link: HOST and down|up are needed"; need_hosts; check_host "$2"
        case "$3" in down|up) set_link "$2" "$3" ;; *) die "link: '$3' is not down or up" ;; esac ;;
  rate) [ $# -eq 3 ] || die "rate: HOST and RATE|off are needed"; need_hosts; check_host "$2"
        limit_link "$(host_ns "$2")" eth0 "$3"; limit_link "$switch" "h$2" "$3" ;;
  traffic) cmd_traffic ;;
  status) cmd_status ;;
  ""|-h|--help) usage ;;
  *) echo "netns-hosts.sh: unknown command '$1'" >&2; usage ;;
esac
