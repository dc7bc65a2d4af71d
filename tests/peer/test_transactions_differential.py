"""Transactions, differential: the same raw request sequences (a transactional producer's InitProducerId,
AddPartitionsToTxn, Produce, EndTxn, and the coordinator's errors) sent to Apache Kafka 4.4 and to tierlog;
what a client observes must be the same once producer ids and timestamps are normalized.

Compared: the control batches the markers write (batch attributes, producer id and epoch, the marker key's
version and type, the value's version and coordinator epoch), the last stable offset (ListOffsets with
isolation_level=1 and a read_committed Fetch) while a transaction is open and after its commit and abort,
the aborted transactions a read_committed Fetch returns (locally, and from the remote tier against the tiered
Kafka peer), DescribeTransactions and ListTransactions, and the
error codes of the coordinator (EndTxn with no partition or retried after the end, InitProducerId with a
transaction open, a fenced epoch per request version, a timeout above transaction.max.timeout.ms,
AddOffsetsToTxn and TxnOffsetCommit) and of a partition leader verifying a transactional produce (KIP-890
part 1). Not compared: EndTxn while the markers of the last one are still being written, a window a
single Kafka broker closes within milliseconds that nothing outside can hold open.
Deliberate differences are pinned in ``DELIBERATE`` (docs/compatibility.md).
"""

from __future__ import annotations

import contextlib
import time

import pytest

from tests.harness.rawclient import RawClient, create_topic, raw_client, unique
from tests.harness.waiting import TimedOut, not_yet, wait_until
from tests.peer.diff import differences, plain
from tierlog.protocol import ApiKey
from tierlog.records import build_batch, iter_batches

NONE = 0
WAIT_S = 60


# ------------------------------------------------------------------------------------------ requests

def _init(raw: RawClient, tid: str, timeout_ms: int = 60000, version: int = 4) -> tuple[int, int, int]:
    r = raw.request(ApiKey.INIT_PRODUCER_ID, version, {"transactional_id": tid, "transaction_timeout": timeout_ms,
                                                       "producer_id": -1, "producer_epoch": -1})
    return plain(r.error_code), r.producer_id, r.producer_epoch


def _init_ok(raw: RawClient, tid: str, timeout_ms: int = 60000) -> tuple[int, int]:
    """InitProducerId until it succeeds (CONCURRENT_TRANSACTIONS while an earlier abort completes)."""

    def initialized():
        code, pid, epoch = _init(raw, tid, timeout_ms)
        if code == NONE:
            return pid, epoch
        # CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR (yet)
        assert code in (51, 14, 15, 16), code
        return not_yet(code)

    return wait_until(initialized, WAIT_S, what=f"InitProducerId of {tid} (its error code)")


def _coordinator(raw: RawClient, tid: str) -> None:
    """FindCoordinator for ``tid`` until the coordinator answers (both create __transaction_state on demand)."""

    def found():
        r = raw.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [tid]})
        return plain(r.coordinators[0].error_code) == NONE or not_yet(r)

    wait_until(found, WAIT_S, interval=0.1, what=f"the coordinator of {tid}")


def _group_coordinator(raw: RawClient, group: str) -> None:
    """FindCoordinator for ``group`` until the coordinator answers (both create __consumer_offsets on demand),
    then OffsetFetch until the group's partition is loaded (Kafka loads it after naming the coordinator)."""

    def loaded():
        r = raw.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
        if plain(r.coordinators[0].error_code) == NONE:
            f = raw.request(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": None}],
                                                     "require_stable": False})
            if plain(f.groups[0].error_code) == NONE:
                return True
        return not_yet(r)

    wait_until(loaded, WAIT_S, interval=0.1, what=f"the coordinator of group {group}, loaded")


def _add_partitions(raw: RawClient, tid: str, pid: int, epoch: int, topic: str, partitions=(0,),
                    version: int = 3) -> list[int]:
    if version < 4:
        r = raw.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, {
            "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": list(partitions)}]})
        return [plain(p.partition_error_code) for t in r.results_by_topic_v3_and_below for p in t.results_by_partition]
    r = raw.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, {"transactions": [
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "verify_only": False,
         "topics": [{"name": topic, "partitions": list(partitions)}]}]})
    return [plain(r.error_code)] + [plain(p.partition_error_code) for t in r.results_by_transaction
                                    for tr in t.topic_results for p in tr.results_by_partition]


def _verify_only(raw: RawClient, tid: str, pid: int, epoch: int, topic: str, partitions=(0,),
                 version: int = 5) -> list[int]:
    r = raw.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, {"transactions": [
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "verify_only": True,
         "topics": [{"name": topic, "partitions": list(partitions)}]}]})
    return [plain(r.error_code)] + sorted((p.partition_index, plain(p.partition_error_code))
                                          for t in r.results_by_transaction for tr in t.topic_results
                                          for p in tr.results_by_partition)


def _end(raw: RawClient, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    r = raw.request(ApiKey.END_TXN, version, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                              "committed": commit})
    return plain(r.error_code)


