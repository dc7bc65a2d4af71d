"""Differential against Apache Kafka 3.9 in ZooKeeper mode (issue 19): a tierlog cluster and a Kafka cluster,
three brokers each on the session's ZooKeeper under chroots of their own, go through the same admin requests
and the same failures and must answer Metadata with the same shapes (leaders, replicas, ISR, offline
replicas) and the same error codes.

Broker 1 starts alone first on both sides, so it is the controller of both; explicit replica assignments make
the leaders the same. The steps run in order, one test each, every one continuing from the one before:

1. CreateTopics to the controller: RF 3 and RF 1 topics with explicit assignments and
   min.insync.replicas=2, then refused ones; error codes compared per topic (messages differ).
2. The same kind of request to a broker that is not the controller.
3. Metadata after creation; 3b. Produce with acks=-1 against min.insync.replicas.
4. SIGKILL of broker 2 (not the controller), seen once its ZooKeeper session expired.
5. Broker 2 restarted.
6. SIGKILL of the controller.
7. DeleteTopics.

After each failure both sides must reach, on every live broker, the state Kafka's rules give from that side's
own previous state (``expected_after``): a live leader keeps leading; a partition without a live leader gets
the first replica in assignment order that is alive and in its ISR, else none (LEADER_NOT_AVAILABLE, the ISR
keeping its last member); the dead replicas are offline. Then the shapes of the two sides are compared.

Deliberate differences, each pinned on both sides so that a change on either shows here:

- None for the ISR any more: with replication, both sides' ISRs hold every live replica once settled and shapes
  compare ISR sizes (``metadata_shape(isr="size")``). Partitions whose rule inputs (previous leader, surviving
  ISR) differed are still checked against the rule on each side and listed, not compared across.
- Controller requests sent to another broker: Kafka 3.9 in ZooKeeper mode answers NOT_CONTROLLER; tierlog
  forwards them (Envelope) and answers what its controller answers, which is what Kafka's controller answers.
- Where Kafka 3.9's ZooKeeper mode and Kafka 4.1's KRaft controller differ, tierlog answers as 4.1 does: an
  assignment naming a broker that is not registered is refused with INVALID_REPLICA_ASSIGNMENT (3.9 creates the
  topic with that replica offline), and a topic named twice in one CreateTopics gets one INVALID_REQUEST
  result (3.9 answers each of the two entries).

Preferred-replica balance is off on both sides: Kafka's controller runs its first check five seconds after it
is elected and would move leaders back at a moment of its own; without it every leadership seen here comes from
the elections the failures cause.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from tests.harness import apache_kafka, rawclient
from tests.harness.broker import log_lines
from tests.harness.cluster_shapes import differences, metadata_shape
from tests.harness.rawclient import RawClient
from tests.harness.tierlog_cluster import SESSION_TIMEOUT_MS, in_parallel
from tests.harness.waiting import TimedOut, wait_until
from tierlog.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    LeaderNotAvailableError,
    NotControllerError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tierlog.protocol import ApiKey
from tierlog.records import build_batch

SETTINGS = {"auto.leader.rebalance.enable": "false"}  # see the module's docstring
CONTROLLER = 1  # started first on both sides
VICTIM = 2  # killed in step 4, restarted in step 5
#: A failure is seen once the dead broker's session expired; then the controller elects and pushes. The margin
#: is for a busy two-core machine.
SETTLE_S = SESSION_TIMEOUT_MS / 1000 + 30

RF3, RF1, RF2 = "diff-rf3", "diff-rf1", "diff-rf2"
ASSIGNMENTS = {
    RF3: [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 3, 2], [2, 1, 3], [3, 2, 1]],  # each broker leads two
    RF1: [[1], [2], [3]],
    RF2: [[2, 3], [3, 2]],  # created in step 2, through a broker that is not the controller
}
MIN_ISR_2 = {"min.insync.replicas": "2"}
CONFIGS = {RF3: MIN_ISR_2, RF1: MIN_ISR_2}
GHOST = "diff-broker-9"  # an assignment naming a broker that does not exist
#: Step 1's refused creations (sent to the controller) and the error each side answers.
REFUSED = {
    "diff-rf4": ({"partitions": 1, "rf": 4}, InvalidReplicationFactorError.code),
    RF3: ({"assignment": [[1]]}, TopicAlreadyExistsError.code),
    "diff/bad": ({"partitions": 1, "rf": 1}, InvalidTopicError.code),
    "diff-both": ({"assignment": [[1]], "partitions": 1, "rf": 1}, InvalidRequestError.code),
    "diff-uneven": ({"assignment": [[1, 2], [3]]}, InvalidReplicaAssignmentError.code),
    "diff-same-broker": ({"assignment": [[1, 1]]}, InvalidReplicaAssignmentError.code),
    "diff-rf0": ({"partitions": 1, "rf": 0}, InvalidReplicationFactorError.code),
    "diff-no-partitions": ({"partitions": 0, "rf": 1}, InvalidPartitionsError.code),
    "diff-bad-config": ({"partitions": 1, "rf": 1, "configs": {"min.insync.replicas": "many"}},
                        InvalidConfigError.code),
}
NO_ERROR = 0


# ------------------------------------------------------------------------------------ the two clusters


@dataclass(frozen=True)
class Partition:
    """A partition as Metadata shows it (ISR and offline replicas as sorted tuples)."""

    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]
    error: int

    def __repr__(self) -> str:
        return (f"leader {self.leader} replicas {list(self.replicas)} isr {list(self.isr)} "
                f"offline {list(self.offline)} error {self.error}")


def observe(md, topics: list[str]) -> dict:
    """``{(topic, index): Partition}``, and ``{(topic, None): code}`` for a topic answered with an error."""
    out: dict = {}
    for t in md.topics:
        if t.name not in topics:
            continue
        if t.error_code:
            out[(t.name, None)] = int(t.error_code)
            continue
        for p in t.partitions:
            out[(t.name, p.partition_index)] = Partition(
                int(p.leader_id), tuple(p.replica_nodes), tuple(sorted(p.isr_nodes)),
                tuple(sorted(p.offline_replicas)), int(p.error_code))
    return out


def _key(key: tuple) -> str:
    return key[0] if key[1] is None else f"{key[0]}-{key[1]}"


class Side:
    """One cluster as the steps see it: brokers by id, each killed and restarted by its PID."""

    def __init__(self, name: str, cluster):
        self.name = name
        self.cluster = cluster
        self.state: dict = {}  # what every live broker showed when the last step settled
        self.controller = CONTROLLER  # and the controller they named
        self.answer = None  # and the Metadata answer of the first of them

    def bootstrap(self, broker_id: int) -> str:
        return self.cluster.brokers[broker_id].bootstrap

    def live(self) -> list[int]:
        return sorted(self.cluster.running_ids())

    def kill(self, broker_id: int) -> None:
        self.cluster.brokers[broker_id].kill()

    def restart(self, broker_id: int) -> None:
        if self.name == "tierlog":
            self.cluster.start([broker_id])
        else:
            self.cluster.brokers[broker_id].start()

    def log_tail(self, broker_id: int, lines: int = 25) -> str:
        if self.name == "tierlog":
            text = self.cluster.output(broker_id)
        else:
            text = self.cluster.brokers[broker_id].output()
        return "\n".join(text.splitlines()[-lines:])

    @staticmethod
    def isr_of(leader: int, replicas: tuple[int, ...], live: set[int]) -> tuple[int, ...]:
        """A led partition's ISR once settled: every live replica (nothing is being written, so each has caught
        up), on both sides."""
        return tuple(sorted(r for r in replicas if r in live))

    def created(self, topics: list[str], live: set[int]) -> dict:
        """The state right after creation: the first assigned replica leads."""
        return {(t, i): Partition(reps[0], tuple(reps), self.isr_of(reps[0], tuple(reps), live), (), NO_ERROR)
                for t in topics for i, reps in enumerate(ASSIGNMENTS[t])}

    def expected_after(self, live: set[int]) -> dict:
        """Kafka's rules applied to this side's previous state, with ``live`` the brokers alive now."""
        out = {}
        for key, p in self.state.items():
            if key[1] is None:
                out[key] = p
                continue
            leader = p.leader if p.leader in live else next(
                (r for r in p.replicas if r in live and r in p.isr), -1)
            isr = self.isr_of(leader, p.replicas, live) if leader >= 0 else p.isr  # the last member stays
            out[key] = Partition(leader, p.replicas, isr, tuple(sorted(r for r in p.replicas if r not in live)),
                                 NO_ERROR if leader >= 0 else LeaderNotAvailableError.code)
        return out

    def check(self, expected: dict, live: list[int], topics: list[str], controller: int | None):
        """Every live broker lists exactly ``live``, names the same live controller (``controller`` if given)
        and shows ``expected``: ``(problems, {broker: Metadata})``."""
        problems, answers = [], {}
        for i in live:
            try:
                md = rawclient.metadata(self.bootstrap(i), topics)
            except OSError as e:
                problems.append(f"broker {i}: {e!r}")
                continue
            answers[i] = md
            listed = sorted(b.node_id for b in md.brokers)
            if listed != live:
                problems.append(f"broker {i} lists brokers {listed}, not {live}")
            if md.controller_id not in live or controller not in (None, md.controller_id):
                problems.append(f"broker {i} names controller {md.controller_id}")
            seen = observe(md, topics)
            for key in sorted(set(expected) | set(seen), key=str):
                if seen.get(key) != expected.get(key):
                    problems.append(f"broker {i} {_key(key)}: {seen.get(key)!r}, expected {expected.get(key)!r}")
        if len({md.controller_id for md in answers.values()}) > 1:
            problems.append(f"brokers name different controllers: {[md.controller_id for md in answers.values()]}")
        return problems, answers


#: The tests, in the order they run; each continues from the state the one before left.
STEPS = ("1", "2", "3", "3b", "4", "5", "6", "7")


class Pair:
    def __init__(self, kafka: Side, tierlog: Side):
        self.kafka, self.tierlog = kafka, tierlog
        self.sides = (kafka, tierlog)
        self.passed: str | None = None  # the last step that passed

    def begin(self, step: str) -> None:
        previous = STEPS[STEPS.index(step) - 1] if step != STEPS[0] else None
        assert self.passed == previous, (f"step {step} continues from step {previous}, which did not pass "
                                         f"(last passed: {self.passed})")

    def on_both(self, act) -> None:
        """``act(side)`` on both sides at once (a kill, a restart)."""
        in_parallel(act, self.sides)

    def settle(self, expected: dict, topics: list[str], since: float, timeout: float,
               controller: int | None = None) -> dict[str, float]:
        """Poll both sides until every live broker shows its side's ``expected`` (see ``Side.check``), for at
        most ``timeout`` from now; each side's state becomes what it showed. Returns the seconds each side took
        since ``since``."""
        pending, took, last = set(self.sides), {}, {}

        def reached():
            for side in sorted(pending, key=lambda s: s.name):
                live = side.live()
                problems, answers = side.check(expected[side], live, topics, controller)
                if problems:
                    last[side] = problems
                    continue
                took[side.name] = time.monotonic() - since
                side.state = observe(answers[live[0]], topics)
                side.controller = answers[live[0]].controller_id
                side.answer = answers[live[0]]
                pending.discard(side)
            return not pending

        try:
            wait_until(reached, timeout, interval=0.1, what="every side in the expected state")
        except TimedOut:
            report = []
            for side in pending:
                report.append(f"{side.name} did not reach the expected state within {timeout:.0f} s:")
                report += [f"  {line}" for line in last[side][:30]]
                for i in side.live():
                    report.append(f"  --- {side.name} broker {i}, last lines:\n{side.log_tail(i)}")
            raise AssertionError("\n".join(report)) from None
        return took

    def compare(self, step: str, topics: list[str], before: dict[str, dict] | None, took: dict[str, float]) -> None:
        """Both sides' shapes must be equal, but for the partitions whose rule inputs differed (see the module's
        docstring); print the step's one-line summary."""
        live = set(self.kafka.live())
        assert live == set(self.tierlog.live())
        apart = set()
        if before is not None:
            for key, k in before["kafka"].items():
                t = before["tierlog"].get(key)
                if key[1] is None or t is None or key not in self.kafka.state or key not in self.tierlog.state:
                    continue
                if k.leader != t.leader or (k.leader not in live and set(k.isr) & live != set(t.isr) & live):
                    apart.add(key)
        shapes = {}
        for side in self.sides:
            shape = metadata_shape(side.answer, topics, isr="size")
            for name, p in apart:
                shape["topics"].get(name, {}).get("partitions", {}).pop(p, None)
            shapes[side.name] = shape
        found = differences(shapes["kafka"], shapes["tierlog"])
        assert not found, f"{step}: shapes differ (Kafka on the left):\n" + "\n".join(found)
        same = sum(1 for key in self.kafka.state if key[1] is not None) - len(apart)
        ruled = ", ".join(f"{_key(key)} leader {self.kafka.state[key].leader}/{self.tierlog.state[key].leader}"
                          for key in sorted(apart))
        print(f"\n[{step}] settled in kafka {took.get('kafka', 0):.1f} s, tierlog {took.get('tierlog', 0):.1f} s; "
              f"controllers {self.kafka.controller}/{self.tierlog.controller}; {same} partitions the same on both"
              + (f"; by each side's ISR (kafka/tierlog): {ruled}" if ruled else "")
              + f"; ISR sizes kafka {_isr_sizes(self.kafka.state)}, tierlog {_isr_sizes(self.tierlog.state)}")


