# tests/shell/netns_hosts.sh — hosts built on this machine from network namespaces,
# for tests and benchmarks that need links with a chosen bandwidth (sourced, not run:
# tests/shell/test_links_shaped.sh, bench/cp_ring_overlap.sh with LINK_MBIT).
#
#   netns_hosts_up N RATE_FN   make hosts h1..hN: one namespace each, joined by veth
#                              links to a bridge, each with its own address and host
#                              name; the egress of host i towards host j is shaped to
#                              `RATE_FN i j` Mbit/s (htb classes filtered by
#                              destination; this kernel has no netem, so latency is
#                              not shaped). Returns 1 with NETNS_WHY set when this
#                              machine cannot (no privilege for namespaces or tc).
#   NETNS_MPI                  the mpirun words that start one rank per host (a
#                              hostfile, the launcher agent entering a host's
#                              namespace where a cluster would use ssh, Open MPI
#                              over TCP on the hosts' network); add -np and
#                              --map-by ppr:1:node or a rankfile.
#   netns_hosts_down           remove everything netns_hosts_up made (also on EXIT).
#
# Needs root (or CAP_NET_ADMIN), iproute2 and unshare. Uses $tmp (a scratch folder).
NETNS_ID=$$
NETNS_BR=ftl$NETNS_ID
NETNS_NET=10.78.$((NETNS_ID % 200))
NETNS=()
NETNS_WHY=""
NETNS_MPI=()

netns_hosts_down() {
    local ns
    for ns in "${NETNS[@]}"; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
        ip netns del "$ns" 2>/dev/null
        ip link del "${ns}r" 2>/dev/null
    done
    ip link del "$NETNS_BR" 2>/dev/null
    NETNS=()
}

netns_hosts_up() {
    local n=$1 rate_fn=$2 h i j ns r
    for h in $(seq 1 "$n"); do NETNS+=("ftl${NETNS_ID}h$h"); done
    if ! ip netns add "${NETNS[0]}" 2>/dev/null; then
        NETNS_WHY="cannot create network namespaces here (needs root or CAP_NET_ADMIN and iproute2)"
        NETNS=()
        return 1
    fi
    for ns in "${NETNS[@]:1}"; do ip netns add "$ns" || { NETNS_WHY="cannot add namespace $ns"; return 1; }; done
    ip link add "$NETNS_BR" type bridge && ip addr add "$NETNS_NET.254/24" dev "$NETNS_BR" &&
        ip link set "$NETNS_BR" up || { NETNS_WHY="cannot build the bridge"; return 1; }
    for h in $(seq 1 "$n"); do
        ns=${NETNS[$((h - 1))]}
        ip link add "${ns}r" type veth peer name eth0 netns "$ns" && ip link set "${ns}r" master "$NETNS_BR" up &&
            ip netns exec "$ns" ip addr add "$NETNS_NET.$h/24" dev eth0 && ip netns exec "$ns" ip link set eth0 up &&
            ip netns exec "$ns" ip link set lo up || { NETNS_WHY="cannot wire host $h"; return 1; }
    done
    for i in $(seq 1 "$n"); do
        ns=${NETNS[$((i - 1))]}
        if ! ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: htb default 99 2>"$tmp/tc.err"; then
            NETNS_WHY="cannot shape links with tc here: $(head -1 "$tmp/tc.err")"
            return 1
        fi
        ip netns exec "$ns" tc class add dev eth0 parent 1: classid 1:99 htb rate 10gbit 2>/dev/null
        for j in $(seq 1 "$n"); do
            [ "$i" = "$j" ] && continue
            r=$("$rate_fn" "$i" "$j")
            ip netns exec "$ns" tc class add dev eth0 parent 1: classid 1:$j htb rate "${r}mbit" ceil "${r}mbit" \
                burst 64k cburst 64k 2>/dev/null &&
                ip netns exec "$ns" tc filter add dev eth0 parent 1: protocol ip prio 1 u32 \
                    match ip dst "$NETNS_NET.$j/32" flowid 1:$j || { NETNS_WHY="cannot shape $i -> $j"; return 1; }
        done
    done
    # The launcher agent: `agent hK command...` runs the command inside host K.
    {
        echo '#!/bin/sh'
        echo 'host=$1; shift'
        echo 'case $host in'
        for h in $(seq 1 "$n"); do echo "    h$h) ns=${NETNS[$((h - 1))]} ;;"; done
        echo '    *) echo "agent: unknown host $host" >&2; exit 1 ;;'
        echo 'esac'
        echo 'exec ip netns exec "$ns" unshare --uts sh -c "hostname $host; $*"'
    } >"$tmp/netns_agent"
    chmod +x "$tmp/netns_agent"
    for h in $(seq 1 "$n"); do echo "h$h slots=1"; done >"$tmp/netns_hosts"
    NETNS_MPI=(mpirun --allow-run-as-root --oversubscribe --hostfile "$tmp/netns_hosts" --bind-to none
               --mca plm_rsh_agent "$tmp/netns_agent" --mca btl tcp,self
               --mca btl_tcp_if_include "$NETNS_NET.0/24" --mca oob_tcp_if_include "$NETNS_NET.0/24")
    return 0
}
