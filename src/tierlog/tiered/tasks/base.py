"""``RLMTask``: what the leader tasks of a partition share (Kafka's ``RLMTask``): one run with its failure
recorded and logged, the periodic loop the scheduler runs, the leadership fence, and the segment events."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, ClassVar

from tierlog.tiered.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState
from tierlog.tiered.rlmm import RemoteLogMetadataManager
from tierlog.tiered.tasks.state import RemotePartitionState, Term, log, now_ms

if TYPE_CHECKING:
    from tierlog.tiered.remote_log_manager import RemoteLogManager

S = RemoteLogSegmentState

#: A task whose partition's metadata is still loading looks again this often (at most every task interval):
#: the first run after a restart reads the remote offsets, and until then status and readiness say "loading".
NOT_READY_RECHECK_S = 0.2


def leader_epoch_checkpoint_bytes(entries: Iterable[tuple[int, int]]) -> bytes:
    """Kafka's leader-epoch-checkpoint text (version 0), as shipped with a remote segment."""
    entries = list(entries)
    return (f"0\n{len(entries)}\n" + "".join(f"{e} {o}\n" for e, o in entries)).encode()


def leader_term(st: RemotePartitionState, session: object) -> Term | None:
    """(leader epoch, session) this broker leads ``st`` in now, given its current ``session``; None while it
    is fenced: no session, or a session that ended under an unchanged epoch (the controller may have moved
    the partition; it gives a broker back in a new session a new epoch, which starts a new term here)."""
    epoch = st.partition.leader_epoch
    if session is None:
        return None
    if st.term is None or st.term[0] != epoch:
        st.term = (epoch, session)
    return st.term if st.term[1] == session else None


async def publish_state(rlmm: RemoteLogMetadataManager, broker_id: int, md: RemoteLogSegmentMetadata,
                        state: RemoteLogSegmentState, custom_metadata: bytes | None | str = "same"
                        ) -> RemoteLogSegmentMetadata:
    """Write a segment's next state (its custom metadata kept unless given); the segment as it is now."""
    custom = md.custom_metadata if custom_metadata == "same" else custom_metadata
    update = RemoteLogSegmentMetadataUpdate(md.segment_id, now_ms(), custom, state, broker_id)
    await rlmm.update_remote_log_segment_metadata(update)
    return md.with_update(update)


class RLMTask(abc.ABC):
    """A leader task of one partition: ``execute`` is one run; the scheduler calls ``loop``, which runs it
    every ``remote.log.manager.task.interval.ms`` (fixed delay, first run at once) once the partition's
    metadata is loaded (it looks again every 0.2 s until it is)."""

    #: The task's name in ``failing``, ``last_error`` and the logs.
    kind: ClassVar[str]

    def __init__(self, rlm: RemoteLogManager, st: RemotePartitionState) -> None:
        self.rlm = rlm
        self.st = st

    @abc.abstractmethod
    async def execute(self) -> None:
        """One run of the task; its failure is raised."""

    def stopped(self) -> bool:
        """Whether the loop ends before its next run."""
        return False

    def stops_for_good(self, error: Exception) -> bool:
        """Whether ``error`` ends the task (recorded by this call); otherwise the next run retries."""
        return False

    async def loop(self) -> None:
        st, rlm = self.st, self.rlm
        while not self.stopped():
            if not rlm.rlmm.is_ready(st.tp):
                await asyncio.sleep(min(rlm.task_interval_s, NOT_READY_RECHECK_S))
                continue
            if not await self.run():
                return
            await asyncio.sleep(rlm.task_interval_s)

    async def run(self) -> bool:
        """One run as the scheduler makes it: its failure recorded and logged, not raised; False when the
        task stops for good."""
        st, what = self.st, self.kind
        try:
            await self.execute()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the next run retries
            if self.stops_for_good(e):
                return False
            st.record_error(what, f"{what}: {e}")
            log.debug("Remote log %s task of %s failed: %s", what, st.tp, e, exc_info=not isinstance(e, OSError))
            # A store that stays down (full, say) fails every run with a message naming another segment:
            # one line per partition, task and kind of failure, the repeats counted.
            kind = (st.tp, what, type(e), getattr(e.__cause__, "errno", None))
            self.rlm.failure_log.warning(kind, "Remote log %s task of %s failed: %s (retried every run; repeats "
                                               "are counted)", what, st.tp, e)
        else:
            st.record_success(what)
        return True

    # ------------------------------------------------------------------------------------ leadership

    def term(self) -> Term | None:
        """(leader epoch, session) this broker leads the partition in now; None while it is fenced."""
        return leader_term(self.st, self.rlm.leader_session())

    def fenced(self, epoch: int, session: object) -> str | None:
        """Why this broker may no longer act as the leader of ``epoch`` it held in ``session``; None if it may.
        Checked right before an upload is published and before a delete (Kafka's tasks check isLeader())."""
        st = self.st
        if self.rlm.partitions.get(st.tp) is not st:
            return "its leadership ended"
        if st.partition.leader_epoch != epoch:
            return f"leader epoch {epoch} ended"
        now = self.rlm.leader_session()
        if now is None or now != session:
            return "the ZooKeeper session it led in ended"
        return None

    # -------------------------------------------------------------------------------- storage, events

    async def in_pool(self, pool: ThreadPoolExecutor, fn, *args):
        """Run a blocking storage call; it keeps running if the task is cancelled, so stopping a
        partition waits for it (``in_flight``)."""
        st = self.st
        fut = asyncio.get_running_loop().run_in_executor(pool, fn, *args)
        st.in_flight.add(fut)
        fut.add_done_callback(st.in_flight.discard)
        return await asyncio.shield(fut)

    async def update(self, md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState,
                     custom_metadata: bytes | None | str = "same") -> RemoteLogSegmentMetadata:
        return await publish_state(self.rlm.rlmm, self.rlm.broker_id, md, state, custom_metadata)

    async def abandon(self, md: RemoteLogSegmentMetadata) -> None:
        """A failed, refused or unfinished upload: mark it DELETE_SEGMENT_STARTED; the expiration task
        deletes its objects. When even the event cannot be written, the expiration task writes it later."""
        try:
            await self.update(md, S.DELETE_SEGMENT_STARTED)
        except Exception as e:  # noqa: BLE001 - kept in abandoned: retried by every expiration run
            log.debug("Could not mark the failed upload %s of %s for deletion: %s", md.segment_id.id, self.st.tp, e)
            self.st.abandoned[md.segment_id] = md  # before the caller discards it from being_copied