def _isr_sizes(state: dict) -> str:
    sizes: dict[str, str] = {}
    for (name, p), part in sorted(state.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        if p is not None:
            sizes[name] = sizes.get(name, "") + str(len(part.isr))
    return " ".join(f"{name}={s}" for name, s in sizes.items())


@pytest.fixture(scope="module")
def pair(zookeeper, kafka_zk_jars, tmp_path_factory):
    """Both clusters, started at the same time, broker 1 first on each."""
    kafka_dir, tierlog_dir = tmp_path_factory.mktemp("kafka39-diff"), tmp_path_factory.mktemp("tierlog-diff")
    started = time.monotonic()
    kafka, tierlog, tierlog_seconds = apache_kafka.start_both_zk_clusters(kafka_dir, tierlog_dir, zookeeper, SETTINGS,
                                                                          CONTROLLER)
    print(f"\nKafka {apache_kafka.ZK_KAFKA_VERSION} under {kafka.chroot} and tierlog under {tierlog.chroot} formed in "
          f"{time.monotonic() - started:.1f} s (tierlog alone {tierlog_seconds:.1f} s), broker {CONTROLLER} "
          f"the controller of both")
    yield Pair(Side("kafka", kafka), Side("tierlog", tierlog))
    kafka.stop()
    tierlog.stop()


# ------------------------------------------------------------------------------------ requests


def creatable(name: str, assignment: list[list[int]] | None = None, partitions: int = -1, rf: int = -1,
              configs: dict | None = None) -> dict:
    return {"name": name, "num_partitions": partitions, "replication_factor": rf,
            "assignments": [{"partition_index": i, "broker_ids": b} for i, b in enumerate(assignment or ())],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}


def create_topics(bootstrap: str, topics: list[dict]) -> list[tuple[str, int]]:
    """CreateTopics v7: ``[(name, error code)]`` in the answer's order."""
    raw = RawClient(bootstrap, timeout=30)
    try:
        resp = raw.request(ApiKey.CREATE_TOPICS, 7, {"topics": topics, "timeout_ms": 10000, "validate_only": False})
    finally:
        raw.close()
    return [(t.name, int(t.error_code)) for t in resp.topics]


def delete_topics(bootstrap: str, names: list[str]) -> dict[str, int]:
    raw = RawClient(bootstrap, timeout=30)
    try:
        resp = raw.request(ApiKey.DELETE_TOPICS, 4, {"topic_names": names, "timeout_ms": 10000})
    finally:
        raw.close()
    return {r.name: int(r.error_code) for r in resp.responses}


def produce(bootstrap: str, topic: str, partition: int, acks: int) -> tuple[int, int]:
    """Produce v9 of one record: (error code, the partition's log end offset after it)."""
    raw = RawClient(bootstrap, timeout=30)
    try:
        resp = raw.request(ApiKey.PRODUCE, 9, {"acks": acks, "timeout_ms": 10000, "topic_data": [
            {"name": topic, "partition_data": [
                {"index": partition, "records": build_batch([(None, b"v", [], int(time.time() * 1000))])}]}]})
        offsets = raw.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}]})
    finally:
        raw.close()
    return int(resp.responses[0].partition_responses[0].error_code), offsets.topics[0].partitions[0].offset


