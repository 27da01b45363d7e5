#!/usr/bin/env bash
# The operator's entry point. Brings up the whole workbench on this machine:
#   GPU node:      CUDA MPS, one vLLM replica per GPU (NVDEC decoding), vllm-router, the job runner, the web app
#   anywhere else: the simulated fleet (loudly labelled), the job runner, the web app, a generated demo library
# Beyond one node (docs/SCALE.md): `--role node` on each GPU node (MPS + replicas only, bound where the head
# reaches them), `--role head --worker-urls ...` on the head (router over the nodes' replicas, runner, app).
# Thin by design: the logic lives in Python modules (serving.launcher, data.demo, data.ingest, serving.runner,
# webapp); this script orders them, waits for each with a deadline, and tears down what it started.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: ./launch.sh [up] [options]        start everything (foreground; Ctrl-C stops it all)
       ./launch.sh stop [--data-dir DIR] stop everything a previous ./launch.sh started
       ./launch.sh status [--data-dir DIR]

options (each also settable as an environment variable CW_<NAME>, e.g. CW_DATA_DIR):
  --data-dir DIR     database, thumbnails, logs, demo library        (default: ./var)
  --clip-root DIR    your clip library (default: DATA_DIR/clips, filled with generated demo clips on first run)
  --port N           web app port                                    (default: 7860)
  --host ADDR        web app address; anything but 127.0.0.1 requires login (default: 127.0.0.1)
  --fleet-mode MODE  what to start: auto (GPU node: real vLLM, else simulated) | sim | gpu  (default: auto)
  --fleet-urls L     use a fleet that is already running instead: URL[,URL...] of OpenAI-compatible vLLM
                     servers or a router; nothing is started for the fleet
  --gpus LIST        GPUs for replicas on a GPU node, e.g. 0,1,2,3   (default: all)
  --replicas N       replicas of the simulated fleet                 (default: 4)
  --vllm-arg ARG     extra argument for every vLLM replica, e.g. --vllm-arg --load-format=dummy (repeatable)
  --demo-count N     clips in the generated demo library             (default: 24)
  --role ROLE        all (everything here) | node (a GPU node: MPS + one replica per GPU, nothing else) |
                     head (router over --worker-urls, runner, app; clips go to the nodes as signed URLs)
                                                                     (default: all)
  --worker-urls L    head: the nodes' replica URLs, e.g. http://node1:8000,http://node1:8001,http://node2:8000
  --replica-host A   node: address replicas bind, one the head reaches (e.g. 10.0.0.5 or 0.0.0.0)
  --media-url-base U where nodes fetch clips: the app as they see it (head default: http://HOST:PORT);
                     on a node, its host becomes the replicas' --allowed-media-domains
  --allowed-media-domains L  hosts replicas may fetch clips from (default: the host of --media-url-base)
  --detach           start everything and return (stop later with ./launch.sh stop)
  --no-install       do not pip-install missing Python packages
  --dry-run          print every command instead of running it
  -h, --help         this help

examples:
  ./launch.sh                                  # demo library + simulated fleet + app on http://127.0.0.1:7860
  ./launch.sh --clip-root /data/clips --fleet-mode gpu --gpus 0,1,2,3,4,5,6,7
  ./launch.sh --fleet-urls http://10.0.0.5:30000    # use a fleet that is already running
  ./launch.sh --role node --replica-host 10.0.0.5 --media-url-base http://10.0.0.1:7860   # on each GPU node
  ./launch.sh --role head --host 10.0.0.1 --worker-urls http://10.0.0.5:8000,http://10.0.0.5:8001
  ./launch.sh stop
EOF
}

# --fleet / CW_FLEET used to mean either the mode or the URLs; old scripts keep working, with a warning
legacy_fleet() {
  case "$2" in
    auto|sim|gpu) echo "launch.sh: $1 is deprecated: write --fleet-mode $2 (CW_FLEET_MODE)" >&2; FLEET_MODE=$2 ;;
    *) echo "launch.sh: $1 is deprecated: write --fleet-urls $2 (CW_FLEET_URLS)" >&2; FLEET_URLS=$2 ;;
  esac
}

cmd=up
case "${1:-}" in up|stop|status) cmd=$1; shift ;; esac

