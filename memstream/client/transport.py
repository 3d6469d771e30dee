"""Requests and their replies: send a request, wait for the reply on this client's
partition, and tell a missing worker from a slow one."""

from __future__ import annotations

import asyncio

from aiokafka.errors import KafkaError

from memstream.client.core import ClientCore, call_span
from memstream.client.errors import ClientError, MemoryServiceError
from memstream.client.replies import ReplyListener
from memstream.client.workers import GroupMembers, WorkerProbe
from memstream.topics.events import Reply, RequestBase
from memstream.topics.registry import REQUESTS, consumer_group

# A reply this late makes the client ask whether any worker is in the request group; a
# second look after a worker had time to join, then "no worker is running" (within ~3 s).
NO_WORKER_FIRST_LOOK_S = 1.0
NO_WORKER_SECOND_LOOK_S = 1.5


class RequestCalls(ClientCore):
    """The request/reply transport every query goes through."""

    async def _reply_listener(self) -> ReplyListener:
        """The started reply listener; only published once its partition is chosen and read."""
        async with self._replies_lock:
            if self._replies is None:
                listener = ReplyListener(self.settings, self.bootstrap)
                try:
                    await listener.start()
                except KafkaError as exc:
                    raise ClientError(f"the broker at {self.bootstrap} could not be reached "
                                      f"({exc}); is it running?") from exc
                self._replies = listener
            return self._replies

    async def request(self, request: RequestBase, timeout: float = 30.0) -> Reply:
        """Send any request and wait for its reply (raises ``MemoryServiceError`` on an error)."""
        try:
            async with asyncio.timeout(timeout):
                replies = await self._reply_listener()
        except TimeoutError as exc:
            raise ClientError(f"the broker at {self.bootstrap} did not answer within "
                              f"{timeout}s; is it running?") from exc
        request = request.model_copy(update={
            "reply_to": replies.topic, "reply_partition": replies.partition,
            "requester": self.client_id,
        })
        future = replies.expect(request.correlation_id)
        try:
            async with asyncio.timeout(timeout):  # the send and the answer, together
                with call_span(str(getattr(request, "op", "request")), request):
                    await self.publish(REQUESTS, request)
                    reply = await self._answer(future)
        except TimeoutError as exc:
            raise ClientError(f"no reply to {type(request).__name__} within {timeout}s; "
                              "is a worker running?") from exc
        finally:
            replies.forget(request.correlation_id)
        if not reply.ok:
            error = reply.error
            raise MemoryServiceError(error.type if error else "Error",
                                     error.message if error else "unknown error")
        return reply

    async def request_workers(self) -> GroupMembers | None:
        """The live members of the group that answers requests (None: the broker did not
        say): whether any worker is there to answer, or to index the log."""
        if self._probe is None:
            self._probe = WorkerProbe(self.bootstrap, consumer_group(self.settings, REQUESTS))
        return await self._probe.members()

    async def _answer(self, future: asyncio.Future[Reply]) -> Reply:
        """The reply; when it is late, whether any worker is there to send it: none (after
        a second look, a worker may be joining) fails at once instead of at the timeout."""
        for wait in (NO_WORKER_FIRST_LOOK_S, NO_WORKER_SECOND_LOOK_S):
            done, _ = await asyncio.wait({future}, timeout=wait)
            if done:
                return future.result()
            members = await self.request_workers()
            if members is None or members.live:
                return await future
        assert members is not None  # noqa: S101 - the loop returned otherwise
        raise ClientError(f"no worker is running: {members.describe()}; start one with "
                          "`memstream up` (or `memstream worker`)")
