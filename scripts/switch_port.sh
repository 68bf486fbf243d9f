# Sourced by the scripts that start trim-switch in UDP mode (demo_switch.sh, fabric_bench.sh,
# run_ddp.sh). switch_port LOG PID: prints the port the switch started as PID (stdout to LOG)
# listens on, from its first line ({"event":"listening","port":N}). Returns 1 when the switch
# exits first, 2 when it says nothing within 5 s.
switch_port() {
  local log=$1 pid=$2 port _
  for _ in $(seq 500); do
    # (|| true: until the background shell has created the log, head fails, and set -e would exit)
    port=$(head -1 "$log" 2>/dev/null | sed -n 's/^{"event":"listening","port":\([0-9][0-9]*\)}$/\1/p' || true)
    [[ -n $port ]] && { echo "$port"; return 0; }
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.01
  done
  return 2
}
