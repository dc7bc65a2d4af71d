"""Per-topic tiered storage disablement (the KIP-950 draft), on the controller's side.

A topic moves ENABLED -> DISABLING -> DISABLED when its configuration stops tiering, and back to
ENABLED when tiering is turned on again. Two ways of asking are accepted:

- the draft's: ``remote.storage.enable=false`` with ``remote.log.disable.policy`` = ``retain``
  (the default) or ``delete``;
- Kafka 3.9's: ``remote.log.copy.disable=true`` (retain: remote data stays readable and expires by
  retention) and ``remote.storage.enable=false`` with ``remote.log.delete.on.disable=true`` (delete).

While DISABLING the controller sends DisableRemoteTopic to every broker hosting a partition and
repeats it until each one answers without error, then records DISABLED. Changing the tiering
settings of a topic that is DISABLING is refused (INVALID_CONFIG, a code every client shows). A
restarted controller resumes every DISABLING topic.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tierlog.cluster.channel import DisableRemoteTopicRequest
from tierlog.cluster.image import TieringState, TopicImage, TopicTiering, check_tiering_transition
from tierlog.errors import NO_ERROR, InvalidConfigError, describe_error
from tierlog.storage import LogConfig
from tierlog.tasks import stop_tasks

log = logging.getLogger(__name__)

#: The settings whose change during DISABLING would contradict the disablement under way.
TIERING_KEYS = ("remote.storage.enable", "remote.log.copy.disable", "remote.log.disable.policy",
                "remote.log.delete.on.disable")

RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 5.0


def _wants_tiering(tc: Mapping[str, Any]) -> bool:
    return bool(tc["remote.storage.enable"]) and not tc["remote.log.copy.disable"]


def _disable_policy(tc: Any) -> str:
    """retain, unless remote storage is switched off with the delete policy (the draft's
    ``remote.log.disable.policy=delete`` or Kafka's ``remote.log.delete.on.disable=true``)."""
    if not tc["remote.storage.enable"] and tc.remote_log_disable_policy == "delete":
        return "delete"
    return "retain"


def initial_tiering(tc: Any) -> TopicTiering | None:
    """A new topic's tiering: ENABLED, or DISABLED (retain) when created with copying off."""
    if not tc["remote.storage.enable"]:
        return None
    return TopicTiering(TieringState.ENABLED if _wants_tiering(tc) else TieringState.DISABLED, "retain", 0)


def current_tiering(topic: TopicImage, tc: Any) -> TopicTiering | None:
    """The stored tiering, or what the configuration implies for topics stored before it existed."""
    return topic.tiering if topic.tiering is not None else initial_tiering(tc)


def next_tiering(topic: TopicImage, old_tc: Any, new_tc: Any) -> TopicTiering | None:
    """The tiering after a configuration change from ``old_tc`` to ``new_tc`` (resolved TopicConfigs)."""
    old = current_tiering(topic, old_tc)
    new = _next_tiering(topic, old, old_tc, new_tc)
    if old is not None and new is not None:
        check_tiering_transition(topic.name, old.state, new.state)
    return new


def _next_tiering(topic: TopicImage, old: TopicTiering | None, old_tc: Any, new_tc: Any) -> TopicTiering | None:
    wants = _wants_tiering(new_tc)
    if old is None:
        return initial_tiering(new_tc)
    if old.state == TieringState.DISABLING:
        changed = [k for k in TIERING_KEYS if old_tc[k] != new_tc[k]]
        if changed:
            raise InvalidConfigError(
                f"Tiered storage disablement of topic {topic.name} is in progress (policy {old.policy}); "
                f"{', '.join(changed)} cannot change until it completes")
        return old
    if old.state == TieringState.ENABLED:
        if wants:
            return old
        return TopicTiering(TieringState.DISABLING, _disable_policy(new_tc), old.epoch + 1)
    # DISABLED: turning tiering on again behaves like a first enablement; retained data may still be
    # deleted later by switching to the delete policy.
    if wants:
        return TopicTiering(TieringState.ENABLED, "retain", old.epoch + 1)
    if old.policy == "retain" and _disable_policy(new_tc) == "delete":
        return TopicTiering(TieringState.DISABLING, "delete", old.epoch + 1)
    if old.policy == "delete" and new_tc["remote.storage.enable"]:
        # remote.storage.enable=true with copying off after a delete: nothing remote to retain.
        return TopicTiering(TieringState.DISABLED, "retain", old.epoch + 1)
    return old


class DisablementDriver:
    """Drives DISABLING topics to DISABLED: DisableRemoteTopic to every hosting broker, repeated with
    back-off until each acknowledges. Runs on the controller's event loop."""

    def __init__(self, controller, channel) -> None:
        self.controller = controller
        self.channel = channel
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._acked: dict[tuple, set[int]] = {}  # (topic id, tiering epoch) -> brokers that answered
        self.disablements = 0
        self.last_error: dict[str, str] = {}

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="kip950-disablements")

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        await stop_tasks(self._task)
        self._task = None

    async def _run(self) -> None:
        backoff = RETRY_BACKOFF_S
        while True:
            pending = [t for t in self.controller.image.topics.values()
                       if t.tiering_state == TieringState.DISABLING]
            if not pending:
                backoff = RETRY_BACKOFF_S
                self._wake.clear()
                await self._wake.wait()
                continue
            progress = False
            for topic in pending:
                try:
                    progress |= await self._drive(topic)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - retried after the back-off
                    self.last_error[topic.name] = str(e)
                    log.warning("Disablement of tiered storage for %s not complete yet: %s", topic.name, e)
            if not progress:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), backoff)
                except TimeoutError:
                    pass
                backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)
            else:
                backoff = RETRY_BACKOFF_S

    async def _drive(self, topic: TopicImage) -> bool:
        tiering = topic.tiering
        key = (topic.topic_id, tiering.epoch)
        acked = self._acked.setdefault(key, set())
        hosts: dict[int, list[int]] = {}
        for p in topic.partitions.values():
            for b in p.replicas:
                hosts.setdefault(b, []).append(p.partition)
        # Every broker not done yet is asked in each round: one that is down (or failing) must not hold
        # back the others, whose part may be to delete what a dead leader's successor now leads.
        failures = []
        for broker_id, parts in sorted(hosts.items()):
            if broker_id in acked:
                continue
            request = DisableRemoteTopicRequest(self.controller.node_id, topic.topic_id, topic.name,
                                                tuple(sorted(parts)), tiering.policy, tiering.epoch,
                                                self.controller.controller_epoch)
            try:
                response = await self.channel.disable_remote_topic(broker_id, request)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - that broker is asked again after the back-off
                failures.append(f"broker {broker_id}: {e}")
                continue
            if response.error_code != NO_ERROR:
                failures.append(f"broker {broker_id} answered "
                                f"{describe_error(response.error_code, response.error_message)}")
                continue
            acked.add(broker_id)
        if failures:
            raise RuntimeError("; ".join(failures))
        if set(hosts) - acked:
            return False
        self._acked.pop(key, None)
        self.last_error.pop(topic.name, None)
        await self.controller.call(self.controller.complete_disablement, topic.name, tiering.epoch)
        self.disablements += 1
        return True


def topic_log_config(topic_config, topic: TopicImage | None, name: str) -> LogConfig:
    """The log settings of topic ``name`` from its resolved configuration: remote storage in effect as
    Kafka decides it (broker switch, topic switch, not internal; compacted topics too, unlike Kafka) and as its tiering
    lifecycle requires: data retained by a disablement stays readable and expires, nothing more is
    uploaded; after a delete disablement the log is a plain local log."""
    remote = topic_config.remote_log_enabled(name)
    copy_disable = bool(topic_config["remote.log.copy.disable"])
    tiering = topic.tiering if topic is not None else None
    if tiering is not None and tiering.state != TieringState.ENABLED:
        copy_disable = True
        if tiering.policy == "retain":
            remote = remote or (topic_config.remote_storage_system_enabled and not topic.is_internal)
        else:
            remote = False
    return replace(LogConfig.from_topic_config(topic_config), remote_storage_enable=remote,
                   remote_log_copy_disable=copy_disable)