def _produce(raw: RawClient, tid: str | None, topic: str, pid: int, epoch: int, seq: int, values: list[bytes],
             partition: int = 0, version: int = 9) -> int:
    batch = build_batch([(None, v) for v in values], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        is_transactional=True)
    r = raw.request(ApiKey.PRODUCE, version, {"acks": -1, "timeout": 10000, "transactional_id": tid, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    return plain(r.responses[0].partition_responses[0].error_code)


def _offsets(raw: RawClient, topic: str, partition: int = 0) -> dict:
    """The high watermark and the last stable offset (ListOffsets v7 LATEST, isolation 0 and 1)."""
    out = {}
    for name, level in (("high_watermark", 0), ("last_stable_offset", 1)):
        r = raw.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": level, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}]})
        p = r.topics[0].partitions[0]
        assert plain(p.error_code) == NONE, p
        out[name] = p.offset
    return out


def _wait_stable(raw: RawClient, topic: str, partition: int = 0, at_least: int = 0) -> dict:
    """Until the last stable offset reaches the high watermark, and that at least ``at_least`` (the markers
    are written after EndTxn's answer)."""

    def stable():
        o = _offsets(raw, topic, partition)
        return o if o["last_stable_offset"] == o["high_watermark"] >= at_least else not_yet(o)

    return wait_until(stable, WAIT_S, what=f"the last stable offset of {topic}-{partition} at its high watermark")


def _wait_complete(raw: RawClient, tid: str) -> None:
    """Until ``tid``'s transaction is complete at its coordinator (ListTransactions: CompleteCommit, CompleteAbort
    or Empty; DescribeTransactions would carry a start time of -1 the test's decoder refuses). EndTxn is answered
    once the decision is logged; the markers and then the complete state follow, and until then the coordinator
    answers CONCURRENT_TRANSACTIONS (Kafka on a loaded machine did, where the next step came right after the
    markers showed in the partition)."""

    def complete():
        r = raw.request(ApiKey.LIST_TRANSACTIONS, 0, {"state_filters": [], "producer_id_filters": []})
        (state,) = [t.transaction_state for t in r.transaction_states if t.transactional_id == tid]
        return state in ("CompleteCommit", "CompleteAbort", "Empty") or not_yet(state)

    wait_until(complete, WAIT_S, what=f"the transaction of {tid} complete (its state)")


def _fetch(raw: RawClient, topic: str, isolation: int, offset: int = 0) -> dict:
    r = raw.request(ApiKey.FETCH, 12, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": isolation,
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                    "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
                                                    "log_start_offset": -1}]}]})
    p = r.responses[0].partitions[0]
    return {"error_code": plain(p.error_code), "high_watermark": p.high_watermark,
            "last_stable_offset": p.last_stable_offset,
            "aborted_transactions": None if p.aborted_transactions is None else
            [(a.producer_id, a.first_offset) for a in p.aborted_transactions],
            "records": bytes(p.records or b"")}


def _batches(data: bytes, pids: dict[int, str]) -> list[dict]:
    """Each batch's header fields a client reads, with producer ids named in order of appearance, and a
    control batch's record (key: version, type; value: version, coordinator epoch) as raw fields."""
    from tierlog.records import decode_batch
    out = []
    for pos, h in iter_batches(data):
        _, records = decode_batch(data, pos)
        if h.producer_id >= 0:
            pids.setdefault(h.producer_id, f"P{len(pids)}")
        entry = {"base_offset": h.base_offset, "last_offset": h.last_offset, "records": len(records),
                 "is_transactional": h.is_transactional, "is_control": h.is_control,
                 "producer_id": pids.get(h.producer_id, h.producer_id), "producer_epoch": h.producer_epoch,
                 "base_sequence": h.base_sequence}
        if h.is_control:
            (rec,) = records
            key, value = bytes(rec.key), bytes(rec.value)
            entry["marker_key"] = {"version": int.from_bytes(key[0:2], "big"), "type": int.from_bytes(key[2:4], "big"),
                                   "length": len(key)}
            entry["marker_value"] = {"version": int.from_bytes(value[0:2], "big"),
                                     "coordinator_epoch": int.from_bytes(value[2:6], "big"), "length": len(value)}
        out.append(entry)
    return out


def _normalize_fetch(f: dict, pids: dict[int, str]) -> dict:
    out = dict(f)
    out["batches"] = _batches(out.pop("records"), pids)
    if out["aborted_transactions"] is not None:
        out["aborted_transactions"] = [(pids.setdefault(p, f"P{len(pids)}"), o) for p, o in out["aborted_transactions"]]
    return out


# ------------------------------------------------------------------------------------------ scenarios

