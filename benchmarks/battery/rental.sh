#!/usr/bin/env bash
# The GPU battery on a short rental (15 minutes of a GPU, the machine's start included): one queue
# of stages runs in the background from the first device call to a deadline, while the next calls
# bring TensorFlow's bundle one part at a time (64 MiB a call) and bring back what is done. A timed
# stage runs on a quiet host only: while the bundle arrives (each call copies a part, which a
# background unpacking streams into place) the queue runs untimed work (warm-ups, the data's
# reference trainer, accuracy runs, TensorFlow's smoke test); `hold` says the transfers are over,
# and then the battery starts its timed stages, one after another (benchmarks/battery/running.py
# waits for the host to be quiet and refuses a timed stage beside other work).
#
# Each device call, back to back (an idle machine is given back after 30 s):
#   bash benchmarks/battery/rental.sh start SECONDS   # carry .data .pydeps: the queue may run
#                                                     # SECONDS
#   bash benchmarks/battery/rental.sh part c03        # carry .tfgpu/c03 and .tfgpu/SHA256SUMS
#   bash benchmarks/battery/rental.sh part f00        # the fallback cuDNN's parts likewise, for
#                                                     # the `cudnn` stage
#   bash benchmarks/battery/rental.sh hold WAIT       # the last transfer: timed stages may
#                                                     # start; wait up to WAIT s like poll
#   bash benchmarks/battery/rental.sh poll WAIT       # wait up to WAIT s, bring back the pack
#   bash benchmarks/battery/rental.sh reorder "tf:resnet9-mixed:1 torch:doctor: ..."
#                                                     # the queue goes on in this order instead
#   bash benchmarks/battery/rental.sh skip            # stop the stage running now (its
#                                                     # training too); the queue goes on
#   RENTAL_LEFT=SECONDS and RENTAL_REFRESH=1 before any verb: below; RENTAL_ORDER=... before
#   `start`: that order only (a later rental runs what an earlier one did not), and with it
#   RENTAL_FILL=...: untimed stages run in that order while TensorFlow is on its way;
#   RENTAL_OPTIONS=...: more options of every stage's battery
#   ("--tests resume,doctor": the GPU-test stage runs only those); BATTERY_COMMIT=HASH
#   before `start`: the commit the checkout is at (its copy here has no .git), which
#   battery.json and each GPU-test report (pytest-gpu-FRAMEWORK.xml) record
# Every verb ends by copying the battery's pack (at most 8 files) into $OUT. A call after
# `hold` copies the checkout onto the host while timed stages run: make none but the last.
#
# The queue, in the order of its stages' worth: untimed work while TensorFlow arrives (`prime`:
# one eager PyTorch epoch that decodes the images into the data cache, and PyTorch's eager
# kernels), TensorFlow's smoke test, then the timed stages: the ResNet-9 verdict with both
# frameworks' compile caches warm (compare's own warm-up), then cold (--compile-cache), each
# over 3 seeds beside each framework's own loop, its default and its best; then what an earlier
# rental left (TensorFlow's BatchNorm alone and its two cuDNN builds, the short sweeps, the
# verdict matched eager, ...) as time allows. No stage warms one framework's compile cache.
# `python -m benchmarks.gpu_battery --plan --rental` lays this queue in a rental's device time
# (the machine's start, the bundle's parts one a call) and names what is left for the next.
# Send the bundle's fallback cuDNN parts (fNN) before the core's (cNN): TensorFlow is activated
# once the core is unpacked, on the CUDA 12 cuDNN only where its parts came by then.
set -uo pipefail
S=${RENTAL_DIR:-/tmp/rental}        # everything on the device lives here
DATA=.data/cifar10-jpeg.tar.gz      # the real CIFAR-10 image folder, carried by `start`
PYDEPS=.pydeps                      # pure-Python packages the host lacks (airbench), by `start`
BUNDLE=.tfgpu                       # TensorFlow's bundle parts (../shared/tools/tf-gpu-bundle)

