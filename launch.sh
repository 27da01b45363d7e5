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
usage: ./launch.sh [up] [options] [settings]   start everything (foreground; Ctrl-C stops it all)
       ./launch.sh stop [--data-dir DIR]       stop everything a previous ./launch.sh started
       ./launch.sh status [--data-dir DIR]

options of this script:
  --replicas N       replicas of the simulated fleet                 (default: 4)
  --vllm-arg ARG     extra argument for every vLLM replica, e.g. --vllm-arg --load-format=dummy (repeatable)
  --demo-count N     clips in the generated demo library when no --clip-root is given (default: 24)
  --detach           start everything and return (stop later with ./launch.sh stop)
  --no-install       do not pip-install missing Python packages
  --dry-run          print every command instead of running it
  -h, --help         this help

examples:
  ./launch.sh                                  # demo library + simulated fleet + app on http://127.0.0.1:7860
  ./launch.sh --clip-root /data/clips --fleet-mode gpu --gpus 0,1,2,3,4,5,6,7
  ./launch.sh --fleet-urls http://10.0.0.5:30000    # use a fleet that is already running
  ./launch.sh --port 7870 --fleet-port 9000 --router-port 31000 --router-prometheus-port 29100  # other ports
  python -m serving.fleet_key show --data-dir var         # on the head, once: the key the nodes require
  python -m serving.fleet_key set --data-dir var          # on each GPU node: paste it
  ./launch.sh --role node --replica-host 10.0.0.5 --media-url-base http://10.0.0.1:7860   # on each GPU node
  ./launch.sh --role head --host 10.0.0.1 --worker-urls http://10.0.0.5:8000,http://10.0.0.5:8001
  ./launch.sh stop

Each setting below reaches every command this script runs (declared once, in data/settings.py):
EOF
  "$PY" -m data.settings help
}

cmd=up
case "${1:-}" in up|stop|status) cmd=$1; shift ;; esac

REPLICAS=${CW_REPLICAS:-}
VLLM_ARGS=()
DEMO_COUNT=${CW_DEMO_COUNT:-24}
DETACH=0
INSTALL=1
DRY=0
HELP=0
SETTING_ARGS=()   # --data-dir, --port, ...: read by `python -m data.settings env` below
while [ $# -gt 0 ]; do
  case "$1" in
    --replicas=*|--vllm-arg=*|--demo-count=*) set -- "${1%%=*}" "${1#*=}" "${@:2}"; continue ;;
    --replicas|--vllm-arg|--demo-count)
      [ $# -ge 2 ] || { echo "launch.sh: $1 needs a value (see ./launch.sh --help)" >&2; exit 2; }
      case "$1" in
        --replicas) REPLICAS=$2 ;;
        --vllm-arg) VLLM_ARGS+=("--vllm-arg=$2") ;;
        --demo-count) DEMO_COUNT=$2 ;;
      esac
      shift 2 ;;
    --detach) DETACH=1; shift ;;
    --no-install) INSTALL=0; shift ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) HELP=1; shift ;;
    --*=*) SETTING_ARGS+=("$1"); shift ;;
    --*)
      [ $# -ge 2 ] || { echo "launch.sh: $1 needs a value (see ./launch.sh --help)" >&2; exit 2; }
      SETTING_ARGS+=("$1" "$2"); shift 2 ;;
    *) echo "launch.sh: unknown argument '$1' (see ./launch.sh --help)" >&2; exit 2 ;;
  esac
done

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
PY=${PYTHON:-python3}
if [ "$HELP" = 1 ]; then usage; exit 0; fi

# The settings: flags > CW_* variables > defaults, resolved (or refused with a message) by data/settings.py, which
# needs nothing but Python. Exported, so that every command below reads the same values.
DEMO=1   # no clip root given: a generated demo library in DATA_DIR/clips
[ -n "${CW_CLIP_ROOT:-}" ] && DEMO=0
for a in ${SETTING_ARGS[@]+"${SETTING_ARGS[@]}"}; do case "$a" in --clip-root|--clip-root=*) DEMO=0 ;; esac; done
resolved=$("$PY" -m data.settings env --prog ./launch.sh ${SETTING_ARGS[@]+"${SETTING_ARGS[@]}"}) || exit 2
eval "$resolved"
DATA_DIR=$CW_DATA_DIR
CLIP_ROOT=$CW_CLIP_ROOT
PORT=$CW_PORT
HOST=$CW_HOST
FLEET_MODE=$CW_FLEET_MODE
FLEET_URLS=$CW_FLEET_URLS
GPUS=$CW_GPUS
ROLE=$CW_ROLE
mkdir -p "$DATA_DIR"
RUN="$DATA_DIR/run"
LOGS="$DATA_DIR/logs"
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1

