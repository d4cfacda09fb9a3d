#!/usr/bin/env bash
# Gateway overhead, in one run: the same closed-loop load straight to one
# enginesim that answers at once (--time-scale 0), through nginx (a plain
# keepalive reverse proxy: the reference for one proxy hop), and through
# kvgate with its default policy. Everything listens on 127.0.0.1.
#
#   scripts/bench-overhead.sh [concurrency] [duration] [extra loadgen flags...]
#
# Prints one table row per target and writes bench-overhead.json.
set -euo pipefail
cd "$(dirname "$0")/.."
CONC=${1:-32}
DUR=${2:-15s}
shift $(( $# > 2 ? 2 : $# )) || true
EXTRA=("$@")

SIM_PORT=19101 NGINX_PORT=19102 GW_PORT=19103
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

make -s build
./bin/enginesim --listen 127.0.0.1:$SIM_PORT --model sim --time-scale 0 >"$work/sim.log" 2>&1 &
pids+=($!)

cat >"$work/nginx.conf" <<CONF
worker_processes auto;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  upstream sim { server 127.0.0.1:$SIM_PORT; keepalive 256; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / {
      proxy_pass http://sim;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
CONF
nginx -c "$work/nginx.conf" -p "$work"

cat >"$work/kvgate.yaml" <<CONF
listen: 127.0.0.1:$GW_PORT
workers:
  - id: sim
    url: http://127.0.0.1:$SIM_PORT
    engine: vllm
    max_running: 64
CONF
env ${GATEWAY_ENV:-} ./bin/gateway --config "$work/kvgate.yaml" >"$work/gw.out" 2>"$work/gw.log" &
pids+=($!)

for url in "http://127.0.0.1:$SIM_PORT/health" "http://127.0.0.1:$NGINX_PORT/health" "http://127.0.0.1:$GW_PORT/readyz"; do
  for _ in $(seq 100); do curl -sf "$url" >/dev/null && break; sleep 0.1; done
done

run() { # name url
  ./bin/loadgen --url "$2/v1" --model sim --concurrency "$CONC" --duration "$DUR" --max-tokens 16 \
    --prompt-tokens 256 --json "$work/$1.json" "${EXTRA[@]}" >/dev/null 2>&1
}
# Warm up each path once, then measure each in turn.
for t in direct:$SIM_PORT nginx:$NGINX_PORT kvgate:$GW_PORT; do
  ./bin/loadgen --url "http://127.0.0.1:${t#*:}/v1" --concurrency 8 --requests 500 >/dev/null 2>&1
done
run direct "http://127.0.0.1:$SIM_PORT"
run nginx "http://127.0.0.1:$NGINX_PORT"
run kvgate "http://127.0.0.1:$GW_PORT"

python3 - "$work" "$CONC" "$DUR" <<'PY'
import json, sys
work, conc, dur = sys.argv[1], sys.argv[2], sys.argv[3]
res = {n: json.load(open(f"{work}/{n}.json")) for n in ("direct", "nginx", "kvgate")}
d = res["direct"]
print(f"closed loop, concurrency {conc}, {dur} each")
print(f"{'target':8} {'req/s':>9} {'vs direct':>9} {'vs nginx':>9} {'p50 ms':>8} {'p99 ms':>8} {'+p50 ms':>8} {'+p99 ms':>8} {'errors':>7}")
for n, r in res.items():
    print(f"{n:8} {r['requests_per_s']:9.0f} {r['requests_per_s']/d['requests_per_s']:9.2f} "
          f"{r['requests_per_s']/res['nginx']['requests_per_s']:9.2f} {r['e2e_p50']*1e3:8.2f} {r['e2e_p99']*1e3:8.2f} "
          f"{(r['e2e_p50']-d['e2e_p50'])*1e3:8.2f} {(r['e2e_p99']-d['e2e_p99'])*1e3:8.2f} {sum(r['errors'].values()):7d}")
json.dump(res, open("bench-overhead.json", "w"), indent=1)
PY
