"""The asyncio core every tierlog client role shares: connections per broker with reconnect
back-off, the metadata cache and its refresh, and KIP-899 / KIP-1102 rebootstrap.

Kafka's rules, as its NetworkClient applies them:

- A broker whose connection failed or closed may not be dialled again for an exponentially growing
  back-off (``reconnect.backoff.ms`` doubling up to ``reconnect.backoff.max.ms``, 20 % jitter),
  reset by a successful connection.
- Metadata is refreshed when someone needs it (an unknown topic, a leader change, a failed
  request) and at least every ``metadata.max.age.ms``, from the least loaded *usable* broker:
  connected (fewest requests in flight first), connecting, or allowed to connect now. A connection
  that cannot be set up, closes, or whose request times out marks the metadata stale (NetworkClient's
  ``handleServerDisconnect``): the broker may be gone and its partitions led elsewhere.
- Refreshes back off exponentially (``retry.backoff.ms`` doubling up to ``retry.backoff.max.ms``,
  20 % jitter) after failed updates and after answers that changed no leader (KIP-580; Kafka's
  ``Metadata`` counts these as equivalent responses), so a client waiting for an election asks often at
  first and then at most every ``retry.backoff.max.ms``; an answer that moves a leader resets both counts.
- ``metadata.recovery.strategy=rebootstrap``: when an update is due and no known broker is usable,
  the client forgets the brokers it learned and starts over from ``bootstrap.servers``. The same
  happens when no metadata could be obtained for ``metadata.recovery.rebootstrap.trigger.ms``, and
  when a Metadata response carries REBOOTSTRAP_REQUIRED (129), or an ApiVersions v5 one does (KIP-1242: the
  address of a known node now answers for another cluster or node). With ``none`` the client keeps trying
  the brokers it knows; waiting operations fail with :class:`BrokersUnavailableError` at their
  timeout. As the KIP warns, a ``reconnect.backoff.max.ms`` so small that dead brokers are always
  "allowed to connect now" delays the rebootstrap until the trigger time passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Iterable, Mapping
from typing import Any

from tierlog import errors
from tierlog.client.cluster import ClusterMetadata, Node, parse_bootstrap
from tierlog.client.connection import MAX_API_VERSIONS_VERSION, BrokerConnection
from tierlog.client.errors import BrokersUnavailableError, KafkaConnectionError, KafkaTimeoutError
from tierlog.protocol import ApiKey
from tierlog.security import client_context
from tierlog.security.sasl_client import SaslCredentials

log = logging.getLogger("tierlog.client")

#: Errors of Kafka's InvalidMetadataException family: the answer says the client's leaders are out of date
#: (UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, NETWORK_EXCEPTION,
#: KAFKA_STORAGE_ERROR, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_ID, INCONSISTENT_TOPIC_ID).
STALE_METADATA_CODES = frozenset({3, 5, 6, 13, 56, 74, 75, 100, 103})


def metadata_is_stale(exc: BaseException) -> bool:
    """Whether a failed request says the leaders the client knows may be wrong: a connection that failed,
    closed or timed out (the broker may be dead and its partitions moved), or an invalid-metadata error."""
    return isinstance(exc, (KafkaConnectionError, KafkaTimeoutError)) or \
        getattr(exc, "code", None) in STALE_METADATA_CODES


def exponential_backoff(config: Mapping[str, Any], attempts: int) -> float:
    """Seconds to wait before retry number ``attempts`` (1 = the first retry): ``retry.backoff.ms``
    doubling up to ``retry.backoff.max.ms``, with 20 % jitter once the two differ (KIP-580)."""
    base = config["retry.backoff.ms"]
    cap = max(base, config.get("retry.backoff.max.ms", base))
    ms = min(cap, base * 2 ** max(0, attempts - 1))
    return ms * (random.uniform(0.8, 1.2) if cap > base else 1) / 1000


class _NoUsableNode(KafkaConnectionError):
    """Every known broker is in reconnect back-off: no update was tried, so none failed."""


def _now() -> float:
    return time.monotonic()


class _NodeState:
    """Connection bookkeeping for one broker address (node id + host + port)."""

    __slots__ = ("conn", "connecting", "failures", "next_attempt")

    def __init__(self) -> None:
        self.conn: BrokerConnection | None = None
        self.connecting: asyncio.Task | None = None
        self.failures = 0
        self.next_attempt = 0.0  # monotonic time before which the node is in reconnect back-off


def _key(node: Node) -> tuple[int, str, int]:
    return (node.node_id, node.host, node.port)


class KafkaClient:
    """Shared network layer. ``config`` is a validated client config (see
    :func:`tierlog.config.client.validate_client_config`); ``role`` names the client in logs."""

    def __init__(self, config: Mapping[str, Any], role: str) -> None:
        self.config = config
        self.role = role
        self.client_id = config.get("client.id") or f"tierlog-{role}-{id(self) & 0xFFFF:x}"
        self.cluster = ClusterMetadata(parse_bootstrap(config["bootstrap.servers"]))
        # security.protocol=SSL: every connection speaks TLS with the ssl.* settings (checked here, at once)
        protocol = str(config.get("security.protocol") or "PLAINTEXT").upper()
        self.ssl_context = (client_context(config, where=f"security.protocol={protocol}")
                            if protocol in ("SSL", "SASL_SSL") else None)
        # SASL_PLAINTEXT, SASL_SSL: every connection authenticates (and re-authenticates, KIP-368) with these
        self.sasl = SaslCredentials.from_config(config) if protocol.startswith("SASL_") else None
        self.rebootstrap_enabled = str(config.get("metadata.recovery.strategy", "rebootstrap")).lower() == "rebootstrap"
        self.rebootstrap_trigger = config.get("metadata.recovery.rebootstrap.trigger.ms", 300000) / 1000
        self.rebootstraps = 0  # how many times the client went back to bootstrap.servers
        self._api_versions_max = MAX_API_VERSIONS_VERSION  # the newest ApiVersions the last broker dialled speaks
        self._states: dict[tuple[int, str, int], _NodeState] = {}
        self._closed = False
        self._update_needed = asyncio.Event()
        self._updated = asyncio.Condition()
        self._updater: asyncio.Task | None = None
        self._last_success = 0.0  # monotonic time of the last metadata answer
        self._failing_since: float | None = None  # first failed update since the last answer
        self._last_error: BaseException | None = None
        self._last_refresh = 0.0  # monotonic time of the last update attempt that got an answer or failed
        self._refresh_failures = 0  # failed updates in a row (Kafka's Metadata.attempts)
        self._equivalent_answers = 0  # answers in a row that moved no leader
        self.metadata_updates = 0  # updates tried (answered or failed), for tests and debugging
        self._all_topics = False  # ask for every topic (admin listing)
        self.topics_of_interest: set[str] = set()
        self.allow_auto_topic_creation = False

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        if self._updater is None:
            self._updater = asyncio.get_running_loop().create_task(self._metadata_loop(),
                                                                   name=f"{self.client_id}-metadata")

    async def close(self) -> None:
        self._closed = True
        if self._updater is not None:
            self._updater.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._updater
        for st in self._states.values():
            if st.connecting is not None:
                st.connecting.cancel()
            if st.conn is not None:
                st.conn.close()
        self._states.clear()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- connections ---------------------------------------------------------------------------------

    def _state(self, node: Node) -> _NodeState:
        st = self._states.get(_key(node))
        if st is None:
            st = self._states[_key(node)] = _NodeState()
        return st

    def _backoff_seconds(self, failures: int) -> float:
        base = self.config["reconnect.backoff.ms"]
        cap = max(base, self.config["reconnect.backoff.max.ms"])
        ms = min(cap, base * (2 ** max(0, failures - 1)))
        return ms * random.uniform(0.8, 1.2) / 1000 if cap > base else ms / 1000

    def _connected(self, node: Node) -> BrokerConnection | None:
        st = self._states.get(_key(node))
        if st is not None and st.conn is not None:
            if not st.conn.closed:
                return st.conn
            self._on_disconnect(node, st)
        return None

    def _on_disconnect(self, node: Node, st: _NodeState) -> None:
        reason = st.conn.close_reason if st.conn is not None else None
        st.conn = None
        st.failures += 1
        st.next_attempt = _now() + self._backoff_seconds(st.failures)
        log.debug("%s: node %s disconnected (%s)", self.client_id, node.address, reason)
        self.request_update()

    def is_usable(self, node: Node) -> bool:
        """Connected, connecting, or allowed to connect now (KIP-899's definition)."""
        st = self._states.get(_key(node))
        if st is None:
            return True
        if self._connected(node) is not None or st.connecting is not None:
            return True
        return _now() >= st.next_attempt

    async def connection(self, node: Node) -> BrokerConnection:
        """An open connection to ``node``, dialling it if allowed; raises a retriable error when
        the node is in reconnect back-off or cannot be reached."""
        conn = self._connected(node)
        if conn is not None:
            return conn
        st = self._state(node)
        if st.connecting is None:
            wait = st.next_attempt - _now()
            if wait > 0:
                raise KafkaConnectionError(
                    f"node {node.node_id} ({node.address}) is in reconnect back-off for {wait * 1000:.0f} ms")
            st.connecting = asyncio.get_running_loop().create_task(self._dial(node, st))
        return await asyncio.shield(st.connecting)

    async def _dial(self, node: Node, st: _NodeState) -> BrokerConnection:
        try:
            conn = await BrokerConnection.open(
                node.host, node.port, node_id=node.node_id, client_id=self.client_id,
                request_timeout_ms=self.config["request.timeout.ms"],
                setup_timeout_ms=self.config["socket.connection.setup.timeout.ms"], ssl_context=self.ssl_context,
                sasl=self.sasl, cluster_id=self.cluster.cluster_id, api_versions_max=self._api_versions_max)
        except (errors.KafkaError, OSError) as exc:
            st.failures += 1
            st.next_attempt = _now() + self._backoff_seconds(st.failures)
            self._last_error = exc
            log.debug("%s: %s", self.client_id, exc)
            if isinstance(exc, errors.RebootstrapRequiredError) and self.rebootstrap_enabled:
                # KIP-1242: the address now belongs to another cluster or node: the broker list is stale
                self.rebootstrap(f"node {node.node_id} ({node.address}) answered ApiVersions with "
                                 f"REBOOTSTRAP_REQUIRED")
            else:
                self.request_update()  # the broker may be dead and its partitions led elsewhere now
            raise
        finally:
            st.connecting = None
        st.conn = conn
        st.failures = 0
        # ask ApiVersions at this broker's version from the next connection on (no UNSUPPORTED_VERSION round trip)
        self._api_versions_max = conn.api_versions.get(ApiKey.API_VERSIONS, (0, self._api_versions_max))[1]
        return conn

    def in_flight(self, node: Node) -> int:
        conn = self._connected(node)
        return conn.in_flight if conn is not None else 0

    def least_loaded_node(self, nodes: Iterable[Node] | None = None) -> Node | None:
        """A connected node with the fewest requests in flight, else a connecting one, else one that
        may be dialled now; None when every known node is in reconnect back-off."""
        candidates = list(self.cluster.brokers.values() if nodes is None else nodes)
        if not candidates:
            return None
        start = random.randrange(len(candidates))
        best, best_load, connecting, dialable = None, None, None, None
        for i in range(len(candidates)):
            node = candidates[(start + i) % len(candidates)]
            conn = self._connected(node)
            if conn is not None:
                if best_load is None or conn.in_flight < best_load:
                    best, best_load = node, conn.in_flight
                    if best_load == 0:
                        break
                continue
            st = self._states.get(_key(node))
            if st is not None and st.connecting is not None:
                connecting = connecting or node
            elif st is None or _now() >= st.next_attempt:
                dialable = dialable or node
        return best or connecting or dialable

    def node(self, node_id: int) -> Node | None:
        return self.cluster.brokers.get(node_id)

    # -- requests --------------------------------------------------------------------------------------

    async def send(self, node: Node, api_key: int, values: Mapping[str, Any], **kwargs: Any) -> Any:
        """One request to ``node``. A connection that cannot be set up, closes or times out requests a
        metadata update and its error propagates (retriable); the caller decides whether to retry."""
        conn = await self.connection(node)
        try:
            return await conn.request(api_key, values, **kwargs)
        except (KafkaConnectionError, KafkaTimeoutError):
            st = self._states.get(_key(node))
            if st is not None and st.conn is conn:
                self._on_disconnect(node, st)
            raise

    async def version(self, node: Node, api_key: int, max_version: int | None = None) -> int:
        """The version a request to ``node`` would be sent at (for requests whose fields differ by version)."""
        return (await self.connection(node)).version(api_key, max_version)

    async def send_any(self, api_key: int, values: Mapping[str, Any], **kwargs: Any) -> Any:
        """One request to the least loaded usable node (waiting for metadata recovery if none)."""
        node = self.least_loaded_node()
        if node is None:
            node = await self._recover_node(self.config["request.timeout.ms"] / 1000)
        return await self.send(node, api_key, values, **kwargs)

    async def _recover_node(self, timeout: float) -> Node:
        """Wait until some node is usable, rebootstrapping if allowed."""
        deadline = _now() + timeout
        while True:
            node = self.least_loaded_node()
            if node is None and self.rebootstrap_enabled:
                self.rebootstrap("no known broker is usable")
                node = self.least_loaded_node()
            if node is not None:
                return node
            if _now() >= deadline:
                raise self.unavailable_error()
            await asyncio.sleep(min(0.05, max(0.0, deadline - _now())))

    @property
    def brokers_unreachable(self) -> bool:
        """True while metadata updates fail (no known broker answered since the last success)."""
        return self._failing_since is not None

    def timeout_error(self, message: str, last: BaseException | None = None) -> KafkaTimeoutError:
        """The error for an operation whose time ran out: :class:`BrokersUnavailableError` while no
        known broker answers (what ``metadata.recovery.strategy=none`` leads to when the cluster moved),
        else :class:`KafkaTimeoutError`; ``last`` (the last retriable error) is named in the message."""
        if isinstance(last, BrokersUnavailableError):
            return last
        if last is not None:
            message = f"{message}; last error: {last}"
        # the operation's own last attempt could not connect and no broker is connected: the same
        # verdict, even when the background metadata update has not failed yet (a busy machine)
        cut_off = isinstance(last, KafkaConnectionError) and not any(
            self._connected(n) is not None for n in self.cluster.brokers.values())
        if self.brokers_unreachable or cut_off:
            return BrokersUnavailableError(f"{message}; {self.unavailable_error()}")
        return KafkaTimeoutError(message)

    def unavailable_error(self) -> BrokersUnavailableError:
        known = ", ".join(f"{n.node_id}@{n.address}" for n in self.cluster.brokers.values())
        why = ("metadata.recovery.strategy=none, so the client does not go back to bootstrap.servers"
               if not self.rebootstrap_enabled else "rebootstrapping did not help either")
        last = f"; last error: {self._last_error}" if self._last_error else ""
        return BrokersUnavailableError(f"no broker is reachable (known: {known}); {why}{last}")

    # -- metadata ----------------------------------------------------------------------------------

    def rebootstrap(self, why: str) -> None:
        log.info("%s: rebootstrapping from bootstrap.servers (%s)", self.client_id, why)
        self.rebootstraps += 1
        self.cluster.rebootstrap()
        self._failing_since = None
        # bootstrap addresses start fresh: forget their back-off so they can be dialled at once
        for node in self.cluster.bootstrap_nodes:
            st = self._states.get(_key(node))
            if st is not None and st.conn is None and st.connecting is None:
                st.next_attempt = 0.0
        self.request_update()

    def request_update(self) -> None:
        self._update_needed.set()

    def add_topics(self, topics: Iterable[str]) -> bool:
        """Track ``topics``; True when one was new (an update has been requested)."""
        new = set(topics) - self.topics_of_interest
        if new:
            self.topics_of_interest |= new
            self._equivalent_answers = 0  # a new topic is not a retry: ask at once
            self.request_update()
        return bool(new)

    def want_all_topics(self, flag: bool = True) -> None:
        self._all_topics = flag
        if flag:
            self.request_update()

    def time_to_allow_update(self) -> float:
        """Seconds before the next metadata update may go out: the exponential retry back-off after
        failed updates or after answers that moved no leader (Metadata.timeToAllowUpdate)."""
        n = max(self._refresh_failures, self._equivalent_answers)
        if n == 0:
            return 0.0
        return max(0.0, self._last_refresh + exponential_backoff(self.config, n) - _now())

    async def _metadata_loop(self) -> None:
        max_age = self.config["metadata.max.age.ms"] / 1000
        retry_backoff = self.config["retry.backoff.ms"] / 1000
        while not self._closed:
            wait = max(0.0, self._last_success + max_age - _now())
            if not self._update_needed.is_set() and wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._update_needed.wait(), wait)
            if _now() >= self._last_success + max_age:
                self._equivalent_answers = 0  # the periodic refresh is not a retry
            delay = self.time_to_allow_update()
            if delay > 0:
                await asyncio.sleep(delay)
            self._update_needed.clear()
            try:
                await self._update_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep the loop alive: callers see errors through their own timeouts
                self._last_error = exc
                log.debug("%s: metadata update failed: %r", self.client_id, exc)
                if self._failing_since is None:
                    self._failing_since = _now()
                self._update_needed.set()
                if isinstance(exc, _NoUsableNode):
                    await asyncio.sleep(retry_backoff)  # nothing was asked: look again soon
                else:
                    self._refresh_failures += 1
                    self._last_refresh = _now()

    async def update_metadata(self, timeout_ms: int | None = None) -> None:
        """One metadata update now, on the caller's task: its failure is the caller's error (an admin call
        learning the brokers from its bootstrap addresses)."""
        if self.least_loaded_node() is None:  # as send_any: wait for a usable node (its errors are the ones said)
            await self._recover_node(self.config["request.timeout.ms"] / 1000)
        await self._update_once(timeout_ms)

    async def _update_once(self, timeout_ms: int | None = None) -> None:
        if (self.rebootstrap_enabled and self._failing_since is not None
                and _now() - self._failing_since >= self.rebootstrap_trigger):
            self.rebootstrap(f"no metadata for {self.rebootstrap_trigger * 1000:.0f} ms "
                             "(metadata.recovery.rebootstrap.trigger.ms)")
        node = self.least_loaded_node()
        if node is None:
            if self.rebootstrap_enabled and not self.cluster.bootstrapped:
                self.rebootstrap("no known broker is usable")
                node = self.least_loaded_node()
            if node is None:
                # every node in back-off: wait for the first to become dialable
                states = [self._states.get(_key(n)) for n in self.cluster.brokers.values()]
                soonest = min((st.next_attempt for st in states if st is not None), default=_now())
                raise _NoUsableNode(
                    f"every known broker is in reconnect back-off (next in {max(0.0, soonest - _now()):.3f} s)")
        all_topics = self._all_topics
        topics = None if all_topics else [{"name": t} for t in sorted(self.topics_of_interest)]
        self.metadata_updates += 1
        response = await self.send(node, ApiKey.METADATA, {
            "topics": topics, "allow_auto_topic_creation": self.allow_auto_topic_creation,
            "include_topic_authorized_operations": False}, timeout_ms=timeout_ms)
        code = getattr(response, "error_code", None)
        if code is not None and code.value:
            if code.value == errors.RebootstrapRequiredError.code and self.rebootstrap_enabled:
                self.rebootstrap("the broker answered REBOOTSTRAP_REQUIRED")
                return
            cls = errors.error_for_code(code.value)
            raise cls(f"Metadata refused by node {node.node_id}: {cls.name}"
                      + (" (metadata.recovery.strategy=none: not rebootstrapping)"
                         if code.value == errors.RebootstrapRequiredError.code else ""))
        leaders = self.cluster.leadership()
        self.cluster.update(response, all_topics=all_topics)
        self._equivalent_answers = self._equivalent_answers + 1 if self.cluster.leadership() == leaders else 0
        self._refresh_failures = 0
        self._last_refresh = _now()
        for t in self.cluster.topics.values():
            if t.error_code in (errors.LeaderNotAvailableError.code, errors.UnknownTopicOrPartitionError.code) \
                    and t.name in self.topics_of_interest:
                # topic still being created or missing: look again after retry.backoff.ms
                asyncio.get_running_loop().call_later(self.config["retry.backoff.ms"] / 1000, self.request_update)
                break
        if any(p.leader < 0 for t in self.cluster.topics.values() for p in t.partitions.values()):
            asyncio.get_running_loop().call_later(self.config["retry.backoff.ms"] / 1000, self.request_update)
        self._last_success = _now()
        self._failing_since = None
        self._last_error = None
        async with self._updated:
            self._updated.notify_all()

    async def wait_for_update(self, timeout: float) -> None:
        """Request a metadata update and wait for the next answer (at most ``timeout`` seconds).
        Raises KafkaTimeoutError, or BrokersUnavailableError when no broker was reachable."""
        version = self.cluster.version
        self.request_update()
        try:
            async with self._updated:
                await asyncio.wait_for(self._updated.wait_for(lambda: self.cluster.version != version), timeout)
        except TimeoutError:
            if self._last_error is not None and isinstance(self._last_error, (KafkaConnectionError,
                                                                              KafkaTimeoutError)):
                raise self.unavailable_error() from None
            raise self.timeout_error(f"no metadata update within {timeout * 1000:.0f} ms", self._last_error) from None

    async def wait_for_topic(self, topic: str, deadline: float) -> int:
        """Partition count of ``topic``, fetching metadata until it is known or ``deadline`` passes."""
        self.add_topics([topic])
        while True:
            n = self.cluster.partition_count(topic)
            if n:
                return n
            info = self.cluster.topics.get(topic)
            if info is not None and info.error_code and info.error_code not in (
                    errors.LeaderNotAvailableError.code, errors.UnknownTopicOrPartitionError.code):
                cls = errors.error_for_code(info.error_code)
                raise cls(f"topic {topic!r}: {cls.name}")
            remaining = deadline - _now()
            if remaining <= 0:
                raise self.timeout_error(f"Topic {topic} not present in metadata after the wait")
            try:
                await self.wait_for_update(remaining)
            except KafkaTimeoutError:
                if deadline - _now() <= 0:
                    raise