def markers_and_stable_offsets(bootstrap: str) -> dict:
    """A committed and an aborted transaction, observed at each step: LSO, read_committed Fetch, the batches."""
    topic, tid = unique("dtx-m"), unique("dtx-tid")
    create_topic(bootstrap, topic)
    seen: dict = {}
    pids: dict[int, str] = {}
    with raw_client(bootstrap) as raw:
        _coordinator(raw, tid)
        pid, epoch = _init_ok(raw, tid)
        pids[pid] = "P0"
        seen["init epoch"] = epoch
        seen["add"] = _add_partitions(raw, tid, pid, epoch, topic)
        seen["produce committed"] = _produce(raw, tid, topic, pid, epoch, 0, [b"c1", b"c2"])
        seen["open: offsets"] = _offsets(raw, topic)
        seen["open: fetch read_committed"] = _normalize_fetch(_fetch(raw, topic, 1), pids)
        seen["commit"] = _end(raw, tid, pid, epoch, True)
        seen["committed: offsets"] = _wait_stable(raw, topic)
        _wait_complete(raw, tid)
        seen["add 2"] = _add_partitions(raw, tid, pid, epoch, topic)
        seen["produce aborted"] = _produce(raw, tid, topic, pid, epoch, 2, [b"a1", b"a2", b"a3"])
        seen["open 2: offsets"] = _offsets(raw, topic)
        seen["open 2: fetch read_committed"] = _normalize_fetch(_fetch(raw, topic, 1), pids)
        seen["abort"] = _end(raw, tid, pid, epoch, False)
        seen["aborted: offsets"] = _wait_stable(raw, topic)
        seen["aborted: fetch read_committed"] = _normalize_fetch(_fetch(raw, topic, 1), pids)
        seen["aborted: fetch read_committed from 3"] = _normalize_fetch(_fetch(raw, topic, 1, 3), pids)
        seen["aborted: fetch read_uncommitted"] = _normalize_fetch(_fetch(raw, topic, 0), pids)
    return seen


def coordinator_errors(bootstrap: str) -> dict:
    topic, tid = unique("dtx-e"), unique("dtx-tid")
    create_topic(bootstrap, topic)
    seen: dict = {}
    with raw_client(bootstrap) as raw:
        _coordinator(raw, tid)
        seen["timeout above transaction.max.timeout.ms"] = _init(raw, tid, 900001)[0]
        pid, epoch = _init_ok(raw, tid)
        seen["EndTxn commit with no partition"] = [_end(raw, tid, pid, epoch, True, v) for v in range(0, 5)]
        seen["EndTxn abort with no partition"] = [_end(raw, tid, pid, epoch, False, v) for v in range(0, 5)]
        seen["EndTxn with the wrong producer id"] = _end(raw, tid, pid + 1, epoch, True)
        seen["AddPartitions"] = _add_partitions(raw, tid, pid, epoch, topic)
        # A second InitProducerId aborts the open transaction with the epoch bumped: the old epoch is fenced.
        new_pid, new_epoch = _init_ok(raw, tid)
        seen["second init bumps the epoch"] = (new_pid == pid, new_epoch - epoch)
        seen["AddPartitions, fenced epoch, v0-v5"] = [
            _add_partitions(raw, tid, pid, epoch, topic, version=v) for v in range(0, 6)]
        seen["EndTxn, fenced epoch, v0-v4"] = [_end(raw, tid, pid, epoch, True, v) for v in range(0, 5)]
        seen["AddOffsetsToTxn, fenced epoch, v0-v4"] = [plain(raw.request(ApiKey.ADD_OFFSETS_TO_TXN, v, {
            "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "group_id": "g"}).error_code)
            for v in range(0, 5)]
        seen["AddOffsetsToTxn, unknown producer id"] = plain(raw.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
            "transactional_id": tid, "producer_id": pid + 1, "producer_epoch": new_epoch,
            "group_id": "g"}).error_code)
        seen["AddPartitions, unknown producer id"] = _add_partitions(raw, tid, pid + 1, new_epoch, topic)
        seen["InitProducerId with a stale producer id and epoch (KIP-360)"] = plain(raw.request(
            ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": tid, "transaction_timeout": 60000,
                                         "producer_id": pid, "producer_epoch": epoch - 1 if epoch else 5}).error_code)
        seen["InitProducerId v3 with a stale producer id and epoch"] = plain(raw.request(
            ApiKey.INIT_PRODUCER_ID, 3, {"transactional_id": tid, "transaction_timeout": 60000,
                                         "producer_id": pid, "producer_epoch": epoch - 1 if epoch else 5}).error_code)
        nobody = unique("nobody")
        _coordinator(raw, nobody)
        seen["unknown id: EndTxn"] = _retry(lambda: _end(raw, nobody, 1, 0, True))
    return seen


def _retry(call, while_codes=(16, 14)):
    """``call()`` again while it answers NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS (Kafka loads a new
    __transaction_state partition after FindCoordinator already named it)."""
    codes = []

    def answered():
        codes.append(call())
        return codes[-1] not in while_codes

    with contextlib.suppress(TimedOut):  # the last answer is the one compared
        wait_until(answered, WAIT_S, what="an answer other than a retriable error")
    return codes[-1]