# ------------------------------------------------------------------------------------ the steps


def test_step1_create_topics_on_the_controller(pair):
    pair.begin("1")
    for side in pair.sides:
        answer = create_topics(side.bootstrap(CONTROLLER), [
            creatable(name, ASSIGNMENTS[name], configs=CONFIGS[name]) for name in (RF3, RF1)])
        assert answer == [(RF3, NO_ERROR), (RF1, NO_ERROR)], side.name

    refused = [creatable(name, **request) for name, (request, _) in REFUSED.items()]
    expected = {name: code for name, (_, code) in REFUSED.items()}
    answers = {side.name: dict(create_topics(side.bootstrap(CONTROLLER), refused)) for side in pair.sides}
    assert answers["kafka"] == expected, "Kafka 3.9 answers other codes than this test expects"
    assert answers["tierlog"] == answers["kafka"]

    # Kafka 4.1 differs from 3.9's ZooKeeper mode; tierlog answers as 4.1 (see the module's docstring).
    ghost = {side.name: create_topics(side.bootstrap(CONTROLLER), [creatable(GHOST, [[1, 2, 9]])])
             for side in pair.sides}
    assert ghost == {"kafka": [(GHOST, NO_ERROR)], "tierlog": [(GHOST, InvalidReplicaAssignmentError.code)]}
    twice = {side.name: create_topics(side.bootstrap(CONTROLLER), [creatable("diff-twice", partitions=1, rf=1)] * 2)
             for side in pair.sides}
    assert twice == {"kafka": [("diff-twice", InvalidRequestError.code)] * 2,
                     "tierlog": [("diff-twice", InvalidRequestError.code)]}
    print(f"\n[step 1] created {RF3} and {RF1} on both; {len(REFUSED)} refusals with the same codes "
          f"{sorted(set(expected.values()))}; broker 9 in an assignment: kafka {ghost['kafka'][0][1]}, tierlog "
          f"{ghost['tierlog'][0][1]}; a name twice in one request: kafka {len(twice['kafka'])} results, "
          f"tierlog {len(twice['tierlog'])}")
    pair.passed = "1"