DATA_DIR=${CW_DATA_DIR:-var}
CLIP_ROOT=${CW_CLIP_ROOT:-}
PORT=${CW_PORT:-7860}
HOST=${CW_HOST:-127.0.0.1}
FLEET_MODE=${CW_FLEET_MODE:-auto}
FLEET_URLS=${CW_FLEET_URLS:-}
GPUS=${CW_GPUS:-}
REPLICAS=${CW_REPLICAS:-}
VLLM_ARGS=()
DEMO_COUNT=${CW_DEMO_COUNT:-24}
ROLE=${CW_ROLE:-all}
DETACH=0
INSTALL=1
DRY=0
if [ -n "${CW_FLEET:-}" ]; then legacy_fleet "CW_FLEET=$CW_FLEET" "$CW_FLEET"; fi
unset CW_FLEET   # translated here: the Python commands below get the new names
while [ $# -gt 0 ]; do
  case "$1" in
    --data-dir) DATA_DIR=$2; shift 2 ;;
    --clip-root) CLIP_ROOT=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --host) HOST=$2; shift 2 ;;
    --fleet-mode) FLEET_MODE=$2; shift 2 ;;
    --fleet-urls) FLEET_URLS=$2; shift 2 ;;
    --fleet) legacy_fleet "--fleet $2" "$2"; shift 2 ;;
    --gpus) GPUS=$2; shift 2 ;;
    --replicas) REPLICAS=$2; shift 2 ;;
    --vllm-arg) VLLM_ARGS+=("--vllm-arg=$2"); shift 2 ;;
    --demo-count) DEMO_COUNT=$2; shift 2 ;;
    --role) ROLE=$2; shift 2 ;;
    --worker-urls) export CW_WORKER_URLS=$2; shift 2 ;;
    --replica-host) export CW_REPLICA_HOST=$2; shift 2 ;;
    --media-url-base) export CW_MEDIA_URL_BASE=$2; shift 2 ;;
    --allowed-media-domains) export CW_ALLOWED_MEDIA_DOMAINS=$2; shift 2 ;;
    --detach) DETACH=1; shift ;;
    --no-install) INSTALL=0; shift ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "launch.sh: unknown option '$1' (see ./launch.sh --help)" >&2; exit 2 ;;
  esac
done

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
PY=${PYTHON:-python3}
mkdir -p "$DATA_DIR"
DATA_DIR=$(cd "$DATA_DIR" && pwd)
RUN="$DATA_DIR/run"
LOGS="$DATA_DIR/logs"
DEMO=0
if [ -z "$CLIP_ROOT" ]; then CLIP_ROOT="$DATA_DIR/clips"; DEMO=1; fi
case "$ROLE" in all|node|head) ;; *) echo "launch.sh: --role must be all, node or head, not '$ROLE'" >&2; exit 2 ;; esac
case "$FLEET_MODE" in auto|sim|gpu) ;; *) echo "launch.sh: --fleet-mode must be auto, sim or gpu, not '$FLEET_MODE' (a running fleet: --fleet-urls URL)" >&2; exit 2 ;; esac
export CW_DATA_DIR="$DATA_DIR" CW_CLIP_ROOT="$CLIP_ROOT" CW_PORT="$PORT" CW_HOST="$HOST" CW_ROLE="$ROLE"
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1

say() { printf '\033[1m[launch]\033[0m %s\n' "$*"; }
run() { if [ "$DRY" = 1 ]; then printf '+ %s\n' "$*"; else "$@"; fi; }

# start NAME CMD...: run CMD in its own process group, log to LOGS/NAME.log, record its pgid in RUN/NAME.pid
start() {
  local name=$1; shift
  if [ "$DRY" = 1 ]; then printf '+ setsid %s > %s/%s.log 2>&1 &\n' "$*" "$LOGS" "$name"; return; fi
  mkdir -p "$RUN" "$LOGS"
  setsid "$@" >"$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! >"$RUN/$name.pid"
  STARTED+=("$name")
}