def _txn_offset_commit(raw: RawClient, tid: str, group: str, pid: int, epoch: int, topic: str,
                       version: int = 3) -> list[int]:
    values = {"transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
              "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                         "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    if version >= 3:
        values.update(generation_id=-1, member_id="", group_instance_id=None)
    r = raw.request(ApiKey.TXN_OFFSET_COMMIT, version, values)
    return [plain(p.error_code) for t in r.topics for p in t.partitions]


def offsets_in_transactions(bootstrap: str) -> dict:
    """AddOffsetsToTxn and TxnOffsetCommit: before the group joined the transaction, after, fenced, unknown."""
    topic, tid, group = unique("dtx-o"), unique("dtx-tid"), unique("dtx-g")
    create_topic(bootstrap, topic)
    seen: dict = {}
    with raw_client(bootstrap) as raw:
        _coordinator(raw, tid)
        _group_coordinator(raw, group)
        pid, epoch = _init_ok(raw, tid)
        seen["TxnOffsetCommit with no transaction"] = _txn_offset_commit(raw, tid, group, pid, epoch, topic)
        seen["AddPartitions"] = _add_partitions(raw, tid, pid, epoch, topic)
        seen["TxnOffsetCommit before AddOffsetsToTxn"] = _txn_offset_commit(raw, tid, group, pid, epoch, topic)
        seen["AddOffsetsToTxn"] = plain(raw.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
            "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "group_id": group}).error_code)
        seen["TxnOffsetCommit v0-v4"] = [_txn_offset_commit(raw, tid, group, pid, epoch, topic, v) for v in range(5)]
        seen["TxnOffsetCommit, unknown topic"] = _txn_offset_commit(raw, tid, group, pid, epoch, unique("nope"))
        seen["commit"] = _end(raw, tid, pid, epoch, True)
        new_pid, new_epoch = _init_ok(raw, tid)  # waits for the commit to complete
        seen["AddPartitions again"] = _add_partitions(raw, tid, new_pid, new_epoch, topic)
        seen["AddOffsetsToTxn again"] = plain(raw.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
            "transactional_id": tid, "producer_id": new_pid, "producer_epoch": new_epoch,
            "group_id": group}).error_code)
        seen["TxnOffsetCommit, fenced epoch, v0-v4"] = [
            _txn_offset_commit(raw, tid, group, pid, epoch, topic, v) for v in range(5)]
        seen["abort"] = _end(raw, tid, new_pid, new_epoch, False)
    return seen


def end_retried(bootstrap: str) -> dict:
    """EndTxn again once the transaction completed, InitProducerId while one is open (the coordinator aborts
    it with the epoch bumped and answers CONCURRENT_TRANSACTIONS), and the fenced producer's EndTxn after.
    (EndTxn while the markers are still in flight is not compared: a single Kafka broker writes them
    within milliseconds and nothing holds them from outside, see docs/compatibility.md.)"""
    topic, tid = unique("dtx-c"), unique("dtx-tid")
    create_topic(bootstrap, topic)
    seen: dict = {}
    with raw_client(bootstrap) as raw:
        _coordinator(raw, tid)
        pid, epoch = _init_ok(raw, tid)
        seen["AddPartitions"] = _add_partitions(raw, tid, pid, epoch, topic)
        seen["commit"] = _end(raw, tid, pid, epoch, True)
        seen["offsets"] = _wait_stable(raw, topic, at_least=1)
        seen["commit again once complete"] = _retry(lambda: _end(raw, tid, pid, epoch, True), while_codes=(51,))
        seen["abort once committed"] = _end(raw, tid, pid, epoch, False)
        seen["AddPartitions, a new transaction"] = _add_partitions(raw, tid, pid, epoch, topic)
        seen["InitProducerId with the transaction open"] = _init(raw, tid)[0]
        seen["DescribeTransactions state"] = _retry(lambda: raw.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {
            "transactional_ids": [tid]}).transaction_states[0].transaction_state, while_codes=("PrepareAbort",))
        seen["the fenced producer's commit"] = _end(raw, tid, pid, epoch, True)
        seen["offsets after the abort"] = _wait_stable(raw, topic, at_least=2)
    return seen


def verification(bootstrap: str) -> dict:
    """KIP-890 part 1: a transactional batch to a partition not in the producer's transaction."""
    topic, tid = unique("dtx-v"), unique("dtx-tid")
    create_topic(bootstrap, topic, partitions=3)
    seen: dict = {}
    with raw_client(bootstrap) as raw:
        _coordinator(raw, tid)
        pid, epoch = _init_ok(raw, tid)
        seen["verify_only before any AddPartitions"] = _verify_only(raw, tid, pid, epoch, topic)
        seen["produce v9, no transaction"] = _produce(raw, tid, topic, pid, epoch, 0, [b"x"], partition=0)
        seen["AddPartitions p0"] = _add_partitions(raw, tid, pid, epoch, topic)
        seen["verify_only p0"] = _verify_only(raw, tid, pid, epoch, topic)
        seen["verify_only p0, p1"] = _verify_only(raw, tid, pid, epoch, topic, (0, 1))
        seen["verify_only v4 p0, p1"] = _verify_only(raw, tid, pid, epoch, topic, (0, 1), version=4)
        seen["verify_only p0, wrong epoch"] = _verify_only(raw, tid, pid, epoch + 1, topic)
        seen["produce v9 p0"] = _produce(raw, tid, topic, pid, epoch, 0, [b"a"], partition=0)
        seen["produce v9 p1, not added"] = _produce(raw, tid, topic, pid, epoch, 0, [b"b"], partition=1)
        seen["produce v10 p1, not added"] = _produce(raw, tid, topic, pid, epoch, 0, [b"b"], partition=1,
                                                     version=10)
        seen["produce v12 p2, not added"] = _produce(raw, tid, topic, pid, epoch, 0, [b"b"], partition=2,
                                                     version=12)
        seen["produce v11 p1, not added"] = _produce(raw, tid, topic, pid, epoch, 0, [b"b"], partition=1,
                                                     version=11)
        seen["p1 offsets"] = _offsets(raw, topic, 1)
        seen["p2 offsets"] = _offsets(raw, topic, 2)
        r = raw.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                     "producer_id": -1, "producer_epoch": -1})
        seen["produce v9 p2, a transactional id the coordinator does not know"] = _produce(
            raw, unique("nobody"), topic, r.producer_id, r.producer_epoch, 0, [b"n"], partition=2)
        seen["produce v9 p0, other transactional id"] = _produce(raw, unique("other"), topic, pid, epoch, 1, [b"c"])
        seen["commit"] = _end(raw, tid, pid, epoch, True)
        seen["p0 offsets"] = _wait_stable(raw, topic, 0)
        # the coordinator completes the commit once every marker is acknowledged, a moment after the partition's
        # last stable offset moved: until then a verification is answered retriably (NOT_ENOUGH_REPLICAS)
        seen["state after the commit"] = _retry(lambda: raw.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {
            "transactional_ids": [tid]}).transaction_states[0].transaction_state, while_codes=("PrepareCommit",))
        seen["produce v9 p0 after the commit"] = _produce(raw, tid, topic, pid, epoch, 2, [b"d"], partition=0)
    return seen


