#!/usr/bin/env bash
# tests/shell/test_hosts.sh — faults across real hosts. Two hosts are built on this
# machine from network namespaces joined by veth links to a bridge (iproute2; made
# and removed here), each with its own address and hostname; Open MPI launches
# across them over TCP the way the README's cluster command does, with a launcher
# agent that enters the host's namespace where a cluster would use ssh. Checked:
#   1. tensor 2 x pipeline 2 with the pipeline spanning the hosts trains the losses of
#      one rank (1e-5), and its messages really cross the links;
#   2. a link cut mid-run: the job ends non-zero within parallel.timeout_s plus a few
#      seconds, naming what failed;
#   3. a host killed mid-run (every process in it, kill -9): the same, and resuming
#      from the last checkpoint on both hosts reproduces the uninterrupted losses bit
#      for bit.
# Without the privilege to make namespaces it says so in one line and checks nothing.
. "$(dirname "$0")/lib.sh"
id=$$
BR=ftb$id NS1=fth${id}a NS2=fth${id}b
if ! ip netns add "$NS1" 2>/dev/null; then
    echo "SKIP hosts: cannot create network namespaces here (needs root or CAP_NET_ADMIN and iproute2)"
    exit 0
fi
cleanup() {
    for ns in "$NS1" "$NS2"; do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
        ip netns del "$ns" 2>/dev/null
    done
    ip link del "${NS1}r" 2>/dev/null; ip link del "${NS2}r" 2>/dev/null; ip link del "$BR" 2>/dev/null
    if [ -n "${KEEP_LOGS:-}" ]; then cp "$tmp"/*.log "$KEEP_LOGS"/ 2>/dev/null; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$NS2" && ip link add "$BR" type bridge && ip addr add 10.77.$((id % 200)).254/24 dev "$BR" &&
    ip link set "$BR" up || { failed "hosts: cannot build the bridge"; exit 1; }
NET=10.77.$((id % 200))
h=0
for ns in "$NS1" "$NS2"; do
    h=$((h + 1))
    ip link add "${ns}r" type veth peer name eth0 netns "$ns" && ip link set "${ns}r" master "$BR" up &&
        ip netns exec "$ns" ip addr add "$NET.$h/24" dev eth0 && ip netns exec "$ns" ip link set eth0 up &&
        ip netns exec "$ns" ip link set lo up || { failed "hosts: cannot wire host $h"; exit 1; }
done
# The launcher agent: `agent HOST COMMAND...` runs COMMAND on HOST (h1, h2) as ssh
# would, inside its namespace, under its own hostname.
cat >"$tmp/agent" <<EOF
#!/bin/sh
host=\$1; shift
case \$host in h1) ns=$NS1 ;; h2) ns=$NS2 ;; *) echo "agent: unknown host \$host" >&2; exit 1 ;; esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$host; \$*"
EOF
chmod +x "$tmp/agent"
printf 'h1 slots=2\nh2 slots=2\n' >"$tmp/hosts"
# The README's cluster command, plus what these hosts need: the agent, TCP on their
# network, and the daemons' keepalive so that a lost host is noticed in seconds.
CLUSTER=(mpirun --allow-run-as-root --oversubscribe --hostfile "$tmp/hosts" -np 4 --map-by ppr:2:node
         --bind-to none --mca plm_rsh_agent "$tmp/agent" --mca btl tcp,self
         --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24"
         --mca oob_tcp_keepalive_time 1 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 2)
fortunes_data
FTA=$(cd "$(dirname "$FT")" && pwd)/$(basename "$FT")
TIMEOUT=8
common=(--data.train "$tmp/data/train_*.bin" --data.shuffle true
        --model.hidden_size 64 --model.intermediate_size 128 --model.num_hidden_layers 2
        --model.num_attention_heads 4 --model.num_key_value_heads 2
        --training.seq_length 32 --training.global_batch_size 8 --training.micro_batch_size 4
        --training.lr 2e-3 --training.min_lr 2e-3 --training.warmup_steps 0
        --training.threads 1 --training.peak_flops 1e10 --parallel.timeout_s $TIMEOUT)
layout=(--parallel.tp 2 --parallel.sequence_parallel true --parallel.pp 2)
losses() { sed -nE 's/.*"step": ([0-9]+), "loss": ([^,]+), "lr": [^,]+, "grad_norm": ([^,]+),.*/\1 \2 \3/p' "$1"; }
link_bytes() { cat "/sys/class/net/${NS2}r/statistics/rx_bytes"; }

# --- 1. across the hosts = one rank ------------------------------------------------------
"$FTA" train "${common[@]}" --training.steps 12 --logging.metrics "$tmp/one.jsonl" >"$tmp/one.log" 2>&1 ||
    { failed "hosts: the 1-rank reference failed"; exit 1; }
before=$(link_bytes)
if "${CLUSTER[@]}" "$FTA" train "${common[@]}" "${layout[@]}" --training.steps 12 --logging.verbose true \
       --logging.metrics "$tmp/two.jsonl" >"$tmp/two.log" 2>&1; then
    crossed=$(( $(link_bytes) - before ))
    worst=$(paste <(losses "$tmp/one.jsonl") <(losses "$tmp/two.jsonl") | awk '
        { for (i = 2; i <= 3; i++) { d = $i - $(i + 3); if (d < 0) d = -d; s = $i < 0 ? -$i : $i
          if (d / s > w) w = d / s } n++ } END { if (n != 12) w = 1; printf "%.2g", w }')
    hostsof=$(grep -c '^rank [0-9]: ' "$tmp/two.log")
    if awk -v w="$worst" 'BEGIN { exit !(w <= 1e-5) }' && [ "$crossed" -gt 100000 ]; then
        pass "hosts: tp 2 x pp 2 over 2 hosts (pipeline across them, $crossed bytes over host 2's link) = 1 rank, worst relative difference $worst over 12 steps"
    else
        failed "hosts: across 2 hosts vs 1 rank: worst $worst, $crossed bytes crossed, $hostsof ranks reported"
    fi
else
    failed "hosts: the 2-host run failed: $(grep -m3 -i -E 'error|orte' "$tmp/two.log" | tr '\n' ' ')"
fi

# run_and_fault NAME FAULT: start a long 2-host run, after 5 steps make FAULT happen,
# then wait for the job's end; sets rc and secs (from the fault to the end).
run_and_fault() {
    local name=$1 fault=$2; shift 2
    "${CLUSTER[@]}" "$FTA" train "${common[@]}" "${layout[@]}" --training.steps 100000 "$@" \
        --logging.metrics "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1 &
    local pid=$!
    for _ in $(seq 1 6000); do [ -f "$tmp/$name.jsonl" ] && [ "$(grep -c '"loss":' "$tmp/$name.jsonl")" -ge 5 ] && break; sleep 0.01; done
    local t0; t0=$(date +%s.%N)
    eval "$fault"
    wait "$pid"; rc=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}

# --- 2. a link cut ------------------------------------------------------------------------
run_and_fault cut 'ip link set "${NS2}r" down'
ip link set "${NS2}r" up
why=$(grep -m1 -E 'lost communication with a remote daemon|has not finished after parallel.timeout_s' "$tmp/cut.log")
node=$(grep -m1 -o -E 'on node h2|on the [a-z ]+ group' "$tmp/cut.log")
if [ "$rc" -ne 0 ] && awk -v s="$secs" -v t=$TIMEOUT 'BEGIN { exit !(s <= t + 10) }' && [ -n "$why" ] && [ -n "$node" ]; then
    pass "hosts: host 2's link cut: the job ended (exit $rc) ${secs} s later naming it: ${why# *} ($node)"
else
    failed "hosts: link cut: exit $rc after ${secs} s: $(grep -v '^step' "$tmp/cut.log" | grep -v '^$' | tail -4 | tr '\n' ' ')"
fi
ip netns pids "$NS2" | xargs -r kill -9 2>/dev/null; ip netns pids "$NS1" | xargs -r kill -9 2>/dev/null

# --- 3. a host killed, then the resume ----------------------------------------------------
run_and_fault kill 'ip netns pids "$NS2" | xargs -r kill -9' --checkpoint.dir "$tmp/ck" --checkpoint.every 2
# Which of Open MPI's reports comes first depends on who notices: mpirun losing the
# host's daemon, or a rank on host 1 failing to reach a rank of host 2 (naming its
# address). Any of them, within the time limit, is the job ending as it should.
why=$(grep -m1 -E 'lost communication with a remote daemon|peer process has unexpectedly disconnected|exited on signal|has not finished after parallel.timeout_s|unable to reliably start one or more daemons|connect\(\) to [0-9.]+:[0-9]+ failed' "$tmp/kill.log" | sed 's/^ *//')
if [ "$rc" -ne 0 ] && awk -v s="$secs" -v t=$TIMEOUT 'BEGIN { exit !(s <= t + 10) }' && [ -n "$why" ]; then
    who=$(grep -m1 -o -E 'on node h2|connect\(\) to [0-9.]+' "$tmp/kill.log")
    pass "hosts: host 2 killed (kill -9, every process): the job ended (exit $rc) ${secs} s later: $why${who:+ ($who, host 2)}"
else
    failed "hosts: host killed: exit $rc after ${secs} s: $(grep -v '^step' "$tmp/kill.log" | grep -v '^$' | tail -4 | tr '\n' ' ')"
fi
ip netns pids "$NS1" | xargs -r kill -9 2>/dev/null
k=$(ls "$tmp/ck" 2>/dev/null | grep -E '^step_[0-9]+$' | sort | tail -n 1); k=${k#step_}; k=$((10#${k:-0}))
n=$((k + 6))
if [ "$k" -gt 0 ] &&
   "${CLUSTER[@]}" "$FTA" train "${common[@]}" "${layout[@]}" --training.steps $n --checkpoint.dir "$tmp/ck" \
       --checkpoint.resume true --logging.metrics "$tmp/res.jsonl" >"$tmp/res.log" 2>&1 &&
   "${CLUSTER[@]}" "$FTA" train "${common[@]}" "${layout[@]}" --training.steps $n \
       --logging.metrics "$tmp/ref.jsonl" >"$tmp/ref.log" 2>&1 &&
   [ "$(losses "$tmp/res.jsonl")" = "$(losses "$tmp/ref.jsonl" | awk -v k="$k" '$1 > k')" ] &&
   [ "$(losses "$tmp/res.jsonl" | wc -l)" -eq 6 ]; then
    pass "hosts: resumed on both hosts from step $k: steps $((k + 1))..$n equal an uninterrupted run bit for bit"
else
    failed "hosts: resume after the kill (from step $k): $(grep -m2 -i error "$tmp/res.log" "$tmp/ref.log" | tr '\n' ' ')"
fi
exit $fail