alive() { [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }

# stop_one NAME: TERM the process group, then KILL it after a grace period
stop_one() {
  local name=$1 pid
  [ -f "$RUN/$name.pid" ] || return 0
  pid=$(cat "$RUN/$name.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    say "stopped $name"
  fi
  rm -f "$RUN/$name.pid"
}

stop_all() {
  stop_one app
  stop_one runner
  if [ -d "$RUN" ]; then "$PY" -m serving.launcher down --data-dir "$DATA_DIR" >/dev/null 2>&1 || true; fi
}

# wait_http NAME URL SECONDS: poll URL until it answers, failing fast if NAME's process died
wait_http() {
  local name=$1 url=$2 deadline=$((SECONDS + $3))
  [ "$DRY" = 1 ] && return 0
  while [ $SECONDS -lt $deadline ]; do
    if ! alive "$name"; then
      echo "launch.sh: $name exited during start-up; last lines of $LOGS/$name.log:" >&2
      tail -n 20 "$LOGS/$name.log" >&2 || true
      return 1
    fi
    if "$PY" - "$url" <<'PYEOF' 2>/dev/null; then return 0; fi
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=2)
PYEOF
    sleep 0.5
  done
  echo "launch.sh: $name did not answer at $url within $3 s (see $LOGS/$name.log)" >&2
  return 1
}

case "$cmd" in
  stop) stop_all; say "everything stopped"; exit 0 ;;
  status)
    for n in app runner; do
      if alive "$n"; then say "$n: running (pgid $(cat "$RUN/$n.pid"))"; else say "$n: not running"; fi
    done
    "$PY" -m serving.launcher status --data-dir "$DATA_DIR" || true
    exit 0 ;;
esac

# --- up ---------------------------------------------------------------------------------------------------------
STARTED=()
on_exit() {
  local rc=$?
  if [ "$DETACH" = 0 ] || [ $rc -ne 0 ]; then
    [ "$DRY" = 1 ] || { say "stopping what this launch started"; stop_all; }
  fi
}
trap on_exit EXIT
trap 'exit 130' INT TERM

gpu_node=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then gpu_node=1; fi
if [ "$FLEET_MODE" = auto ]; then
  if [ $gpu_node = 1 ]; then FLEET_MODE=gpu; else FLEET_MODE=sim; fi
fi
# what this launch starts for the fleet: nothing (--fleet-urls), the router over the nodes (head), or replicas
START=$FLEET_MODE
[ -n "$FLEET_URLS" ] && START=none
[ "$ROLE" = head ] && START=head   # the replicas are on the GPU nodes; the head needs vllm-router, not vLLM

if [ "$INSTALL" = 1 ] && ! "$PY" -c "import gradio, sqlite_utils, av, httpx, data.settings" 2>/dev/null; then
  say "installing Python packages (once)"
  extra=""
  [ "$START" = gpu ] && extra="[gpu]"
  run "$PY" -m pip install -q -e ".$extra"
fi
if [ "$INSTALL" = 1 ] && { [ "$START" = sim ] || [ "$START" = head ]; } && ! command -v vllm-router >/dev/null 2>&1; then
  run "$PY" -m pip install -q "vllm-router>=0.1.17" || say "vllm-router not installed: the runner talks to the replicas directly"
fi

if [ -f "$RUN/app.pid" ] && alive app; then
  echo "launch.sh: already running (./launch.sh status; ./launch.sh stop)" >&2
  trap - EXIT; exit 1
fi

if [ "$ROLE" = node ]; then
  # a GPU node: MPS and the replicas, nothing else; the head sends work and clips (signed URLs) to them
  [ -z "$FLEET_URLS" ] || { echo "launch.sh: --role node starts replicas (--fleet-mode gpu or sim), it takes no --fleet-urls" >&2; exit 2; }
  say "starting the $FLEET_MODE replicas of this node"
  node_args=(--data-dir "$DATA_DIR" --fleet-mode "$FLEET_MODE" --role node)
  [ -n "$GPUS" ] && node_args+=(--gpus "$GPUS")
  [ "$DRY" = 1 ] && node_args+=(--dry-run)
  "$PY" -m serving.launcher up "${node_args[@]}"
  if [ "$DRY" = 1 ]; then say "dry run: nothing was started"; exit 0; fi
  say "node up; give the head the worker URLs above (./launch.sh stop --data-dir $DATA_DIR to stop)"
  if [ "$DETACH" = 1 ]; then exit 0; fi
  while [ -f "$RUN/fleet.json" ]; do sleep 5; done
  exit 1