def test_step2_create_topics_on_a_broker_that_is_not_the_controller(pair):
    pair.begin("2")
    other = 3
    request = [creatable(RF2, ASSIGNMENTS[RF2]), creatable("diff-rf4", partitions=1, rf=4),
               creatable(RF3, [[1]])]
    elsewhere = {side.name: create_topics(side.bootstrap(other), request) for side in pair.sides}
    # Kafka 3.9's brokers do not forward: the client must find the controller (and Kafka's clients do).
    assert elsewhere["kafka"] == [(t["name"], NotControllerError.code) for t in request]
    on_controller = create_topics(pair.kafka.bootstrap(CONTROLLER), request)
    assert on_controller == [(RF2, NO_ERROR), ("diff-rf4", InvalidReplicationFactorError.code),
                             (RF3, TopicAlreadyExistsError.code)]
    # tierlog's broker forwards to its controller and answers what Kafka's controller answers
    assert elsewhere["tierlog"] == on_controller
    print(f"\n[step 2] CreateTopics on broker {other}: kafka {[c for _, c in elsewhere['kafka']]} (then "
          f"{[c for _, c in on_controller]} on its controller), tierlog {[c for _, c in elsewhere['tierlog']]}")
    pair.passed = "2"


def test_step3_metadata_after_creation(pair):
    pair.begin("3")
    topics = list(ASSIGNMENTS)
    live = set(pair.kafka.live())
    since = time.monotonic()
    took = pair.settle({side: side.created(topics, live) for side in pair.sides}, topics, since, 30, CONTROLLER)
    pair.compare("step 3, after creation", topics, None, took)

    refused = [GHOST, *(name for name in REFUSED if name != RF3)]
    errors = {side.name: {name: code for (name, p), code in observe(
        rawclient.metadata(side.bootstrap(CONTROLLER), refused), refused).items() if p is None} for side in pair.sides}
    expected = {name: UnknownTopicOrPartitionError.code for name in refused}
    expected["diff/bad"] = InvalidTopicError.code
    assert errors["tierlog"] == expected
    # Kafka 3.9 created the topic naming broker 9: led by broker 1, broker 9 offline
    assert errors["kafka"] == {k: v for k, v in expected.items() if k != GHOST}
    ghost = observe(rawclient.metadata(pair.kafka.bootstrap(CONTROLLER), [GHOST]), [GHOST])
    assert ghost == {(GHOST, 0): Partition(1, (1, 2, 9), (1, 2), (9,), NO_ERROR)}
    pair.passed = "3"


