#!/usr/bin/env bash
# Steps of a GPU session on the lent, offline H200 machine (see docs/GPU.md and serving/gpu_bundle/README.md).
# Made here first: the bundle (serving/gpu_bundle/build_bundle.sh .gpu) and the project's wheels
# (python3 serving/gpu_bundle/fetch_wheels.py: .whl and .whl2), all three ignored by git and carried by name.
# Each step is one device call; the machine keeps /tmp only while it stays warm, so run them back to back.
#   stage K   copy bundle part K (carried as .gpu/pK) to /tmp/stage; `stage Ka`, then `stage Kb`: its two halves (a
#             part of 55 MiB and the working tree together pass the 64 MiB a call carries once the tree is over
#             ~8 MiB, as on 2026-12-02: run `split` here first, which makes .gpu/pKa and .gpu/pKb)
#   pregen    the first call, before staging (carry .whl: PyAV): install the wheels and start generating node_run's
#             clip cache (PREGEN clips, default 80, <= 12 s each) in the background, detached, from a copy of the
#             tree, so the generation overlaps the staging calls; threads/workload wait for it to finish, and
#             `CW_GPU_CLIPS_FROM=/tmp/clips-node/realistic CW_GPU_CLIPS=N gputest` takes its first N clips
#   setup     unpack vLLM, install carried wheels (.whl, and .whl2 when carried), write the dummy Qwen3-VL-8B model
#   clips     generate the benchmark clips (distinct 1080p, H.264 + HEVC) and a few hostile ones
#   gputest   the gpu-marked test with our launcher/runner on GPUS (default 0; "0,1": two replicas behind the
#             router; TOPOLOGY=nodehead: a --role node and a --role head on two loopback addresses, the README's
#             terminal command on the head, real vLLM's answers to http media), extra replica flags in VLLM_ARGS,
#             CAPTION_CHARS bounds the caption (random weights fill
#             it), a CPU profile beside it (benchmarks/cpu_profile.py); clips are generated into /tmp/gpuclips by
#             the first run (while vLLM starts) and reused by later ones -> $OUT (report.json, vllm-answers.json,
#             cpu-profile.json, logs)
#   bench     NVDEC vs OpenCV side by side (+ real vLLM's answers to bad input, metric names) -> $OUT
#   sweep C   more configurations (comma-separated names from benchmarks/bench_fleet.py CONFIGS) -> $OUT
#   node S .. a stage of benchmarks/node_run.py (clips, launch, gputest, scaling, kill, threads, workload, report,
#             all) with the dummy model, clips cached in /tmp/clips-node, reports in $OUT (extra arguments go to
#             node_run.py)
#   peak      the GPU's bf16 and FP8 matmul peaks (benchmarks/gpu_peak.py) -> $OUT/peak.json
#   perfclips the 128 realistic clips `threads` and `workload` share (node_run's clip cache; ~3 min the first time)
#   threads   a fresh replica per CPU budget (THREADS, default 1,2,4,budget), the same 120 clips through our runner
#             against each: clips/s, core-s per clip, cores busy, % of peak -> $OUT/threads.{json,md}
#   head ...  one head's runner on this machine's cores, the GPU idle (benchmarks/bench_runner.py --head and the
#             given arguments, e.g. --rates 112,224,448 --switch both) -> $OUT/head.log
#   workload  one replica, a job of 120 clips per frames x pixels point (8,16,32 x the recipe's, half, a quarter)
#             -> $OUT/workload.{json,md}, $OUT/work-per-clip.{json,png} (copy both over docs/)
set -euo pipefail
step=${1:?step}
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
export PATH=$PATH:/usr/local/nvidia/bin
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# what an earlier call started detached and left behind (a GPU test cut by its timeout leaves its node's replica
# holding the GPU's memory, and every later replica then fails to start): stopped through launch.sh, by the data
# dir whose pid files name the process groups
stop_leftovers() {
  local d
  for d in /tmp/pytest-of-*/pytest-*/test_gpu_fleet_*/{node,head} /tmp/node-work/*/; do
    [ -d "$d" ] && ./launch.sh stop --data-dir "$d" >/dev/null 2>&1 || true
  done
  # node_run's replicas and routers keep no pid files, and vLLM renames its processes (VLLM::EngineCore,
  # VLLM::APIServer_N): a call cut at its limit left one holding the GPU and its port, and the next calls measured
  # it (2026-12-03). On this lent machine every vLLM is ours. The brackets keep each pattern from matching this
  # script's own command line, which names none of them.
  pkill -9 -f "VLLM:[:]" || true
  pkill -9 -f "vllm.entrypoints.cli.mai[n]" || true
  pkill -9 -f "vllm[-_]route[r]" || true
}
case "$step" in gputest|bench|sweep|node|threads|workload) stop_leftovers ;; esac
case "$step" in
  split)  # here, before the session: each part of 55 MiB in two halves, .gpu/pKa and .gpu/pKb
    for d in .gpu/p[0-9]; do
      f=$(ls "$d"); k=${d#.gpu/p}
      [ "$(stat -c %s "$d/$f")" -gt 30000000 ] || continue
      mkdir -p "$d"a "$d"b && split -b 28500000 -d "$d/$f" "/tmp/split-$k-"
      mv "/tmp/split-$k-00" "$d"a/"$f" && mv "/tmp/split-$k-01" "$d"b/"$f"
    done
    ls -d .gpu/p* ;;
  stage)  # K: a whole part; Ka then Kb: its two halves, joined in that order
    mkdir -p /tmp/stage
    case "$2" in
      *a) cat ".gpu/p$2/"* >"/tmp/stage/part${2%a}" ;;
      *b) cat ".gpu/p$2/"* >>"/tmp/stage/part${2%b}" ;;
      *) cp ".gpu/p$2/"* /tmp/stage/ ;;
    esac
    ls -la /tmp/stage ;;
  pregen)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    rm -rf /tmp/pregen-src && cp -r . /tmp/pregen-src && touch /tmp/pregen.started
    d=/tmp/clips-node/realistic n=${PREGEN:-80}
    # what benchmarks/node/clips.py's clip_library does, with its .complete marker, then pregen.done
    # at most 12 s each, as the GPU test's own (~1.2 clips/s on 16 cores), so that the test can take them
    # (CW_GPU_CLIPS_FROM=/tmp/clips-node/realistic) instead of generating its own beside them
    (cd /tmp/pregen-src && setsid bash -c "python3 -m data.demo $d/library --count $n --realistic --no-broken \
      --max-seconds 12 --workers $(nproc) && python3 -m data.demo $d/hostile --hostile \
      && echo '{\"clips\": $n, \"seconds\": 0, \"generated_now\": $n}' > $d/.complete; touch /tmp/pregen.done" \
      >/tmp/pregen.log 2>&1 < /dev/null &)
    sleep 5; cat /tmp/pregen.log ;;
  setup)
    bash .gpu/gpu_setup.sh
    for w in .whl .whl2 .whl3 .whl4; do
      if ls $w/*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $w/*.whl
      fi
    done
    python3 -c "import av, vllm; print('av', av.__version__, 'vllm', vllm.__version__)"
    [ -f /tmp/model/config.json ] || python3 .gpu/make_dummy_qwen3vl.py /tmp/model
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    nproc; free -g | head -2 ;;
  clips)
    python3 benchmarks/bench_fleet.py clips /tmp/clips --count "${CLIPS:-144}" --seconds 10 --height 1080
    python3 benchmarks/bench_fleet.py hostile /tmp/clips/hostile --good /tmp/clips
    du -sh /tmp/clips ;;
  gputest)
    export PYTHONPATH=$PYTHONPATH:$PWD CW_GPU_OUT="$OUT" CW_GPU_MODEL=${CW_GPU_MODEL:-/tmp/model} CW_GPU_DUMMY=1
    export CW_GPU_CLIP_ROOT=/tmp/gpuclips CW_GPU_GPUS=${GPUS:-0} CW_GPU_VLLM_ARGS=${VLLM_ARGS:-}
    export CW_GPU_CAPTION_CHARS=${CAPTION_CHARS:-} CW_GPU_TOPOLOGY=${TOPOLOGY:-single}
    nvidia-smi -L
    set -o pipefail
    # the GPU's peaks while it is still free: the denominators of the report's compute efficiency
    python3 benchmarks/gpu_peak.py --out "$OUT/peak.json" || true
    # where the CPU goes while it captions (per role and thread, py-spy on the busiest processes)
    python3 benchmarks/cpu_profile.py --out "$OUT/cpu-profile.json" >"$OUT/cpu-profile.log" 2>&1 &
    prof=$!
    rc=0
    python3 -m pytest -m gpu tests/serving/test_gpu_fleet.py -x -q -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" || rc=$?
    kill -TERM $prof; wait $prof || true
    stop_leftovers
    exit $rc ;;
  bench)
    python3 benchmarks/bench_fleet.py sweep --model /tmp/model --clips /tmp/clips --out "$OUT/results.jsonl" \
      --configs nvdec,opencv --concurrency 64 --requests 128 --warmup 8 --tflops \
      --probe "$OUT/probe.json" --hostile /tmp/clips/hostile 2>&1 | tee "$OUT/sweep.log"
    for f in /tmp/benchlogs/*.log; do echo "=== $f"; tail -n 40 "$f"; done >"$OUT/vllm-tails.log" ;;
  sweep)
    python3 benchmarks/bench_fleet.py sweep --model /tmp/model --clips /tmp/clips --out "$OUT/results.jsonl" \
      --configs "$2" --concurrency "${CONC:-64}" --requests 128 --warmup 8 2>&1 | tee "$OUT/sweep.log"
    for f in /tmp/benchlogs/*.log; do echo "=== $f"; tail -n 40 "$f"; done >"$OUT/vllm-tails.log" ;;
  node)
    shift
    stage=${1:?stage}; shift
    if ls .whl2/*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl2/*.whl
    fi
    export PYTHONPATH=$PYTHONPATH:$PWD
    python3 benchmarks/node_run.py "$stage" --fleet gpu --model "${CW_GPU_MODEL:-/tmp/model}" --dummy \
      --clip-cache /tmp/clips-node --work /tmp/node-work --out "$OUT" "$@" 2>&1 | tee -a "$OUT/console.log" ;;
  peak)
    python3 benchmarks/gpu_peak.py --out "$OUT/peak.json" ;;
  head)
    shift
    export PYTHONPATH=$PYTHONPATH:$PWD
    python3 benchmarks/bench_runner.py --head "$@" 2>&1 | tee -a "$OUT/head.log" ;;
  perfclips|threads|workload)
    shift
    if [ -f /tmp/pregen.started ]; then  # the clips a pregen call is still generating
      for _ in $(seq 600); do [ -f /tmp/pregen.done ] && break; sleep 1; done
      tail -n 3 /tmp/pregen.log
    fi
    case "$step" in
      perfclips) stage=clips; extra=(--clips 128) ;;
      threads) stage=threads; extra=(--threads-configs "${THREADS:-1,2,4,budget}") ;;
      workload) stage=workload; extra=() ;;
    esac
    export PYTHONPATH=$PYTHONPATH:$PWD
    python3 benchmarks/node_run.py "$stage" --fleet gpu --gpus "${GPUS:-0}" --model "${CW_GPU_MODEL:-/tmp/model}" \
      --dummy --clip-cache /tmp/clips-node --work /tmp/node-work --out "$OUT" "${extra[@]}" "$@" 2>&1 \
      | tee -a "$OUT/console.log" ;;
  *) echo "unknown step $step"; exit 2 ;;
esac