def _describe(raw: RawClient, tid: str, pids: dict[int, str]) -> dict:
    """DescribeTransactions of ``tid``; partitions sorted (Kafka's come from a hash set, in no set order)."""
    (d,) = raw.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]}).transaction_states
    return {"error_code": plain(d.error_code), "state": d.transaction_state, "timeout_ms": plain(d.transaction_timeout),
            "started": plain(d.transaction_start_time) > 0, "producer_id": pids.get(d.producer_id, d.producer_id),
            "producer_epoch": d.producer_epoch, "topics": sorted((t.topic == pids["topic"], sorted(t.partitions))
                                                                 for t in d.topics)}


def _list(raw: RawClient, tid: str, pids: dict, **filters) -> tuple:
    r = raw.request(ApiKey.LIST_TRANSACTIONS, 1, {"state_filters": filters.get("states", []),
                                                  "producer_id_filters": filters.get("producer_ids", []),
                                                  "duration_filter": -1})
    return plain(r.error_code), list(r.unknown_state_filters), sorted(
        (t.transaction_state, pids.get(t.producer_id, "other")) for t in r.transaction_states
        if t.transactional_id == tid)


def describe_and_list(bootstrap: str) -> dict:
    """DescribeTransactions and ListTransactions of one id: empty, open on two partitions, committed."""
    topic, tid = unique("dtx-d"), unique("dtx-tid")
    create_topic(bootstrap, topic, partitions=2)
    seen: dict = {}
    with raw_client(bootstrap) as raw:
        _coordinator(raw, tid)
        pid, epoch = _init_ok(raw, tid, timeout_ms=45000)
        pids = {pid: "P0", "topic": topic}
        # (DescribeTransactions of an Empty id answers start time -1, which kio's parser refuses.)
        seen["list, empty"] = _list(raw, tid, pids, producer_ids=[pid])
        seen["AddPartitions"] = _add_partitions(raw, tid, pid, epoch, topic, (0, 1))
        seen["open"] = _describe(raw, tid, pids)
        seen["list Ongoing"] = _list(raw, tid, pids, states=["Ongoing"])
        seen["list unknown state"] = _list(raw, tid, pids, states=["Nope", "Ongoing"])
        seen["commit"] = _end(raw, tid, pid, epoch, True)
        _wait_stable(raw, topic, 0, at_least=1)
        _wait_stable(raw, topic, 1, at_least=1)
        seen["committed"] = _describe(raw, tid, pids)

        def past_prepare():
            if seen["committed"]["state"] != "PrepareCommit":
                return True
            time.sleep(0.05)
            seen["committed"] = _describe(raw, tid, pids)
            return False

        with contextlib.suppress(TimedOut):  # the state is what is compared
            wait_until(past_prepare, WAIT_S, interval=0, what="the state past PrepareCommit")
        seen["list CompleteCommit"] = _list(raw, tid, pids, states=["CompleteCommit"], producer_ids=[pid])
    return seen


def local_aborts(bootstrap: str) -> dict:
    """Three transactions, aborted, committed, aborted: a read_committed Fetch from the local log lists both
    aborted ones (in Kafka's order)."""
    topic, tid = unique("dtx-l"), unique("dtx-tid")
    create_topic(bootstrap, topic)
    seen: dict = {}
    pids: dict[int, str] = {}
    with raw_client(bootstrap) as raw:
        _coordinator(raw, tid)
        pid, epoch = _init_ok(raw, tid)
        pids[pid] = "P0"
        for t, commit in enumerate((False, True, False)):
            assert _retry(lambda: _add_partitions(raw, tid, pid, epoch, topic)[0], while_codes=(51,)) == NONE
            assert _produce(raw, tid, topic, pid, epoch, 2 * t, [b"a", b"b"]) == NONE
            assert _end(raw, tid, pid, epoch, commit) == NONE
            _wait_stable(raw, topic, at_least=3 * (t + 1))
        seen["fetch from 0"] = _normalize_fetch(_fetch(raw, topic, 1), pids)
        seen["fetch from 4"] = _normalize_fetch(_fetch(raw, topic, 1, 4), pids)
    return seen