def test_step3b_acks_all_against_min_insync_replicas(pair):
    pair.begin("3b")
    answers = {}
    for side in pair.sides:
        answers[side.name] = {
            f"{name}-0": produce(side.bootstrap(side.state[(name, 0)].leader), name, 0, -1) for name in (RF3, RF1, RF2)}
    # RF 3, min.insync.replicas 2: the ISR has 3 and appends, on both
    for side in pair.sides:
        assert answers[side.name][f"{RF3}-0"] == (NO_ERROR, 1), side.name
    # RF 1, min.insync.replicas 2: appended on both (Kafka caps min.insync.replicas at the replication
    # factor); RF 2 with the default of 1: appended on both
    for side in pair.sides:
        assert answers[side.name][f"{RF1}-0"] == (NO_ERROR, 1), side.name
        assert answers[side.name][f"{RF2}-0"] == (NO_ERROR, 1), side.name
    print(f"\n[step 3] Produce acks=-1 (error, log end offset): kafka {answers['kafka']}, tierlog {answers['tierlog']}")
    pair.passed = "3b"


def _failure(pair, step: str, act, controller: int | None) -> None:
    """Run ``act(side)`` on both sides, then settle each on Kafka's rules from its own previous state and
    compare."""
    topics = list(ASSIGNMENTS)
    before = {side.name: dict(side.state) for side in pair.sides}
    since = time.monotonic()
    pair.on_both(act)
    live = set(pair.kafka.live())
    took = pair.settle({side: side.expected_after(live) for side in pair.sides}, topics, since, SETTLE_S, controller)
    pair.compare(step, topics, before, took)