say() { printf '[%s +%ss] %s\n' "$(date +%H:%M:%S)" "$(( $(date +%s) - $(cat $S/started 2>/dev/null || date +%s) ))" "$*"; }

report() {  # what the queue is doing and has done; the pack into $OUT
  say "queue: $(tail -n 4 $S/queue.log 2>/dev/null | tr '\n' '|')"
  nvidia-smi --query-gpu=name,utilization.gpu,memory.used,power.draw --format=csv,noheader 2>/dev/null
  [ -f $S/battery/battery.md ] && grep -E '^\|' $S/battery/battery.md | cut -c1-160 | tail -n 30
  # a timed stage that shared the host: what else ran there (battery.md's lines, host.json)
  [ -f $S/battery/battery.md ] && grep -E '^- .*host not quiet' $S/battery/battery.md | cut -c1-240
  [ -n "${OUT:-}" ] || return 0
  [ -d $S/pack ] && cp $S/pack/* "$OUT"/ 2>/dev/null
  # live.tar.gz: what is on disk now, beside the pack the battery wrote after its last stage
  # (a stage still running, or one cut at the deadline before its pack, leaves its runs'
  # results only here); no data, models, checkpoints or traces. The pack's 7 files at most
  # and this one make the 8 a call brings back.
  local skip=(--exclude='*.pt' --exclude='*.keras' --exclude='*.npz' --exclude='*.pb'
              --exclude=checkpoint --exclude=tensorboard --exclude=profile --exclude=parity
              --exclude=report)
  # at the lowest priority: a timed stage may be running (a call after `hold`)
  (cd $S && nice -n 19 tar czf "$OUT"/live.tar.gz "${skip[@]}" queue.log $(ls -d battery 2>/dev/null))
  if [ "$(stat -c %s "$OUT"/live.tar.gz)" -gt $(( 15 * 1024 * 1024 )) ]; then  # the summaries
    (cd $S && find queue.log battery -name '*.json' -o -name '*.md' -o -name '*.log' \
       -o -name '*.xml' -o -name queue.log \
       | grep -v -e /checkpoint/ -e /profile/ -e /tensorboard/ \
       | nice -n 19 tar czf "$OUT"/live.tar.gz -T -)
  fi
}

battery() {  # battery FRAMEWORK STAGE [SEEDS]: one stage, within the queue's deadline
  local left=$(( $(cat $S/deadline) - $(date +%s) ))
  [ $left -gt 20 ] || { say "no time left for $2 ($1)"; return 2; }
  # the battery keeps 60 s of --time-left for a stage's stop (up to 30 s: its runs write
  # what they finished) and the pack, so all of it is done by the deadline, where the last
  # poll returns
  say "stage $2 ($1), ${left} s left"
  BATTERY_COMMIT=${BATTERY_COMMIT:-$(cat $S/commit 2>/dev/null)} BATTERY_QUIET_MARKER=$S/quiet \
    PYTHONPATH=$S/repo:$S/repo/$PYDEPS${PYTHONPATH:+:$PYTHONPATH} \
    python3 -m benchmarks.gpu_battery \
    --framework "$1" --stage "$2" ${3:+--seeds $3} --limit-factor 4 \
    --dataset folder --data-dir $S/data --time-left $left \
    --out $S/battery --pack $S/pack ${RENTAL_OPTIONS:-}  # "--device cpu --tiny": plumbing
}

wait_for_tf() {  # until the bundle is unpacked (or failed), while a minute of the queue is left;
  # then, where parts of its fallback cuDNN (CUDA 12, what pip gives a TensorFlow user) came,
  # until that is unpacked too: activate.sh picks it only when it is there. Parts that stopped
  # coming (the transfers over, `hold`) are not waited for.
  queue_left() { echo $(( $(cat $S/deadline) - $(date +%s) )); }
  while [ ! -f $S/tf-unpacked ] && [ ! -f $S/tf-failed ] && [ "$(queue_left)" -gt 60 ]; do sleep 2; done
  while ls $S/parts 2>/dev/null | grep -q '^f' && [ ! -f $S/tf-fallback-unpacked ] \
        && [ ! -f $S/tf-fallback-failed ] && [ "$(queue_left)" -gt 60 ] \
        && { [ -d $S/unpacking-fallback ] || [ ! -f $S/quiet ]; }; do sleep 2; done
}

queue() {
  cd $S/repo || exit 1
  # framework:stage:seeds (empty: the stage's own), in the order of their worth
  # while TensorFlow arrives (the reference trainer and Page's recipe ran on an H100:
  # benchmarks/results/gpu-h100-rental3/; RENTAL_ORDER runs them again)
  # (benchmarks/battery/rental.py reads these two lists: the plan lays them in device time)
  local untimed=(torch:prime: torch:kernels:)
  local timed=(both:resnet9-verdict-warm: both:resnet9-verdict-cold: tf:batchnorm: tf:cudnn:
               tf:kernels: torch:steps-per-call: tf:steps-per-call: torch:strategy: tf:strategy:
               both:resnet9-eager: torch:resnet9-fp32:1 tf:resnet9-fp32:1 torch:cpu-vs-gpu:
               tf:cpu-vs-gpu: torch:gpu-tests: tf:gpu-tests: tf:suite: torch:tool-overhead:
               tf:tool-overhead: torch:cuda-graphs: torch:batchnorm:)
  local -A ran=()
  local item fw stage seeds tf_ok=0
  run() {  # run framework:stage:seeds once; 2 when the deadline is near
    IFS=: read -r fw stage seeds <<< "$1"
    [ -n "${ran[$fw:$stage]:-}" ] && return 0
    ran[$fw:$stage]=1
    if [ "$stage" = cudnn ]; then  # the fallback cuDNN whole, if its parts came
      while [ -f $S/unpacking-fallback/order ] && [ ! -f $S/tf-fallback-unpacked ] \
            && [ ! -f $S/tf-fallback-failed ] \
            && [ $(( $(cat $S/deadline) - $(date +%s) )) -gt 60 ]; do sleep 2; done
    fi
    battery "$fw" "$stage" "$seeds"
  }
  smoke() {  # TensorFlow's smoke test, once a machine: a queue started again (reorder) after
    # it passed does not repeat it (13-21 s of an H200 rental's device time)
    [ -f $S/tf-smoked ] || { run tf:tf-smoke: && touch $S/tf-smoked; }
  }
  if [ -n "${RENTAL_ORDER:-}" ]; then  # a queue started again mid-rental: this order only
    while pgrep -f benchmarks.gpu_battery > /dev/null; do sleep 1; done  # the stage running
    # the images decoded first, once a machine, whatever the order: else inside a timed run
    # (an eager epoch: no compile cache is warmed, each comparison's state is its own)
    [ -f $S/primed ] || { run torch:prime: && touch $S/primed; }
    local activated=0
    for item in $RENTAL_ORDER; do
      # TensorFlow's stages and the comparisons of both ("both:") need the bundle
      if [ "${item%%:*}" != torch ] && [ $activated = 0 ]; then
        activated=1
        for fill in ${RENTAL_FILL:-}; do  # untimed stages while TensorFlow is on its way
          [ -f $S/tf-unpacked ] || [ -f $S/tf-failed ] && break
          run "$fill"; [ $? -eq 2 ] && break
        done
        wait_for_tf
        if [ -f $S/tf-unpacked ]; then
          # shellcheck disable=SC1091
          source $S/tfgpu/site/activate.sh
          smoke && tf_ok=1
        fi
      fi
      [ "${item%%:*}" != torch ] && [ $tf_ok = 0 ] && continue
      run "$item"; [ $? -eq 2 ] && break
    done
    for fill in ${RENTAL_FILL:-}; do  # what the wait for TensorFlow left, as time allows
      run "$fill"; [ $? -eq 2 ] && break
    done
    say "queue done"; touch $S/queue-done; return
  fi
  for item in "${untimed[@]}"; do run "$item" && [ "$item" = torch:prime: ] && touch $S/primed; done
  wait_for_tf
  if [ -f $S/tf-unpacked ]; then
    # shellcheck disable=SC1091
    source $S/tfgpu/site/activate.sh
    # no TensorFlow warm-up before the timed stages: each comparison's parity check runs
    # TensorFlow on the GPU before its timed runs, which fills the driver's kernel cache
    if smoke; then
      tf_ok=1
    else
      say "TensorFlow's smoke test failed on the machine's cuDNN: no TensorFlow stage runs"
    fi
  fi
  for item in "${timed[@]}"; do
    [ $tf_ok = 1 ] || [ "${item%%:*}" = torch ] || continue
    run "$item"; [ $? -eq 2 ] && break
  done
  say "queue done"; touch $S/queue-done
}

snapshot() { tar cf - --exclude=./.data --exclude=./$BUNDLE --exclude=./runs . | tar xf - -C $S/repo; }

# On any verb but the queue's own: RENTAL_LEFT=SECONDS moves the queue's deadline (the lease's
# time left is known only after the first call); RENTAL_REFRESH=1 copies the checkout over the
# queue's snapshot again (a fix made during the rental: later stages run it).
if [ "${1:-}" != queue ] && [ "${1:-}" != unpack ] && [ -f $S/deadline ]; then
  # written whole (a new file moved into place): the unpacking reads it every half second
  [ -n "${RENTAL_LEFT:-}" ] && echo $(( $(date +%s) + RENTAL_LEFT )) > $S/deadline.new \
    && mv $S/deadline.new $S/deadline && say "deadline moved: ${RENTAL_LEFT} s from now"
  [ -n "${RENTAL_REFRESH:-}" ] && snapshot && say "snapshot refreshed from this checkout"
fi

case ${1:-} in
  start)  # start SECONDS: unpack the data, snapshot the checkout, start the queue
    mkdir -p $S/data $S/repo $S/parts
    date +%s > $S/started; echo $(( $(date +%s) + ${2:?seconds the queue may run} )) > $S/deadline
    [ -n "${BATTERY_COMMIT:-}" ] && echo "$BATTERY_COMMIT" > $S/commit  # for every later queue
    tar xzf $DATA -C $S/data
    snapshot
    nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader
    cp "$0" $S/queue.sh   # the queue runs from its own copy: later calls may rewrite the checkout
    setsid nohup bash $S/queue.sh queue > $S/queue.log 2>&1 < /dev/null &
    sleep "${3:-15}"; report ;;
  part)  # part cNN: check one bundle part and keep it; the first part starts the unpacking,
    # which streams each part into xz and tar as it arrives, in SHA256SUMS' order, so the
    # bundle is unpacked seconds after its last part, not a minute later. part fNN: a part of
    # the bundle's fallback cuDNN (CUDA 12), unpacked beside the bundle once all have come
    name="$2/${2:0:1}.${2:1}"
    (cd $BUNDLE && grep " $name\$" SHA256SUMS | sha256sum -c --quiet -) || { say "part $2: bad sum"; exit 1; }
    # a part sent again is kept once (the unpacking may be reading it); each arrives whole
    [ -f $S/parts/"$2" ] || { mkdir -p $S/partdata && cp $BUNDLE/"$name" $S/partdata/"$2".new \
      && mv $S/partdata/"$2".new $S/partdata/"$2" && touch $S/parts/"$2"; }
    family=${2:0:1}
    total=$(grep -c " $family[0-9][0-9]/" $BUNDLE/SHA256SUMS)
    say "part $2: $(ls $S/parts | grep -c "^$family") of $total"
    if [ "$family" = f ]; then
      if [ "$(ls $S/parts | grep -c '^f')" = "$total" ] && mkdir $S/unpacking-fallback 2>/dev/null; then
        grep -o ' f[0-9][0-9]/' $BUNDLE/SHA256SUMS | tr -d ' /' > $S/unpacking-fallback/order
        cp "$0" $S/unpack-fallback.sh
        setsid nohup bash $S/unpack-fallback.sh unpack-fallback > $S/unpack-fallback.log 2>&1 \
          < /dev/null &
      fi
      report; exit 0
    fi
    if mkdir $S/unpacking 2>/dev/null; then  # once: the first part's call
      grep -o ' c[0-9][0-9]/' $BUNDLE/SHA256SUMS | tr -d ' /' > $S/unpacking/order
      cp "$0" $S/unpack.sh  # its own copy, like the queue's: later calls rewrite the checkout
      setsid nohup bash $S/unpack.sh unpack > $S/unpack.log 2>&1 < /dev/null &
    fi
    report ;;
  reorder)  # reorder "fw:stage:seeds ...": the queue goes on in this order after its stage
    # the pattern is anchored: this command's own line names queue.sh too
    pkill -f "^bash $S/queue.sh queue"; cp "$0" $S/queue.sh; rm -f $S/queue-done
    RENTAL_ORDER="${2:?the new order}" setsid nohup bash $S/queue.sh queue >> $S/queue.log 2>&1 < /dev/null &
    say "queue started again: $2"; sleep 1; report ;;
  skip)  # stop the stage running now: SIGTERM to its battery, which stops the stage's own
    # process group (each stage runs in a session of its own) and exits; the queue goes on.
    # The bracket keeps the pattern from matching this command's own shell.
    pkill -TERM -f "[b]enchmarks.gpu_battery" && say "stage stopped" || say "no stage running"
    sleep 3; report ;;
  hold)  # hold WAIT: the rental's last transfer is over; timed stages may start; then poll
    touch $S/quiet; say "transfers over: timed stages may start"
    end=$(( $(date +%s) + ${2:-0} ))
    # a call after this one reaches the host while timed stages run (it copies the checkout):
    # say so now, when the deadline lies past this call's wait
    late=$(( $(cat $S/deadline) - end ))
    [ $late -gt 0 ] && say "the queue's deadline is ${late} s past this call's wait: a later" \
      "call will reach the host while a timed stage may run"
    while [ ! -f $S/queue-done ] && [ "$(date +%s)" -lt $end ]; do sleep 2; done
    report ;;
  poll)  # poll WAIT: wait until the queue is done or WAIT s have passed
    end=$(( $(date +%s) + ${2:-0} ))
    while [ ! -f $S/queue-done ] && [ "$(date +%s)" -lt $end ]; do sleep 2; done
    report ;;
  unpack)  # (started by the first part) the parts in order as they arrive, into the bundle
    mkdir -p $S/tfgpu
    for p in $(cat $S/unpacking/order); do
      while [ ! -f $S/parts/$p ]; do  # until it arrives; none comes after `hold` or the deadline
        [ ! -f $S/quiet ] && [ "$(date +%s)" -lt "$(cat $S/deadline)" ] \
          || { echo "part $p never came" >&2; exit 1; }
        sleep 0.5
      done
      cat $S/partdata/$p && rm $S/partdata/$p
    done | xz -dc -T0 | tar xf - -C $S/tfgpu && touch $S/tf-unpacked || touch $S/tf-failed ;;
  unpack-fallback)  # (started by the last fallback part) the fallback cuDNN into the bundle,
    # once the core is unpacked (both write under its folder)
    while [ ! -f $S/tf-unpacked ] && [ ! -f $S/tf-failed ]; do sleep 0.5; done
    for p in $(cat $S/unpacking-fallback/order); do cat $S/partdata/$p && rm $S/partdata/$p; done \
      | xz -dc -T0 | tar xf - -C $S/tfgpu && touch $S/tf-fallback-unpacked \
      || touch $S/tf-fallback-failed ;;
  queue) queue ;;
  *) echo "usage: rental.sh start SECONDS | part cNN | part fNN | hold WAIT | reorder ORDER | skip |" \
          "poll WAIT" >&2
     exit 2 ;;
esac