async def retry_until(operation, deadline: float, config: Mapping[str, Any], what: str,
                      client: KafkaClient | None = None):
    """Run ``await operation()`` until it succeeds, retrying retriable errors with Kafka's
    exponential ``retry.backoff.ms`` .. ``retry.backoff.max.ms`` (20 % jitter) until ``deadline``
    (a ``time.monotonic()`` value); then the last retriable error is raised, wrapped in
    :class:`KafkaTimeoutError` when it was not one already (``client``'s
    :meth:`~KafkaClient.timeout_error` when given). Non-retriable errors pass at once."""
    attempt = 0
    cause: errors.KafkaError | None = None
    while True:
        try:
            return await operation()
        except errors.KafkaError as exc:
            if not exc.retriable:
                raise
            # an attempt that only found the budget spent says nothing; the attempt before it does
            if not (isinstance(exc, KafkaTimeoutError) and cause is not None and _now() >= deadline):
                cause = exc
            attempt += 1
            delay = exponential_backoff(config, attempt)
            if _now() + delay >= deadline:
                if client is not None:
                    verdict = client.timeout_error(f"{what} did not complete in time", cause)
                    if isinstance(verdict, BrokersUnavailableError):
                        raise verdict from exc
                if cause is exc and isinstance(exc, KafkaTimeoutError):
                    raise
                raise KafkaTimeoutError(f"{what} did not complete in time; last error: {cause}") from exc
            log.debug("%s failed (%r); retrying in %.0f ms", what, exc, delay * 1000)
            await asyncio.sleep(delay)


def deadline_after(ms: float) -> float:
    """A ``time.monotonic()`` deadline ``ms`` milliseconds from now."""
    return _now() + ms / 1000