def test_step4_sigkill_of_a_broker_that_is_not_the_controller(pair):
    pair.begin("4")
    assert {side.controller for side in pair.sides} == {CONTROLLER}
    _failure(pair, f"step 4, broker {VICTIM} killed", lambda side: side.kill(VICTIM), CONTROLLER)
    for side in pair.sides:  # what Kafka's ZooKeeper mode shows for RF 1 on a dead broker, and tierlog too
        assert side.state[(RF1, 1)] == Partition(-1, (VICTIM,), (VICTIM,), (VICTIM,), LeaderNotAvailableError.code)
    pair.passed = "4"


def test_step5_the_broker_returns(pair):
    pair.begin("5")
    _failure(pair, f"step 5, broker {VICTIM} restarted", lambda side: side.restart(VICTIM), CONTROLLER)
    pair.passed = "5"


def test_step6_sigkill_of_the_controller(pair):
    pair.begin("6")
    _failure(pair, f"step 6, controller {CONTROLLER} killed", lambda side: side.kill(CONTROLLER), None)
    for side in pair.sides:
        assert side.controller != CONTROLLER
    pair.passed = "6"


def test_step7_delete_topics(pair):
    pair.begin("7")
    other = {side.name: next(i for i in side.live() if i != side.controller) for side in pair.sides}
    elsewhere = {side.name: delete_topics(side.bootstrap(other[side.name]), [RF2]) for side in pair.sides}
    assert elsewhere["kafka"] == {RF2: NotControllerError.code}
    assert elsewhere["tierlog"] == {RF2: NO_ERROR}  # forwarded to the controller
    assert delete_topics(pair.kafka.bootstrap(pair.kafka.controller), [RF2]) == {RF2: NO_ERROR}
    # RF1 has its partition 0 on the dead broker 1
    answers = {side.name: delete_topics(side.bootstrap(side.controller), [RF1, "diff-never"]) for side in pair.sides}
    assert answers["kafka"] == {RF1: NO_ERROR, "diff-never": UnknownTopicOrPartitionError.code}
    assert answers["tierlog"] == answers["kafka"]

    topics = list(ASSIGNMENTS)
    before = {side.name: dict(side.state) for side in pair.sides}
    expected = {}
    for side in pair.sides:
        expected[side] = {k: v for k, v in side.state.items() if k[0] == RF3}
        expected[side].update({(RF1, None): UnknownTopicOrPartitionError.code,
                               (RF2, None): UnknownTopicOrPartitionError.code})
    took = pair.settle(expected, topics, time.monotonic(), 30)
    pair.compare("step 7, after deleting two topics", topics, before, took)
    pair.passed = "7"


def test_tierlog_logged_no_error_through_the_steps(pair):
    """No tierlog broker, the killed ones included, logged an ERROR or a traceback (a failure that the shapes
    alone would not show); the warnings are counted in the printed line."""
    found, warnings = [], {}
    for i, broker in pair.tierlog.cluster.brokers.items():
        output = list(broker.output)
        found += [f"broker {i}: {m.group(0)}" for m in log_lines(output) if m["level"] in ("ERROR", "CRITICAL")]
        found += [f"broker {i}: {line.rstrip()}" for line in output if line.startswith("Traceback")]
        warnings[i] = len(log_lines(output, "WARNING"))
    print(f"\n[logs] tierlog warnings per broker {warnings}")
    assert not found, "\n".join(found)
