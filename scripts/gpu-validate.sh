#!/usr/bin/env bash
# Validate the course on a GPU machine that has torch and triton but no Jupyter and no network (see
# ../shared/gpu/README.md): carried wheels in .whl/ give nbval, xdist and a kernel.
#   scripts/gpu-validate.sh tests              every unit and lesson test, on the GPU
#   scripts/gpu-validate.sh tests:10,12        the tests of lessons 10 and 12 only (tests/test_lesson10.py ...)
#   scripts/gpu-validate.sh tests:crashes      a harness test file by name (tests/test_crashes.py)
#   scripts/gpu-validate.sh notebooks          every solution notebook top to bottom under nbval, compiled
#   scripts/gpu-validate.sh notebooks:05,13    those lessons' solution notebooks only
#   scripts/gpu-validate.sh bench              make bench's driver: bench.{csv,md} and roofline.png
#   scripts/gpu-validate.sh bench:05           one lesson's bench, in its own folder (merge folders with
#                                              `python -m bench --merge DIR... --out results/NAME`)
#   scripts/gpu-validate.sh big:1 ... pinned   copy a part of the pinned triton's wheel (.big1 ...: see
#                                              ../shared/gpu/carry-big-wheel.sh; one call of the device tool a part,
#                                              back to back); `pinned` joins the parts in /tmp/big, installs the wheel
#                                              and runs the steps after it with that triton (in a later call to
#                                              the same warm machine, `pinned` alone uses the installed one again).
#                                              A call carries at most 64 MiB with the tree (20.7 MB on 2026-12-07,
#                                              growing with results/): split the wheel in parts of 38 MB (`split -b
#                                              38M`: five parts), not the script's 52 (44 MB parts stopped fitting)
#   scripts/gpu-validate.sh sweep:l12zi@150   a sweep, bench/sweeps/l12zi.py, its output in l12zi.out (the sweep writes
#                                              sweep_l12zi.txt itself); with @SECONDS its BUDGET_S is 20 s less; its
#                                              arguments after "+": sweep:l08f+--int4+--only=Llama-3.2-1B@300
#   PYTEST_ADDOPTS='-k "planted or gqa"' scripts/gpu-validate.sh tests:08,13    only the tests -k selects (pytest reads
#                                              PYTEST_ADDOPTS; log names stay those of the step)
#   TEST_SHARD=1/2 scripts/gpu-validate.sh tests:06,07@560    every second test from the first (then TEST_SHARD=2/2 in
#                                              the next call): a run longer than one call's limit, in parts
#                                              (tests/conftest.py; the log's name ends in -shard1of2)
#   scripts/gpu-validate.sh tests:06,07%1/4@240 tests:11@60   the same for one step (%i/n after the lessons): the
#                                              steps after it run whole (TEST_SHARD in the environment shards them all)
#   TEST_PASSED_IN=results/X/logs/a.log:results/X/logs/b.log scripts/gpu-validate.sh tests:06,07@500
#                                              leave out the tests those logs report passed or skipped: the rest of
#                                              a run that a limit cut off (tests/conftest.py), where nothing they
#                                              cover has changed since
# A step may end in @SECONDS, its time limit (e.g. bench:05@300): a step that runs over is interrupted (SIGINT, so
# that pytest still prints the failures it saw; killed 20 s later if it has not stopped), the next one runs.
# A test step's log names each test as it ends (-v) and the 25 slowest (--durations; a notebook step each cell and
# the 15 slowest cells): a step cut off by its limit
# shows which tests never ran. Tests and notebooks run in 8 processes (pytest-xdist; WORKERS=16 in the environment for more: session 28 saw no
# clear gain on an H100, whose 16 cores also compile). TRITON_HARD_WAY_AS=7.5 (or 8.0) in the environment runs them
# as the course behaves on a T4 (or an A100). Logs and results go to $OUT when it is set (the device tool),
# else to build/gpu; every step's exit status and time are appended to steps.txt there. Under $OUT, more than six
# files are packed into outputs.tgz at the end (the device tool returns eight at most).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/gpu}
mkdir -p "$out"
if [ -d .whl ] && [ ! -d /tmp/site/nbval ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
elif [ ! -d .whl ] && [ ! -d /tmp/site/nbval ]; then  # .whl/ is ignored by git: it travels only when carried
  echo "no .whl/ here: the notebooks need its nbval, and it travels only with the device tool's carry: [\".whl\"]" \
    | tee -a "$out/steps.txt"
fi
export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mode=${TRITON_HARD_WAY_AS:+-as$TRITON_HARD_WAY_AS}
versions() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$out/gpu.txt"
  python3 -c 'import torch, triton, transformers; print("torch", torch.__version__, "triton", triton.__version__, "transformers", transformers.__version__)' | tee -a "$out/gpu.txt"
  echo "TRITON_HARD_WAY_AS=${TRITON_HARD_WAY_AS:-} (unset: the GPU as it is)" | tee -a "$out/gpu.txt"
}
files() {  # "10,12" -> the files of those lessons matching $2 (tests/test_lessonNN.py or solutions/NN_*.ipynb);
  local n  # a name for tests ("crashes,checking") -> tests/test_crashes.py ...: the harness's own tests
  for n in ${1//,/ }; do
    if [ "$2" = tests ] && [[ $n =~ ^[0-9]+$ ]]; then echo "tests/test_lesson$n.py"
    elif [ "$2" = tests ]; then echo "tests/test_$n.py"
    else ls solutions/"$n"_*.ipynb; fi
  done
}
versions
status=0
tag=$(python3 -c 'import triton; print(triton.__version__)')
for step in "$@"; do
  limit=${step##*@}; [ "$limit" = "$step" ] && limit=0; step=${step%@*}
  shard=${TEST_SHARD:-}; if [[ $step == *%* ]]; then shard=${step##*%}; step=${step%[%]*}; fi
  what=${step%%:*}; which=""; [ "$what" != "$step" ] && which=${step#*:}
  run=(timeout -s INT -k 20 "$limit"); [ "$limit" = 0 ] && run=()
  t0=$(date +%s)
  case $what in
    tests)
      sel=(tests --ignore=tests/test_browser.py --ignore=tests/test_participants.py)
      [ -n "$which" ] && mapfile -t sel < <(files "$which" tests)
      TEST_SHARD=$shard "${run[@]}" python3 -m pytest -v -p no:cacheprovider -n "${WORKERS:-8}" --tb=short -rfE \
        --durations=25 "${sel[@]}" > "$out/tests-$tag$mode${which:+-${which//,/_}}${shard:+-shard${shard/\//of}}.log" 2>&1 ;;
    notebooks)
      sel=(solutions); [ -n "$which" ] && mapfile -t sel < <(files "$which" notebooks)
      "${run[@]}" python3 -m pytest -v -p no:cacheprovider -n "${WORKERS:-8}" --dist loadfile --tb=short -rfE --nbval-lax \
        --nbval-current-env --durations=15 "${sel[@]}" > "$out/notebooks-$tag$mode${which:+-${which//,/_}}.log" 2>&1 ;;
    bench)
      dest=$out${which:+/bench-${which//,/_}}; mkdir -p "$dest"
      "${run[@]}" python3 -m bench ${which:+--only ${which//,/ }} --out "$dest" > "$dest/bench.log" 2>&1 ;;
    sweep)
      name=${which%%+*}; args=(); [[ $which == *+* ]] && IFS=+ read -r -a args <<< "${which#*+}"
      [ -f "bench/sweeps/$name.py" ] || { echo "no bench/sweeps/$name.py" | tee -a "$out/steps.txt"; status=1; continue; }
      budget=(); [ "$limit" != 0 ] && budget=(BUDGET_S=$((limit > 40 ? limit - 20 : limit)))
      env "${budget[@]}" OUT="$out" "${run[@]}" python3 "bench/sweeps/$name.py" "${args[@]}" > "$out/$name.out" 2>&1 ;;
    big) mkdir -p /tmp/big && cp ".big$which"/* /tmp/big/ ;;
    pinned)
      if [ -d /tmp/site-big/triton ] && ! ls /tmp/big/part* >/dev/null 2>&1; then  # installed by an earlier call
        export PYTHONPATH=/tmp/site-big:$PYTHONPATH && versions && tag=$(python3 -c 'import triton; print(triton.__version__)')
      else
      wheel=$(python3 - <<'PY'
import glob, zipfile
parts = sorted(glob.glob("/tmp/big/part*"))
with open("/tmp/big/whole.zip", "wb") as whole:
    for p in parts:
        whole.write(open(p, "rb").read())
z = zipfile.ZipFile("/tmp/big/whole.zip")
info = next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))
tags = [l.split(": ")[1] for l in z.read(info).decode().splitlines() if l.startswith("Tag: ")]
name, version = info.split("/")[0].removesuffix(".dist-info").rsplit("-", 1)
py, abi = tags[0].split("-")[:2]
print(f"/tmp/big/{name}-{version}-{py}-{abi}-{'.'.join(t.split('-')[2] for t in tags)}.whl")
PY
)
      mv /tmp/big/whole.zip "$wheel" && rm -f /tmp/big/part* \
        && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-big "$wheel" \
        && export PYTHONPATH=/tmp/site-big:$PYTHONPATH && versions && tag=$(python3 -c 'import triton; print(triton.__version__)')
      fi ;;
    *) echo "unknown step: $step (tests[:NN,..], notebooks[:NN,..], bench[:NN], sweep:NAME[+ARG...], big:N, pinned;"\
         "@SECONDS)"; exit 2 ;;
  esac
  rc=$?; [ $rc -ne 0 ] && status=1
  [ "$limit" = 0 ] && limit=""
  echo "$step${shard:+%$shard}${limit:+@$limit}: exit $rc in $(( $(date +%s) - t0 )) s (triton $tag$mode)" | tee -a "$out/steps.txt"
done
# the device tool brings back at most 8 files from $OUT (session 11 lost a bench folder that way): past 6, everything
# but steps.txt and gpu.txt goes into one outputs.tgz (files from an earlier call of this script included)
if [ -n "${OUT:-}" ] && [ "$(find "$out" -type f | wc -l)" -gt 6 ]; then
  (cd "$out" && tar czf /tmp/outputs.tgz --exclude=./steps.txt --exclude=./gpu.txt --exclude=./outputs.tgz . \
    && find . -type f ! -name steps.txt ! -name gpu.txt -delete && find . -mindepth 1 -type d -empty -delete \
    && mv /tmp/outputs.tgz outputs.tgz && echo "outputs packed into \$OUT/outputs.tgz (tar xzf to read)")
fi
exit $status