# The interpreter of the workbench's commands: $PYTHON if it has the packages, else the one the last ./launch.sh on
# this data dir ran with (RUN/python: the environment it was started from need not be active in this shell),
# else python3. None of them: PROJECT_PY stays empty; `up` installs the packages, stop and status say what to do.
PROJECT_PY=""
TRIED=()
recorded=""
[ -f "$RUN/python" ] && recorded=$(cat "$RUN/python")
for p in ${PYTHON:+"$PYTHON"} ${recorded:+"$recorded"} python3; do
  TRIED+=("$p")
  # data first: it imports sqlite-utils without pandas (data/sqlite.py), 0.4 CPU-s instead of 1.1 per launch.sh
  if "$p" -c "import data, httpx, sqlite_utils, serving.launcher" >/dev/null 2>&1; then PROJECT_PY=$p; break; fi
done
[ -n "$PROJECT_PY" ] && PY=$PROJECT_PY
no_python() {  # no_python WHAT: why WHAT cannot be done here, and what to do
  echo "launch.sh: cannot $1: no Python here can run the workbench's commands (tried: ${TRIED[*]}; each lacks" \
    "the project's packages). Activate the environment ./launch.sh was started from, or run with" \
    "PYTHON=/path/to/its/python ./launch.sh $cmd" >&2
}

say() { printf '\033[1m[launch]\033[0m %s\n' "$*"; }
run() { if [ "$DRY" = 1 ]; then printf '+ %s\n' "$*"; else "$@"; fi; }

# start NAME CMD...: run CMD in its own process group, record its pgid in RUN/NAME.pid; its output goes through a
# log sink (serving.log_sink) to LOGS/NAME.log: appended, rotated at CW_LOG_CAP, long lines cut, nothing written while
# the disk has less than CW_LOG_FREE_FLOOR free. The sink ends when CMD and its children have.
start() {
  local name=$1; shift
  if [ "$DRY" = 1 ]; then
    printf '+ setsid %s > >(%s -m serving.log_sink --log %s/%s.log) 2>&1 &\n' "$*" "$PY" "$LOGS" "$name"; return
  fi
  mkdir -p "$RUN" "$LOGS"
  setsid "$@" > >(exec setsid "$PY" -m serving.log_sink --log "$LOGS/$name.log" >/dev/null 2>&1) 2>&1 < /dev/null &
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

# stop_all: the app and the runner (by their process groups), then the fleet the launcher recorded; 1 if the fleet
# could not be stopped from here
stop_all() {
  stop_one app
  stop_one runner
  [ -f "$RUN/fleet.json" ] || return 0
  if [ -z "$PROJECT_PY" ]; then no_python "stop the fleet recorded in $RUN/fleet.json"; return 1; fi
  "$PROJECT_PY" -m serving.launcher down --data-dir "$DATA_DIR"
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
  stop) stop_all || exit 1; say "everything stopped"; exit 0 ;;
  status)
    for n in app runner; do
      if alive "$n"; then say "$n: running (pgid $(cat "$RUN/$n.pid"))"; else say "$n: not running"; fi
    done
    if [ -z "$PROJECT_PY" ]; then no_python "show the fleet's status"; exit 1; fi
    "$PROJECT_PY" -m serving.launcher status --data-dir "$DATA_DIR" || true
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

# 'auto' is resolved in one place (serving.launch.commands.launch_mode: gpu on a GPU node, else sim)
FLEET_MODE=$("$PY" -m serving.launch.commands mode "$FLEET_MODE")
# what this launch starts for the fleet: nothing (--fleet-urls), the router over the nodes (head), or replicas
START=$FLEET_MODE
[ -n "$FLEET_URLS" ] && START=none
[ "$ROLE" = head ] && START=head   # the replicas are on the GPU nodes; the head needs vllm-router, not vLLM

# installed or not, found without importing them (importing Gradio to ask took ~5 CPU-s of every launch.sh run)
NEEDED="'gradio', 'sqlite_utils', 'av', 'httpx', 'matplotlib', 're2', 'data.settings'"
if [ "$INSTALL" = 1 ] && ! "$PY" -c "import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in ($NEEDED)))" 2>/dev/null; then
  say "installing Python packages (once)"
  extra=""
  [ "$START" = gpu ] && extra="[gpu]"
  run "$PY" -m pip install -q -e ".$extra"
