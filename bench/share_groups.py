"""Share-group consume throughput (KIP-932): tierlog against Apache Kafka 4.4, with Kafka's own tools.

For each broker in turn (the first one alternating between runs): a topic with one partition, the share group
initialized at the log end by Kafka's share consumer (tests/harness/java/ShareConsumerPeer.java: a warm-up
record delivered and accepted), then ``--records`` records of ``--record-bytes`` produced with Kafka's
``ProducerPerformance``, then Kafka's ``ShareConsumerPerformance`` with ``--threads`` share consumers (4) reading
them all (implicit acknowledgement): MB/s and records/s as the tool reports them (its fetch time, without
start-up). Both brokers run on 127.0.0.1 with their default settings (Kafka 4.4's peer from
``scripts/kafka_peer.py``, tierlog as ``python -m tierlog broker``), each stopped by its PID.

Prints one JSON line with the medians and the ratio tierlog/Kafka, and writes ``bench/results/share_groups.json``.

    python bench/share_groups.py [--runs 3] [--records 200000] [--threads 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tests.harness.apache_kafka import kafka_peer_module as kp  # noqa: E402
from tests.harness.broker import BrokerProcess  # noqa: E402
from tests.harness.java_programs import java_program_command  # noqa: E402
from tests.harness.rawclient import create_topic  # noqa: E402

VERSION = kp.LATEST_KAFKA_VERSION
PEER = ROOT / "tests" / "harness" / "java" / "ShareConsumerPeer.java"
RESULTS = ROOT / "bench" / "results" / "share_groups.json"


def tool(main_class: str, *args, timeout: float = 600) -> str:
    return kp.run_tool(main_class, *map(str, args), version=VERSION, timeout=timeout).stdout


def one_run(bootstrap: str, records: int, record_bytes: int, threads: int) -> dict:
    topic, group = f"share-bench-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    warm = subprocess.run([*java_program_command(PEER, "ShareConsumerPeer", VERSION), bootstrap, topic, group,
                           "accept-some", "0", "0"], capture_output=True, text=True, timeout=180)
    if warm.returncode != 0 or "READY" not in warm.stdout:
        raise RuntimeError(f"warm-up failed:\n{warm.stdout}\n{warm.stderr[-3000:]}")
    tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", records,
         "--record-size", record_bytes, "--throughput", -1, "--producer-props", f"bootstrap.servers={bootstrap}",
         "acks=1")
    out = tool("org.apache.kafka.tools.ShareConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
               "--group", group, "--num-records", records, "--threads", threads, "--timeout", 30000)
    lines = [line for line in out.splitlines() if line.strip()]
    header = [h.strip() for h in lines[-2].split(",")]
    values = [v.strip() for v in lines[-1].split(",")]
    row = dict(zip(header, values))
    return {"mb_per_s": float(row["MB.sec"]), "records_per_s": float(row["nMsg.sec"]),
            "mb": float(row["data.consumed.in.MB"]), "records": int(float(row["data.consumed.in.nMsg"])), "raw": row}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--records", type=int, default=200000)
    ap.add_argument("--record-bytes", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=4)
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {"tierlog": [], "kafka": []}
    with tempfile.TemporaryDirectory(prefix="share-bench-") as tmp:
        kafka = kp.KafkaServer(Path(tmp) / "kafka", version=VERSION,
                               overrides={"num.partitions": "1", "offsets.topic.replication.factor": "1"})
        tierlog = BrokerProcess(Path(tmp) / "tierlog", {"num.partitions": "1"})
        try:
            kafka.start()
            tierlog.start()
            for i in range(args.runs):
                order = [("tierlog", tierlog), ("kafka", kafka)]
                for name, broker in (order if i % 2 == 0 else order[::-1]):
                    result = one_run(broker.bootstrap, args.records, args.record_bytes, args.threads)
                    runs[name].append(result)
                    print(f"run {i} {name}: {result['mb_per_s']:.1f} MB/s, {result['records']} records",
                          file=sys.stderr, flush=True)
        finally:
            tierlog.stop()
            kafka.stop()
    medians = {name: statistics.median(r["mb_per_s"] for r in rs) for name, rs in runs.items()}
    summary = {"bench": "share_groups", "threads": args.threads, "records": args.records,
               "record_bytes": args.record_bytes, "runs": args.runs,
               "mb_per_s": medians, "ratio_tierlog_to_kafka": medians["tierlog"] / medians["kafka"]}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({**summary, "all_runs": runs}, indent=2) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