def _end_v5(raw: RawClient, tid: str, pid: int, epoch: int, commit: bool, base: tuple[int, int]) -> tuple:
    """EndTxn v5: its error, and the producer id (same as ``base``'s or not) and epoch (relative to ``base``'s)
    it answers (-1 with an error)."""
    r = raw.request(ApiKey.END_TXN, 5, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                        "committed": commit})
    if r.producer_id < 0:
        return plain(r.error_code), r.producer_id, r.producer_epoch
    return plain(r.error_code), r.producer_id == base[0], r.producer_epoch - base[1]


def _init_kip360(raw: RawClient, tid: str, pid: int, epoch: int) -> tuple:
    """InitProducerId v5 naming the producer's id and epoch: its error, whether the id stayed, the epoch change."""
    r = raw.request(ApiKey.INIT_PRODUCER_ID, 5, {"transactional_id": tid, "transaction_timeout": 60000,
                                                 "producer_id": pid, "producer_epoch": epoch})
    if r.producer_id < 0:
        return plain(r.error_code), -1, -1
    return plain(r.error_code), r.producer_id == pid, r.producer_epoch - epoch


def transaction_version_2(bootstrap: str) -> dict:
    """KIP-890 part 2 (both finalize transaction.version 2): Produce v12 with no AddPartitionsToTxn, EndTxn v5's
    bumped epochs, its retries once complete, the markers' epochs, the next transaction at the new epoch, and
    an abort of a transaction that never began."""
    topic, tid, tid2 = unique("dtx-v2"), unique("dtx-tid"), unique("dtx-tid")
    create_topic(bootstrap, topic)
    seen: dict = {}
    pids: dict[int, str] = {}
    with raw_client(bootstrap) as raw:
        for version in (3, 4):  # KIP-1022: a supported feature with min version 0 is listed from v4 on
            r = raw.request(ApiKey.API_VERSIONS, version, {"client_software_name": "t", "client_software_version": "1"})
            seen[f"ApiVersions v{version}: finalized transaction.version"] = [
                (f.name, f.max_version_level, f.min_version_level) for f in r.finalized_features
                if f.name == "transaction.version"]
            seen[f"ApiVersions v{version}: supported transaction.version"] = [
                (f.name, f.min_version, f.max_version) for f in r.supported_features if f.name == "transaction.version"]
            seen[f"ApiVersions v{version}: finalized features epoch above -1"] = r.finalized_features_epoch > -1
        _coordinator(raw, tid)
        pid, epoch = _init_ok(raw, tid)
        pids[pid] = "P0"
        base = (pid, epoch)
        seen["produce v12, no AddPartitions"] = _retry(
            lambda: _produce(raw, tid, topic, pid, epoch, 0, [b"c1", b"c2"], version=12), while_codes=(19, 51))
        seen["open"] = _describe(raw, tid, {**pids, "topic": topic})
        seen["commit v5"] = _end_v5(raw, tid, pid, epoch, True, base)
        seen["committed: offsets"] = _wait_stable(raw, topic, at_least=3)
        _wait_complete(raw, tid)
        seen["commit v5 again, the old epoch"] = _end_v5(raw, tid, pid, epoch, True, base)
        seen["abort v5, the old epoch"] = _end_v5(raw, tid, pid, epoch, False, base)
        seen["commit v5, the new epoch, nothing produced"] = _end_v5(raw, tid, pid, epoch + 1, True, base)
        seen["produce v12, the new epoch"] = _retry(
            lambda: _produce(raw, tid, topic, pid, epoch + 1, 0, [b"a1"], version=12), while_codes=(19, 51))
        seen["produce v12, the old epoch"] = _produce(raw, tid, topic, pid, epoch, 2, [b"z"], version=12)
        seen["abort v5"] = _end_v5(raw, tid, pid, epoch + 1, False, base)
        seen["aborted: offsets"] = _wait_stable(raw, topic, at_least=5)
        seen["fetch read_uncommitted"] = _normalize_fetch(_fetch(raw, topic, 0), pids)
        seen["fetch read_committed"] = _normalize_fetch(_fetch(raw, topic, 1), pids)
        pid2, epoch2 = _init_ok(raw, tid2)
        seen["abort v5 of a transaction that never began"] = _end_v5(raw, tid2, pid2, epoch2, False, (pid2, epoch2))
        _wait_complete(raw, tid2)
        seen["commit v5 of a transaction that never began"] = _end_v5(raw, tid2, pid2, epoch2, True, (pid2, epoch2))
        _wait_complete(raw, tid)
        seen["abort v5, the current epoch of a completed abort"] = _end_v5(raw, tid, pid, epoch + 2, False, base)
        _wait_complete(raw, tid)
        seen["commit v5, the current epoch of a completed abort"] = _end_v5(raw, tid, pid, epoch + 2, True, base)
        seen["state at the end"] = _describe(raw, tid, {**pids, "topic": topic})
        seen["InitProducerId with the epoch before the empty abort"] = _init_kip360(raw, tid2, pid2, epoch2)
        tid3 = unique("dtx-tid")
        pid3, epoch3 = _init_ok(raw, tid3)
        assert _retry(lambda: _produce(raw, tid3, topic, pid3, epoch3, 0, [b"k"], version=12),
                      while_codes=(19, 51)) == NONE
        seen["commit v5, a third id"] = _end_v5(raw, tid3, pid3, epoch3, True, (pid3, epoch3))
        _wait_stable(raw, topic, at_least=7)
        seen["InitProducerId with the epoch before the commit"] = _retry(
            lambda: _init_kip360(raw, tid3, pid3, epoch3), while_codes=((51, -1, -1),))
    return seen