fi

if [ "$DEMO" = 1 ] && [ -z "$(ls -A "$CLIP_ROOT" 2>/dev/null)" ]; then
  say "generating a demo library of $DEMO_COUNT synthetic clips in $CLIP_ROOT"
  run "$PY" -m data.demo "$CLIP_ROOT" --count "$DEMO_COUNT"
fi
say "ingesting $CLIP_ROOT"
run "$PY" -m data.ingest "$CLIP_ROOT" --data-dir "$DATA_DIR"

case "$START" in
  head)
    say "starting the router over the GPU nodes' replicas"
    head_args=(--data-dir "$DATA_DIR" --role head)
    [ "$DRY" = 1 ] && head_args+=(--dry-run)
    "$PY" -m serving.launcher up "${head_args[@]}"
    FLEET_URLS=$("$PY" -m serving.launcher url --data-dir "$DATA_DIR" --role head)
    ;;
  sim|gpu)
    say "starting the $FLEET_MODE fleet"
    fleet_args=(--data-dir "$DATA_DIR" --clip-root "$CLIP_ROOT" --fleet-mode "$FLEET_MODE")
    [ -n "$GPUS" ] && fleet_args+=(--gpus "$GPUS")
    [ "$FLEET_MODE" = sim ] && [ -n "$REPLICAS" ] && fleet_args+=(--replicas "$REPLICAS")
    [ "$FLEET_MODE" = gpu ] && fleet_args+=(${VLLM_ARGS[@]+"${VLLM_ARGS[@]}"})
    [ "$DRY" = 1 ] && fleet_args+=(--dry-run)
    "$PY" -m serving.launcher up "${fleet_args[@]}"
    FLEET_URLS=$("$PY" -m serving.launcher url --data-dir "$DATA_DIR" --fleet-mode "$FLEET_MODE")
    ;;
esac
say "fleet: $FLEET_URLS"
# the mode goes to the app only when this launch started the fleet: it shows the simulated banner from the
# first paint; a fleet given by URL is asked (its /metrics say whether it is simulated)
mode_args=()
case "$START" in sim|gpu) mode_args=(--fleet-mode "$FLEET_MODE") ;; esac

# under a supervisor: a runner that dies (a bug, the OOM killer, a database error) is restarted (R12)
start runner "$PY" -m serving.supervisor --name runner --data-dir "$DATA_DIR" -- \
  "$PY" -m serving.runner --data-dir "$DATA_DIR" --fleet-urls "$FLEET_URLS"

if [ "$DRY" = 0 ] && [ "${CW_AUTH:-on}" != off ]; then
  "$PY" -m webapp.accounts --data-dir "$DATA_DIR" ensure-admin
fi
start app "$PY" -m webapp --data-dir "$DATA_DIR" --fleet-urls "$FLEET_URLS" ${mode_args[@]+"${mode_args[@]}"} \
  --port "$PORT" --host "$HOST"
probe_host=$HOST
case "$HOST" in 0.0.0.0|::|"") probe_host=127.0.0.1 ;; *:*) probe_host="[$HOST]" ;; esac
wait_http app "http://$probe_host:$PORT/healthz" 120
# R14: /healthz answering is not enough: another workbench's app on this port answers it too
if [ "$DRY" = 0 ] && ! "$PY" -m serving.launcher owns --data-dir "$DATA_DIR" --pgid "$(cat "$RUN/app.pid")" --listen-port "$PORT"; then
  exit 1
fi
if [ "$DRY" = 1 ]; then say "dry run: nothing was started"; exit 0; fi
say "the workbench is up: http://$HOST:$PORT   (logs: $LOGS; stop: ./launch.sh stop)"
[ "$START" = sim ] && say "captions come from the SIMULATED fleet: they are marked [SIMULATED] and mean nothing"

if [ "$DETACH" = 1 ] || [ "$DRY" = 1 ]; then exit 0; fi
# foreground: stay until the app exits or Ctrl-C, then tear everything down (trap)
while alive app; do sleep 2; done
say "the app exited; see $LOGS/app.log"
exit 1
