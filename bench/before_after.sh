#!/usr/bin/env bash
# Before/after on one machine the same day: the four end-to-end benchmarks (vs_kafka, tiered,
# spark_read, client) for two checkouts, alternating, each run's JSON lines kept in OUT/<label>-<n>.jsonl.
#   bench/before_after.sh BEFORE_CHECKOUT AFTER_CHECKOUT OUT [ROUNDS]
# Medians come from bench/medians.py OUT. Every benchmark already carries its own baseline (Apache
# Kafka or plain file I/O) in the same run; alternating the checkouts spreads the shared machine's noise.
set -euo pipefail
before=$(realpath "$1"); after=$(realpath "$2"); out=$(realpath -m "$3"); rounds=${4:-2}
here=$(cd "$(dirname "$0")" && pwd)
export PYSPARK_PYTHON=${PYSPARK_PYTHON:-$(command -v python)} SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
mkdir -p "$out"
run_set() {  # checkout label
    local tree=$1 file=$out/$2.jsonl
    cd "$tree"
    for cmd in "bench/vs_kafka.py --no-docs --runs 3" \
               "bench/tiered.py --runs 3 --target tierlog,kafka --consumer kcat --mb 512" \
               "bench/spark_read.py --mb 512" "bench/client.py"; do
        # shellcheck disable=SC2086  # the command line is split on purpose
        PYTHONPATH=$tree/src python $cmd 2>>"$out/$2.stderr" | grep '^{' | tail -1 \
            | python -c 'import json,sys; d=json.loads(sys.stdin.read()); d["bench"]=sys.argv[1]; print(json.dumps(d))' \
              "${cmd%% *}" >>"$file"
    done
}
for n in $(seq "$rounds"); do
    run_set "$before" "before-$n"
    run_set "$after" "after-$n"
done
python "$here/medians.py" "$out"