SCENARIOS = {"transaction version 2": transaction_version_2, "markers": markers_and_stable_offsets,
             "errors": coordinator_errors,
             "offsets": offsets_in_transactions, "describe": describe_and_list, "end retried": end_retried,
             "verification": verification, "local aborts": local_aborts}


@pytest.fixture(scope="module")
def observed(kafka_peer, tierlog_peer):
    cache: dict = {}

    def get(name):
        if name not in cache:
            cache[name] = (SCENARIOS[name](kafka_peer.bootstrap), SCENARIOS[name](tierlog_peer.bootstrap))
        return cache[name]
    return get


# Deliberate differences (docs/compatibility.md): path -> (Kafka's value, tierlog's value, reason).
DELIBERATE: dict = {}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_same_as_kafka(observed, name):
    kafka, tierlog = observed(name)
    print(f"\n{name} kafka:   {kafka}\n{name} tierlog: {tierlog}")
    unexplained = []
    for d in differences(kafka, tierlog, name):
        path = d.split(": kafka=")[0]
        if path in DELIBERATE:
            k, t, _ = DELIBERATE[path]
            assert d == f"{path}: kafka={k!r} tierlog={t!r}", (d, DELIBERATE[path])
        else:
            unexplained.append(d)
    assert not unexplained, f"{name} differs from Apache Kafka:\n  " + "\n  ".join(unexplained)
    for path in DELIBERATE:  # a deliberate difference that went away is stale here
        if path.startswith(name + "."):
            assert any(d.startswith(path + ":") for d in differences(kafka, tierlog, name)), path


# ------------------------------------------------------------------------------------- from the remote tier

TIERED_TOPIC = {"remote.storage.enable": "true", "segment.bytes": "1048576"}  # Kafka 4's smallest segment
TIERED_TXNS = 24  # of 5 batches of 20 records of ~1 KB: two rolled segments and an active one



@pytest.fixture(scope="module")
def tierlog_tiered_txn(tmp_path_factory):
    """A tiering tierlog broker as the session's ``tierlog_tiered``, with the transaction state log of one node
    (the settings the tiered Kafka peer has)."""
    from tests.harness.apache_kafka import SHARED_SETTINGS
    from tests.harness.broker import BrokerProcess
    root = tmp_path_factory.mktemp("tierlog-tiered-txn")
    b = BrokerProcess(root / "logs", {
        **SHARED_SETTINGS, "remote.log.storage.system.enable": "true", "rsm.config.dir": str(root / "remote"),
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
        "remote.log.manager.task.interval.ms": "500", "log.retention.check.interval.ms": "500"}).start()
    yield b
    b.stop()


def _special_offsets(raw: RawClient, topic: str) -> dict:
    """ListOffsets earliest (-2), earliest local (-4), latest tiered (-5) and latest (-1)."""
    out = {}
    for ts in (-2, -4, -5, -1):
        r = raw.request(ApiKey.LIST_OFFSETS, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": ts}]}]})
        out[ts] = r.topics[0].partitions[0].offset
    return out


def tiered_transactions(bootstrap: str) -> dict:
    """Committed and aborted transactions (every third aborted) tiered and deleted locally, then read with
    read_committed from the remote tier: the aborted transactions a Fetch returns and what it returns."""
    topic, tid = unique("dtx-r"), unique("dtx-tid")
    create_topic(bootstrap, topic, configs=TIERED_TOPIC)
    seen: dict = {}
    pids: dict[int, str] = {}
    aborted_starts = []
    with raw_client(bootstrap) as raw:
        _coordinator(raw, tid)
        pid, epoch = _init_ok(raw, tid)
        pids[pid] = "P0"
        seq = 0
        for t in range(TIERED_TXNS):
            # CONCURRENT_TRANSACTIONS until the last transaction's complete state is written, after its marker.
            assert _retry(lambda: _add_partitions(raw, tid, pid, epoch, topic)[0], while_codes=(51,)) == NONE
            start = _offsets(raw, topic)["high_watermark"]
            for b in range(5):
                batch = build_batch([(b"k%d" % j, bytes([(t * 5 + b) % 256]) * 1000) for j in range(20)],
                                    producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
                seq += 20
                r = raw.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 10000, "transactional_id": tid,
                                                    "topic_data": [{"name": topic, "partition_data": [
                                                        {"index": 0, "records": batch}]}]})
                assert plain(r.responses[0].partition_responses[0].error_code) == NONE
            commit = t % 3 != 1
            assert _end(raw, tid, pid, epoch, commit) == NONE
            _wait_stable(raw, topic, at_least=start + 101)  # the marker is written before the next transaction
            if not commit:
                aborted_starts.append(start)
        r = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": 2, "resource_name": topic, "configs": [
                {"name": "local.retention.bytes", "config_operation": 0, "value": "1"}]}], "validate_only": False})
        assert plain(r.responses[0].error_code) == NONE

        def tiered():  # both rolled segments tiered and deleted locally: the local log is the active segment
            special = _special_offsets(raw, topic)
            # The segments roll at 1030 and 2060 of 2424 (1 MiB of ~101 KB transactions): past two thirds of the
            # log, both are gone; a peer that had tiered only the first one would be compared too early.
            if special[-5] > 0 and special[-4] == special[-5] + 1 and 3 * special[-4] > 2 * special[-1]:
                return special
            return not_yet(special)

        special = wait_until(tiered, 180, interval=0.5, what="both rolled segments tiered (the special offsets)")
        seen["special offsets"] = special
        remote_aborted = [s for s in aborted_starts if s < special[-4]]
        assert len(remote_aborted) >= 2, (aborted_starts, special)  # the comparison reads aborts from remote
        for at in (0, remote_aborted[0], remote_aborted[1] + 50, special[-4]):  # the last one reads locally
            f = _normalize_fetch(_fetch(raw, topic, 1, at), pids)
            # Offsets only, per batch (the record bytes are the same by construction).
            f["batches"] = [(b["base_offset"], b["last_offset"], b["is_control"], b.get("marker_key", {}).get("type"))
                            for b in f["batches"]]
            # Sorted: Kafka lists the remote tier's aborted transactions newest first, tierlog oldest first; the
            # order carries nothing (clients index them by first offset), see docs/compatibility.md.
            f["aborted_transactions"] = sorted(f["aborted_transactions"])
            seen[f"read_committed fetch at {at}"] = f
    return seen