fi
# stop and status from another shell use the interpreter this launch runs with (see PROJECT_PY above)
if [ "$DRY" = 0 ]; then mkdir -p "$RUN"; "$PY" -c 'import sys; print(sys.executable)' >"$RUN/python"; PROJECT_PY=$PY; fi
if [ "$INSTALL" = 1 ] && { [ "$START" = sim ] || [ "$START" = head ]; } && ! command -v vllm-router >/dev/null 2>&1; then
  run "$PY" -m pip install -q "vllm-router>=0.1.17" || say "vllm-router not installed: the runner talks to the replicas directly"
fi

if [ -f "$RUN/app.pid" ] && alive app; then
  echo "launch.sh: already running (./launch.sh status; ./launch.sh stop)" >&2
  trap - EXIT; exit 1
fi

# the replica options of this script, for every role that starts replicas (all, node)
replica_args=()
[ -n "$GPUS" ] && replica_args+=(--gpus "$GPUS")
[ "$FLEET_MODE" = sim ] && [ -n "$REPLICAS" ] && replica_args+=(--replicas "$REPLICAS")
[ "$FLEET_MODE" = gpu ] && replica_args+=(${VLLM_ARGS[@]+"${VLLM_ARGS[@]}"})

if [ "$ROLE" != node ] && [ -f "$CW_DB" ]; then
  # a library that was launched as a head stays one (data.deployment): its record gives the role, and a flag that
  # contradicts it is refused with the command that changes the record
  resolved=$("$PY" -m data.deployment env) || exit 2
  eval "$resolved"
  ROLE=$CW_ROLE
  [ "$ROLE" = head ] && START=head
fi

if [ "$ROLE" = node ]; then
  # a GPU node: MPS and the replicas, nothing else; the head sends work and clips (signed URLs) to them
  [ -z "$FLEET_URLS" ] || { echo "launch.sh: --role node starts replicas (--fleet-mode gpu or sim), it takes no --fleet-urls" >&2; exit 2; }
  say "starting the $FLEET_MODE replicas of this node"
  node_args=(--data-dir "$DATA_DIR" --fleet-mode "$FLEET_MODE" --role node ${replica_args[@]+"${replica_args[@]}"})
  [ "$DRY" = 1 ] && node_args+=(--dry-run)
  "$PY" -m serving.launcher up "${node_args[@]}"
  if [ "$DRY" = 1 ]; then say "dry run: nothing was started"; exit 0; fi
  say "node up; give the head the worker URLs above (./launch.sh stop --data-dir $DATA_DIR to stop)"
  if [ "$DETACH" = 1 ]; then exit 0; fi
  while [ -f "$RUN/fleet.json" ]; do sleep 5; done
  exit 1
fi

FRESH=0   # the first launch of this data dir: no library before this launch ingests one
[ -f "$CW_DB" ] || FRESH=1
if [ "$DEMO" = 1 ] && [ -z "$(ls -A "$CLIP_ROOT" 2>/dev/null)" ]; then
  say "generating a demo library of $DEMO_COUNT synthetic clips in $CLIP_ROOT"
  run "$PY" -m data.demo "$CLIP_ROOT" --count "$DEMO_COUNT"
fi
say "ingesting $CLIP_ROOT"
run "$PY" -m data.ingest "$CLIP_ROOT" --data-dir "$DATA_DIR"
if [ "$FRESH" = 1 ] && [ "$DEMO" = 1 ] && [ "$START" = sim ]; then
  # a newcomer's first page has captions to review: the demo library's own job, listed on Jobs (once)
  say "starting a captioning job over the demo library (first launch)"
  run "$PY" -m serving.demo_job --data-dir "$DATA_DIR"
fi

case "$START" in
  head)
    say "starting the router over the GPU nodes' replicas"
    head_args=(--data-dir "$DATA_DIR" --role head)
    [ "$DRY" = 1 ] && head_args+=(--dry-run)
    "$PY" -m serving.launcher up "${head_args[@]}"
    FLEET_URLS=$("$PY" -m serving.launcher url --data-dir "$DATA_DIR" --role head)
    say "the GPU nodes' replicas require this head's fleet key: python -m serving.fleet_key show --data-dir $DATA_DIR"
    ;;
  sim|gpu)
    say "starting the $FLEET_MODE fleet"
    fleet_args=(--data-dir "$DATA_DIR" --clip-root "$CLIP_ROOT" --fleet-mode "$FLEET_MODE" ${replica_args[@]+"${replica_args[@]}"})
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
