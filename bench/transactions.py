"""Transactional produce: tierlog against Apache Kafka 4.4, measured with Kafka's own ProducerPerformance.

One invocation starts both brokers side by side on 127.0.0.1 as ``bench/vs_kafka.py`` does (its
``KafkaBroker``, ``TierlogBroker`` and shared perf-tool JVM; both get ``transaction.state.log.*`` set for one
node). Each run gives every broker a fresh one-partition topic and runs ``ProducerPerformance`` with
``--transactional-id`` (a new one per step) and ``--transaction-duration-ms``: the tool commits a transaction
every that many ms (InitProducerId, AddPartitionsToTxn, produce, EndTxn with its markers), acks=all (a
transactional producer's default), ``--records`` records of ``--record-bytes``, unthrottled. The brokers take
turns, the first alternating between runs; ``--warmups`` unmeasured full-size steps per broker come first (the
JIT of the perf tool and of Kafka's broker). Every figure is the
median over ``--runs`` runs. Prints ONE JSON line with both medians (records/s, MB/s, p99 ms, broker CPU ms
per MB, transactions committed) and the ratio tierlog/Kafka of records/s; ``--json PATH`` also writes every
run there. Each run also times the same records without transactions (``plain_records_s``, acks=all), so
the cost of transactions on each broker shows beside the ratio. After each step the topic's last stable
offset must equal its end offset (every transaction committed, one marker each), else the run fails.
``--asyncio`` adds a third broker, this tierlog on asyncio's own event loop instead of uvloop.

    python bench/transactions.py [--runs 5] [--records 200000] [--transaction-duration-ms 100]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vs_kafka as vs  # noqa: E402 - the brokers and perf tools of the vs_kafka benchmark

# One node: the transaction state log cannot have three replicas (the Kafka peer sets these for itself too).
vs.COMMON_BROKER_SETTINGS.update({"transaction.state.log.replication.factor": "1",
                                  "transaction.state.log.min.isr": "1"})


def transactional_produce(bootstrap: str, topic: str, records: int, record_bytes: int, duration_ms: int) -> dict:
    out = vs.perf_tool("ProducerPerformance", "--topic", topic, "--num-records", records, "--record-size",
                       record_bytes, "--throughput", -1, "--transactional-id", f"perf-{uuid.uuid4().hex[:8]}",
                       "--transaction-duration-ms", duration_ms,
                       "--producer-props", f"bootstrap.servers={bootstrap}", timeout=600)
    return vs.producer_summary(out, records, record_bytes)


def committed_offsets(bootstrap: str, topic: str) -> tuple[int, int]:
    """(last stable offset, high watermark) of partition 0: equal once every transaction is committed."""
    from kafka import KafkaConsumer, TopicPartition
    tp = TopicPartition(topic, 0)
    out = []
    for isolation in ("read_committed", "read_uncommitted"):
        c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
        try:
            out.append(c.end_offsets([tp])[tp])
        finally:
            c.close()
    return out[0], out[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--records", type=int, default=200000)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--transaction-duration-ms", type=int, default=100)
    ap.add_argument("--warmups", type=int, default=3, help="unmeasured full-size steps per broker first")
    ap.add_argument("--json", type=Path, help="also write every run's figures there")
    ap.add_argument("--asyncio", action="store_true",
                    help="also run this tierlog on asyncio's own event loop (TIERLOG_EVENT_LOOP=asyncio), named "
                    "asyncio: uvloop against asyncio in the same runs (vs_asyncio)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=SRC",
                    help="also run a tierlog broker named NAME from another src folder (e.g. `git archive BASE src "
                    "| tar -x -C DIR`, then DIR/src): an A/B of tierlog versions in the same runs; the output adds "
                    "NAME's medians and vs_NAME, tierlog / NAME paired (records/s, broker CPU ms per MB)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-txn-"))
    brokers = [vs.KafkaBroker(work), vs.TierlogBroker(work)]
    if args.asyncio:
        brokers.append(vs.TierlogBroker(work, name="asyncio", env={"TIERLOG_EVENT_LOOP": "asyncio"}))
    for spec in args.variant:
        name, _, src = spec.partition("=")
        brokers.append(vs.TierlogBroker(work, src=Path(src).resolve(), name=name))
    vs.TOOLS = vs.PerfTools()
    runs: list[dict] = []
    started = time.time()
    try:
        for b in brokers:
            b.start()
            vs.log(f"{b.name} on {b.bootstrap}")
        # Warm-up, not measured: the JIT of the perf tool and of Kafka's broker (in a first try Kafka's figure
        # doubled over the first four runs after a short warm-up), and both coordinators' state topics.
        for i in range(args.warmups):
            for b in brokers:
                warm = f"warm-{i}-{uuid.uuid4().hex[:6]}"
                vs.create_topic(vs.TOOLS, b.bootstrap, warm)
                transactional_produce(b.bootstrap, warm, args.records, args.record_bytes,
                                      args.transaction_duration_ms)
            vs.log(f"warm-up {i + 1}/{args.warmups} done")
        for run in range(args.runs):
            order = brokers if run % 2 == 0 else brokers[::-1]
            res = {}
            for b in order:
                topic = f"txn-{run}-{uuid.uuid4().hex[:6]}"
                vs.create_topic(vs.TOOLS, b.bootstrap, topic)
                vs.sync()
                res[b.name] = vs.timed_step(b, transactional_produce, b.bootstrap, topic, args.records,
                                            args.record_bytes, args.transaction_duration_ms)
                # Every record committed: the last stable offset is the end, which holds one marker per transaction.
                stable, end = committed_offsets(b.bootstrap, topic)
                if stable != end or end <= args.records:
                    raise RuntimeError(f"{b.name}: last stable offset {stable}, end {end} after {args.records} records")
                res[b.name]["transactions"] = end - args.records
                vs.log(f"run {run + 1}/{args.runs} {b.name}: {res[b.name]['records_s']:.0f} records/s, "
                       f"{end - args.records} transactions")
                # The same records without transactions (acks=all, idempotent): what transactions cost each.
                plain = f"plain-{run}-{uuid.uuid4().hex[:6]}"
                vs.create_topic(vs.TOOLS, b.bootstrap, plain)
                vs.sync()
                res[b.name]["plain_records_s"] = vs.produce(b.bootstrap, plain, args.records, args.record_bytes,
                                                            "all", -1)["records_s"]
            runs.append(res)
    finally:
        for b in brokers:
            b.stop()
        vs.TOOLS.close()
        shutil.rmtree(work, ignore_errors=True)  # gigabytes of logs per invocation
    medians = {name: {k: round(statistics.median(r[name][k] for r in runs), 2)
                      for k in ("records_s", "mb_s", "p99_ms", "broker_cpu_ms_per_mb", "broker_cpu_busy",
                                "transactions", "plain_records_s")}
               for name in [b.name for b in brokers]}
    result = {"bench": "transactions", "records": args.records, "record_bytes": args.record_bytes,
              "transaction_duration_ms": args.transaction_duration_ms, "runs": args.runs, "warmups": args.warmups,
              "kafka_records_s": medians["kafka"]["records_s"], "tierlog_records_s": medians["tierlog"]["records_s"],
              "ratio_records_s": round(medians["tierlog"]["records_s"] / medians["kafka"]["records_s"], 2),
              "ratio_paired": round(statistics.median(r["tierlog"]["records_s"] / r["kafka"]["records_s"]
                                                      for r in runs), 2),
              "plain_ratio_records_s": round(medians["tierlog"]["plain_records_s"]
                                             / medians["kafka"]["plain_records_s"], 2),
              "medians": medians, "tierlog_event_loop": vs.TierlogBroker.event_loop(),
              "minutes": round((time.time() - started) / 60, 1)}
    for b in brokers[2:]:
        result[f"vs_{b.name}"] = {k: round(statistics.median(r["tierlog"][k] / r[b.name][k] for r in runs), 3)
                                  for k in ("records_s", "broker_cpu_ms_per_mb")}
    if args.json:
        args.json.write_text(json.dumps({**result, "per_run": runs}, indent=1))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