def test_read_committed_from_the_remote_tier_same_as_kafka(kafka_peer_tiered, tierlog_tiered_txn):
    kafka, tierlog = tiered_transactions(kafka_peer_tiered.bootstrap), tiered_transactions(tierlog_tiered_txn.bootstrap)
    print(f"\ntiered kafka:   {kafka}\ntiered tierlog: {tierlog}")
    diffs = differences(kafka, tierlog, "tiered")
    assert not diffs, "tiered differs from Apache Kafka:\n  " + "\n  ".join(diffs)


# ------------------------------------------------------------------------------------------ timeouts under TV2

QUICK_ABORTS = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


@pytest.fixture(scope="module")
def quick_abort_peers(kafka_jars, tmp_path_factory):
    """Kafka 4.4 and tierlog aborting timed-out transactions every 500 ms (a module's own pair)."""
    from tests.harness import apache_kafka
    from tests.harness.broker import BrokerProcess
    kafka = apache_kafka.start_kafka(tmp_path_factory.mktemp("kafka-quick-abort"), "kafka-quick-abort",
                                     settings=QUICK_ABORTS)
    tierlog = BrokerProcess(tmp_path_factory.mktemp("tierlog-quick-abort") / "logs",
                            {**apache_kafka.SHARED_SETTINGS, **QUICK_ABORTS}).start()
    yield kafka, tierlog
    tierlog.stop()
    kafka.stop()


def timed_out_under_tv2(bootstrap: str) -> dict:
    """A TV2 transaction (Produce v12, no AddPartitionsToTxn) left open past its 1 s timeout: the coordinator
    aborts it with the epoch bumped; what the abort marker carries, and what the timed-out producer then gets."""
    topic, tid = unique("dtx-to"), unique("dtx-tid")
    create_topic(bootstrap, topic)
    seen: dict = {}
    pids: dict[int, str] = {}
    with raw_client(bootstrap) as raw:
        _coordinator(raw, tid)
        pid, epoch = _init_ok(raw, tid, timeout_ms=1000)
        pids[pid] = "P0"
        seen["produce v12"] = _retry(lambda: _produce(raw, tid, topic, pid, epoch, 0, [b"t1"], version=12),
                                     while_codes=(19, 51))
        seen["aborted: offsets"] = _wait_stable(raw, topic, at_least=2)

        def aborted():
            (d,) = raw.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]}).transaction_states
            return d if d.transaction_state == "CompleteAbort" else not_yet(d)

        d = wait_until(aborted, WAIT_S, what=f"{tid} in CompleteAbort")
        seen["state, epoch after the timeout"] = (d.transaction_state, d.producer_epoch - epoch)
        seen["fetch read_uncommitted"] = _normalize_fetch(_fetch(raw, topic, 0), pids)
        seen["EndTxn v5 commit, the producer's epoch"] = _end_v5(raw, tid, pid, epoch, True, (pid, epoch))
        seen["EndTxn v5 abort, the producer's epoch"] = _end_v5(raw, tid, pid, epoch, False, (pid, epoch))
        seen["produce v12, the producer's epoch"] = _produce(raw, tid, topic, pid, epoch, 1, [b"t2"], version=12)
        seen["InitProducerId with the producer's id and epoch"] = _init_kip360(raw, tid, pid, epoch)
    return seen


def test_a_timed_out_transaction_under_tv2_same_as_kafka(quick_abort_peers):
    kafka, tierlog = quick_abort_peers
    expected, got = timed_out_under_tv2(kafka.bootstrap), timed_out_under_tv2(tierlog.bootstrap)
    unexplained = differences(expected, got, "timeout")
    assert not unexplained, "differs from Apache Kafka:\n  " + "\n  ".join(unexplained)
