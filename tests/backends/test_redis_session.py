"""The redis backend's lease contract, against real Redis servers, on both front ends: a caller
always gets a client on the pool's db, outside MULTI, with nothing watched or subscribed and its
configured name; a clean connection costs no command; a session that changed is put back with
RESET (and the handshake again), one whose replies are out of step is discarded.

Each scenario runs with ``max_size=1`` (every lease is the same connection unless it was
discarded) on ``Pool`` (threads; ``create_pool``) and ``AsyncPool`` (``create_async_pool``):
``do(x)`` awaits what the asyncio client returns and passes the threaded client's results
through. Tests that need a server of their own (a password; a server without RESET, as Redis
before 6.2) start a private ``redis-server`` on a Unix socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
import redis.asyncio
import redis.backoff
import redis.retry

import poolkit
from poolkit import events as ev
from poolkit.backends import redis as pk_redis
from poolkit.backends._redis_session import Session, Verdict, command_words
from services import RedisServer, skip_or_fail

FRONTS = ["threads", "asyncio"]


async def do(result: Any) -> Any:
    """A command's result: awaited on the asyncio client, as is on the threaded one."""
    return await result if inspect.isawaitable(result) else result


class Front:
    """One pool of ``max_size=1`` on one front end, as a scenario sees it."""

    def __init__(self, pool: Any, events: list[ev.PoolEvent]) -> None:
        self.pool = pool
        self.events = events

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[Any]:
        if isinstance(self.pool, poolkit.AsyncPool):
            async with self.pool.connection() as r:
                yield r
        else:
            with self.pool.connection() as r:
                yield r

    def closed(self) -> dict[str, int]:
        return dict(self.pool.stats().connections_closed)

    def reset_errors(self) -> list[BaseException]:
        return [e.error for e in self.events if isinstance(e, ev.ConnectionResetFailedEvent)]


Scenario = Callable[[Front], Awaitable[None]]


def run(front: str, url: str, scenario: Scenario, check_after: float = 3600, **kw: Any) -> None:
    """``scenario`` on a pool of one connection (check only after ``check_after`` idle seconds:
    by default never, so that the commands the server sees are the scenario's)."""
    events: list[ev.PoolEvent] = []

    async def main() -> None:
        if front == "asyncio":
            hooks = pk_redis.async_hooks(check_after=check_after)
            options = poolkit.PoolOptions(max_size=1, hooks=hooks)
            async with await pk_redis.create_async_pool(
                url, options=options, listeners=[events.append], **kw
            ) as pool:
                await scenario(Front(pool, events))
        else:
            options = poolkit.PoolOptions(max_size=1, hooks=pk_redis.hooks(check_after=check_after))
            threaded = pk_redis.create_pool(url, options=options, listeners=[events.append], **kw)
            with threaded:
                await scenario(Front(threaded, events))

    asyncio.run(main())


def with_db(url: str, db: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{db}"))


def info(admin: Any, name: str) -> dict[str, Any]:
    """``CLIENT LIST``'s entry for the one connection named ``name``."""
    (found,) = [c for c in admin.client_list() if c.get("name") == name]
    return dict(found)


# ------------------------------------------------------------------ the reproductions


@pytest.mark.parametrize("front", FRONTS)
def test_a_multi_left_open_does_not_reach_the_next_callers(
    front: str, redis_server: RedisServer
) -> None:
    key, n = f"{redis_server.name}:k", f"{redis_server.name}:n"

    ids: list[int] = []

    async def multi_then_raise(f: Front) -> None:
        async with f.lease() as r:
            ids.append(await do(r.client_id()))
            await do(r.execute_command("MULTI"))
            assert await do(r.set(key, "queued")) is False  # (QUEUED, not OK)
            raise ValueError("raised before EXEC")

    async def scenario(f: Front) -> None:
        with pytest.raises(ValueError, match="before EXEC"):
            await multi_then_raise(f)
        async with f.lease() as r:
            assert await do(r.set(key, "b")) is True
            assert await do(r.get(key)) == b"b"
        async with f.lease() as r:
            assert await do(r.incr(n)) == 1
            assert await do(r.client_id()) == ids[0]  # put back with RESET, not replaced
            await do(r.delete(key, n))
        assert f.closed() == {}

    run(front, redis_server.url, scenario, client_name=redis_server.name)


@pytest.mark.parametrize("front", FRONTS)
def test_a_select_does_not_send_the_next_callers_writes_elsewhere(
    front: str, redis_server: RedisServer
) -> None:
    key = f"{redis_server.name}:k"

    async def scenario(f: Front) -> None:
        async with f.lease() as r:
            await do(r.execute_command("SELECT", 3))
        async with f.lease() as r:
            assert (await do(r.client_info()))["db"] == 7
            await do(r.set(key, "v"))
        with redis_server.admin() as admin:
            assert admin.execute_command("SELECT", 7) and admin.get(key) == b"v"
            admin.delete(key)
            assert admin.execute_command("SELECT", 3) and admin.exists(key) == 0
        assert f.closed() == {}

    run(front, with_db(redis_server.url, 7), scenario, client_name=redis_server.name)


@pytest.mark.parametrize("front", FRONTS)
def test_a_leftover_watch_does_not_fail_the_next_callers_transaction(
    front: str, redis_server: RedisServer
) -> None:
    key = f"{redis_server.name}:k"

    async def scenario(f: Front) -> None:
        async with f.lease() as r:
            await do(r.execute_command("WATCH", key))
        with redis_server.admin() as admin:
            admin.set(key, "changed by another client")
        async with f.lease() as r:
            pipe = r.pipeline(transaction=True)
            pipe.set(key, "mine")
            assert await do(pipe.execute()) == [True]  # (WatchError if still watched)
            await do(pipe.reset())
            await do(r.delete(key))
        assert f.closed() == {}

    run(front, redis_server.url, scenario, client_name=redis_server.name)


@pytest.mark.parametrize("front", FRONTS)
def test_a_client_setname_does_not_leak(front: str, redis_server: RedisServer) -> None:
    async def scenario(f: Front) -> None:
        async with f.lease() as r:
            await do(r.client_setname("someone-else"))
        async with f.lease() as r:
            assert await do(r.client_getname()) == redis_server.name
        assert f.closed() == {}

    run(front, redis_server.url, scenario, client_name=redis_server.name)


@pytest.mark.parametrize("front", FRONTS)
def test_a_pubsub_left_subscribed_does_not_fail_the_next_caller(
    front: str, redis_server: RedisServer
) -> None:
    """A PubSub not closed holds the client's one connection: it is discarded at check-in (the
    PubSub still refers to it), and the next caller gets a new one."""

    async def scenario(f: Front) -> None:
        async with f.lease() as r:
            pubsub = r.pubsub()
            await do(pubsub.subscribe(f"{redis_server.name}:ch"))
        async with f.lease() as r:
            assert await do(r.ping()) is True
            assert await do(r.set(f"{redis_server.name}:k", "v")) is True
            await do(r.delete(f"{redis_server.name}:k"))
        assert f.closed() == {"error": 1}
        (error,) = f.reset_errors()
        assert isinstance(error, pk_redis.SessionDiscarded) and "PubSub" in str(error)
        # the PubSub kept from the lease cannot reconnect the connection the pool closed
        with pytest.raises(redis.ConnectionError, match="closed by its poolkit pool"):
            await do(pubsub.subscribe(f"{redis_server.name}:other"))
        await do(pubsub.aclose() if hasattr(pubsub, "aclose") else pubsub.close())
        assert len(redis_server.wait_clients(1)) == 1

    run(front, redis_server.url, scenario, client_name=redis_server.name)


@pytest.mark.parametrize("front", FRONTS)
def test_a_connection_left_subscribed_by_a_command_is_discarded(
    front: str, redis_server: RedisServer
) -> None:
    """SUBSCRIBE sent as a plain command (RESP2, where its reply reads as one): messages may
    arrive unasked, replies no longer answer commands one for one."""

    async def scenario(f: Front) -> None:
        async with f.lease() as r:
            await do(r.execute_command("SUBSCRIBE", f"{redis_server.name}:ch"))
        async with f.lease() as r:
            assert await do(r.get(f"{redis_server.name}:none")) is None
            assert (await do(r.client_info()))["resp"] == "2"
        assert f.closed() == {"error": 1}
        assert "SUBSCRIBE" in str(f.reset_errors()[0])

    run(front, redis_server.url, scenario, client_name=redis_server.name, protocol=2)


@pytest.mark.parametrize("front", FRONTS)
def test_a_pipeline_left_watching_does_not_fail_the_next_caller(
    front: str, redis_server: RedisServer
) -> None:
    key = f"{redis_server.name}:k"

    async def scenario(f: Front) -> None:
        async with f.lease() as r:
            pipe = r.pipeline()
            await do(pipe.watch(key))  # (holds the connection until reset)
        async with f.lease() as r:
            assert await do(r.set(key, "v")) is True
            await do(r.delete(key))
        assert f.closed() == {"error": 1}
        await do(pipe.reset())  # (its UNWATCH finds the connection closed for good)
        assert len(redis_server.wait_clients(1)) == 1

    run(front, redis_server.url, scenario, client_name=redis_server.name)


@pytest.mark.parametrize(
    ("raw", "why"), [(("PING",), "unread"), (("CLIENT", "REPLY", "OFF"), "REPLY")]
)
@pytest.mark.parametrize("front", FRONTS)
def test_a_reply_left_unread_is_not_read_by_the_next_caller(
    front: str, raw: tuple[str, ...], why: str, redis_server: RedisServer
) -> None:
    """A command sent on the connection itself and never read (its reply would answer the next
    caller's command), or ``CLIENT REPLY OFF`` (the next caller's command would get none)."""

    async def scenario(f: Front) -> None:
        async with f.lease() as r:
            connection = await do(r.connection_pool.get_connection())
            await do(connection.send_command(*raw))  # and never read
            await do(r.connection_pool.release(connection))
        async with f.lease() as r:
            assert await do(r.get(f"{redis_server.name}:none")) is None  # (not PONG, not hung)
        assert f.closed() == {"error": 1}
        assert why in str(f.reset_errors()[0])

    run(front, redis_server.url, scenario, client_name=redis_server.name, socket_timeout=5)


@pytest.mark.parametrize("front", FRONTS)
def test_client_tracking_and_a_users_reset_are_put_back(
    front: str, redis_server: RedisServer
) -> None:
    """CLIENT TRACKING is turned off; HELLO 2 is undone; a RESET of the caller's own (db 0, no
    name, RESP2) is followed by the handshake again: the pool's db, name and protocol (redis-py's
    RESP3)."""

    async def scenario(f: Front) -> None:
        async with f.lease() as r:
            first = await do(r.client_id())
            await do(r.execute_command("CLIENT", "TRACKING", "ON"))
            assert "t" in (await do(r.client_info()))["flags"]
        async with f.lease() as r:
            assert "t" not in (await do(r.client_info()))["flags"]
            await do(r.execute_command("HELLO", 2))
        async with f.lease() as r:
            assert (await do(r.client_info()))["resp"] == "3"
            assert await do(r.execute_command("RESET")) in (b"RESET", "RESET")
        async with f.lease() as r:
            found = await do(r.client_info())
            assert (found["db"], found["name"], found["resp"]) == (5, redis_server.name, "3")
            assert found["id"] == first
        assert f.closed() == {}

    run(front, with_db(redis_server.url, 5), scenario, client_name=redis_server.name)


@pytest.mark.parametrize(("subcommand", "flag"), [("NO-EVICT", "e"), ("NO-TOUCH", "T")])
@pytest.mark.parametrize("front", FRONTS)
def test_client_no_evict_and_no_touch_do_not_reach_the_next_caller(
    front: str, subcommand: str, flag: str, redis_server: RedisServer
) -> None:
    """``CLIENT NO-EVICT ON`` (Redis 7.0+) and ``CLIENT NO-TOUCH ON`` (7.2+): RESET turns them
    off only from Redis 7.2, so the connection is discarded whatever the server (on a server
    without the subcommand its error is the lease's; the connection goes all the same)."""

    async def scenario(f: Front) -> None:
        async with f.lease() as r:
            first = await do(r.client_id())
            try:
                await do(r.execute_command("CLIENT", subcommand, "ON"))
            except redis.ResponseError:
                pass  # (a server before the subcommand's)
        async with f.lease() as r:
            found = await do(r.client_info())
            assert flag not in found["flags"] and found["id"] != first
        assert f.closed() == {"error": 1}
        (error,) = f.reset_errors()
        assert isinstance(error, pk_redis.SessionDiscarded)
        assert f"CLIENT {subcommand}" in str(error) and "7.2" in str(error)

    run(front, redis_server.url, scenario, client_name=redis_server.name)


# ------------------------------------------------------------------ a client kept after its lease


def released(f: Front) -> Any:
    """``pytest.raises`` for a client (or what was made from it) used after its lease."""
    return pytest.raises(
        pk_redis.ClientReleasedError, match=rf"poolkit pool for {re.escape(f.pool.address)} "
    )


@pytest.mark.parametrize("front", FRONTS)
def test_a_client_kept_after_its_lease_cannot_undo_the_next_owners_watch(
    front: str, redis_server: RedisServer
) -> None:
    """The audit's lost update: the next owner WATCHes a key, a reference kept from the lease
    before runs UNWATCH on the same session, another client changes the key, and the owner's
    transaction overwrites that change instead of failing with ``WatchError``. The reference
    kept is refused instead, before it sends anything."""
    key = f"{redis_server.name}:k"
    refused: list[BaseException] = []

    async def scenario(f: Front) -> None:
        async with f.lease() as r:
            stale = r
            await do(r.set(key, "0"))
        async with f.lease() as r:
            assert await do(r.execute_command("WATCH", key)) is True
            try:
                await do(stale.execute_command("UNWATCH"))
            except pk_redis.ClientReleasedError as exc:
                refused.append(exc)
            with redis_server.admin() as admin:
                assert admin.set(key, "other")  # (the write the owner's WATCH is there to see)
            pipe = r.pipeline()
            pipe.set(key, "mine")
            with pytest.raises(redis.WatchError):  # (before the fix: [True], "other" lost)
                await do(pipe.execute())
            await do(pipe.reset())
            assert await do(r.get(key)) == b"other"
            await do(r.delete(key))
        assert f.closed() == {}

    run(front, redis_server.url, scenario, client_name=redis_server.name)
    (error,) = refused
    assert isinstance(error, redis.ConnectionError) and "released back to the pool" in str(error)


@pytest.mark.parametrize("front", FRONTS)
def test_everything_made_from_a_kept_client_refuses_use_after_the_lease(
    front: str, redis_server: RedisServer
) -> None:
    """Commands, pipelines and transactions, pub/sub, MONITOR, ``client()``, scripts and locks of
    a client kept from a lease raise :class:`ClientReleasedError` once the lease is given back,
    whether made in the block (and left unused or given back there) or after it; nothing is sent
    for them, the next owner's session is untouched, and closing or dropping the kept client
    closes nothing. Such an error raised in another lease's block does not discard that
    block's connection."""
    key, channel = f"{redis_server.name}:k", f"{redis_server.name}:ch"
    asyncio_front = front == "asyncio"

    def last_command() -> str:
        with redis_server.admin() as admin:
            return str(info(admin, redis_server.name)["cmd"])

    async def scenario(f: Front) -> None:
        async with f.lease() as r:
            stale = r
            queued = r.pipeline()
            queued.set(key, "from a pipeline made in the block")
            unused_pubsub = r.pubsub()
            closed_pubsub = r.pubsub()
            await do(closed_pubsub.subscribe(channel))
            await do(closed_pubsub.aclose() if asyncio_front else closed_pubsub.close())
            script = r.register_script("return redis.call('SET', KEYS[1], 'from a script')")
            assert await do(r.set(key, "mine")) is True
            first = await do(r.client_id())  # (after PubSub.close(), which disconnects)
        async with f.lease() as r:
            assert await do(r.execute_command("WATCH", key)) is True
            before = last_command()
            with released(f):
                await do(stale.set(key, "stale"))
            with released(f):
                await do(stale.get(key))
            with released(f):
                await do(queued.execute())
            pipe = stale.pipeline()
            pipe.set(key, "stale")
            with released(f):
                await do(pipe.execute())
            with released(f):
                await do(stale.pipeline().watch(key))
            with released(f):
                await do(unused_pubsub.subscribe(channel))
            with released(f):
                await do(closed_pubsub.subscribe(channel))
            with released(f):
                await do(stale.pubsub().psubscribe(f"{channel}*"))
            with released(f):
                await do(script(keys=[key]))
            with released(f):
                await do(stale.lock(f"{key}:lock").acquire(blocking=False))
            with released(f):
                if asyncio_front:
                    async with stale.monitor():
                        pass
                else:
                    stale.monitor()
            with released(f):
                await do(stale.client().ping())
            # closing the kept client, or dropping it, leaves the owner's connection alone
            await do(stale.aclose(close_connection_pool=True) if asyncio_front else stale.close())
            del stale, queued, pipe, unused_pubsub, closed_pubsub, script
            gc.collect()
            assert last_command() == before  # (nothing was sent for them)
            assert await do(r.client_id()) == first  # (the same connection, still connected)
            owner = r.pipeline()
            owner.set(key, "owner")
            assert await do(owner.execute()) == [True]  # (the owner's WATCH held throughout)
            await do(owner.reset())
        async with f.lease() as r:
            kept = r

        async def use_the_kept_client_in_a_block() -> None:
            async with f.lease():
                await do(kept.ping())  # (raised out of this block: is its connection broken? no)

        with pytest.raises(pk_redis.ClientReleasedError):
            await use_the_kept_client_in_a_block()
        async with f.lease() as r:
            assert await do(r.client_id()) == first
            await do(r.delete(key))
        assert f.closed() == {}

    run(front, redis_server.url, scenario, client_name=redis_server.name)


@pytest.mark.parametrize("front", FRONTS)
def test_closing_the_leased_client_leaves_its_connection_to_the_pool(
    front: str, redis_server: RedisServer
) -> None:
    """``close()``, ``with r:`` (``async with r:``) on the client of a lease are no-ops: the pool
    owns the connection (the same one serves the next lease, nothing reconnects)."""

    async def scenario(f: Front) -> None:
        async with f.lease() as r:
            first = await do(r.client_id())
            if isinstance(f.pool, poolkit.AsyncPool):
                async with r:
                    await do(r.ping())
                await r.aclose()
            else:
                with r:
                    r.ping()
                r.close()
            assert await do(r.client_id()) == first
        async with f.lease() as r:
            assert await do(r.client_id()) == first
        assert f.closed() == {}

    run(front, redis_server.url, scenario, client_name=redis_server.name)


# ------------------------------------------------------------------ a clean lease costs nothing


@pytest.mark.parametrize("front", FRONTS)
def test_a_clean_lease_sends_no_command(front: str, redis_server: RedisServer) -> None:
    """After a lease of plain commands, a pipeline, or a WATCHed transaction (run or failed),
    the last command the server saw on the connection is the caller's own: nothing was sent at
    hand-out (``lend``) or check-in. A session that changed costs RESET and the handshake, on
    the same connection."""
    key = f"{redis_server.name}:k"

    def last_command() -> str:
        with redis_server.admin() as admin:
            return str(info(admin, redis_server.name)["cmd"])

    async def transaction_aborted(f: Front) -> None:
        async with f.lease() as r:
            pipe = r.pipeline()
            pipe.incr(key)
            pipe.execute_command("NOSUCHCMD")
            await do(pipe.execute())

    async def watched_transaction_that_fails(f: Front) -> None:
        async with f.lease() as r:
            pipe = r.pipeline()
            await do(pipe.watch(key))
            with redis_server.admin() as admin:
                admin.set(key, "10")
            pipe.multi()
            pipe.incr(key)
            try:
                await do(pipe.execute())
            finally:
                await do(pipe.reset())

    async def scenario(f: Front) -> None:
        async with f.lease() as r:
            await do(r.set(key, "1"))
        assert last_command() == "set"
        async with f.lease() as r:  # (the hand-out, its lease's client, sends nothing either)
            assert isinstance(r, redis.Redis | redis.asyncio.Redis)
        assert last_command() == "set"
        async with f.lease() as r:
            pipe = r.pipeline(transaction=False)
            pipe.get(key)
            pipe.incr(key)
            assert await do(pipe.execute()) == [b"1", 2]
        assert last_command() == "incrby"  # (redis-py sends INCRBY)
        async with f.lease() as r:
            pipe = r.pipeline()
            await do(pipe.watch(key))
            pipe.multi()
            pipe.incr(key)
            assert await do(pipe.execute()) == [3]
        assert last_command() == "exec"
        with pytest.raises(redis.WatchError):
            await watched_transaction_that_fails(f)
        assert last_command() == "exec"
        with pytest.raises(redis.ResponseError, match="NOSUCHCMD"):
            await transaction_aborted(f)  # (EXECABORT)
        assert last_command() == "exec"
        async with f.lease() as r:
            await do(r.execute_command("SELECT", 4))
        async with f.lease() as r:
            with redis_server.admin() as admin:
                # RESET (db 0, no name) and the handshake (the name again) ran after it
                found = info(admin, redis_server.name)
                assert (found["db"], found["cmd"] == "select") == ("0", False)
            await do(r.delete(key))
        assert f.closed() == {}

    run(front, redis_server.url, scenario, client_name=redis_server.name)


# ------------------------------------------------------------------ servers of the tests' own


@pytest.fixture
def private_redis() -> Iterator[Callable[..., str]]:
    """Start a ``redis-server`` of the test's own (on a Unix socket, with the arguments given):
    its ``unix://`` URL. Stopped at the end of the test."""
    binary = shutil.which("redis-server")
    if binary is None:
        skip_or_fail("redis-server is not installed (a private server for this test)")
    assert binary is not None
    started: list[tuple[subprocess.Popen[bytes], str]] = []

    def start(*args: str) -> str:
        folder = tempfile.mkdtemp(prefix="pk-redis-", dir="/tmp")
        sock = f"{folder}/redis.sock"
        command = [binary, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no"]
        process = subprocess.Popen([*command, *args], stdout=subprocess.DEVNULL)
        started.append((process, folder))
        deadline = time.monotonic() + 10
        # (no retries of redis-py's own: this loop retries, and redis-py's default Retry backs
        # off for seconds on the AuthenticationError of a server that asks for a password)
        once = redis.retry.Retry(redis.backoff.NoBackoff(), 0)
        while True:
            try:
                with redis.Redis(unix_socket_path=sock, socket_timeout=1, retry=once) as probe:
                    probe.ping()
                break
            except redis.AuthenticationError:
                break  # (up, and asking for a password)
            except (redis.ConnectionError, OSError):
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.02)
        return f"unix://{sock}"

    try:
        yield start
    finally:
        for process, folder in started:
            process.terminate()
            process.wait(10)
            shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("front", FRONTS)
def test_after_a_reset_the_connection_is_authenticated_again(
    front: str, private_redis: Callable[..., str]
) -> None:
    """RESET unauthenticates a connection: the handshake after it sends AUTH again (and SELECT,
    and the name), so the next caller is neither refused (NOAUTH) nor on db 0."""
    url = private_redis("--requirepass", "s3cretPW") + "?db=2"

    async def scenario(f: Front) -> None:
        async with f.lease() as r:
            first = await do(r.client_id())
            await do(r.execute_command("SELECT", 9))
        async with f.lease() as r:
            assert await do(r.set("k", "v")) is True
            found = await do(r.client_info())
            assert (found["db"], found["name"], found["id"]) == (2, "poolkit", first)
        assert f.closed() == {}

    run(front, url, scenario, password="s3cretPW")


@pytest.mark.parametrize("front", FRONTS)
def test_without_reset_on_the_server_a_changed_session_is_discarded(
    front: str, private_redis: Callable[..., str]
) -> None:
    """A server without RESET (Redis before 6.2; here one with RESET renamed away): a session
    that changed cannot be put back, so its connection is closed and the next caller gets a new
    one; a clean one is still passed on as it is."""
    url = private_redis("--rename-command", "RESET", "")

    async def scenario(f: Front) -> None:
        async with f.lease() as r:
            first = await do(r.client_id())
        async with f.lease() as r:
            assert await do(r.client_id()) == first
            await do(r.execute_command("SELECT", 3))
        async with f.lease() as r:
            assert (await do(r.client_info()))["db"] == 0
            assert await do(r.client_id()) != first
        assert f.closed() == {"error": 1}
        (error,) = f.reset_errors()
        assert isinstance(error, pk_redis.SessionDiscarded) and "6.2" in str(error)

    run(front, url, scenario)


# ------------------------------------------------------------------ the session bookkeeping


def test_command_words() -> None:
    assert command_words(("CLIENT SETNAME", "x")) == ("CLIENT", "SETNAME")
    assert command_words((b"client", b"tracking", b"on")) == ("CLIENT", "TRACKING")
    assert command_words(("client",)) == ("CLIENT", "")
    assert command_words(("select", 3)) == ("SELECT", "")
    assert command_words(()) == ("", "")


def test_session_verdicts() -> None:
    session = Session()
    assert session.verdict() == (Verdict.CLEAN, "")
    session.sent([("MULTI",), ("SET", "k", "v"), ("EXEC",)])
    assert session.verdict()[0] is Verdict.DISCARD  # three replies owed
    for _ in range(3):
        session.replied()
    assert session.verdict() == (Verdict.CLEAN, "")
    session.sent([("WATCH", "k")])
    session.replied()
    assert session.verdict() == (Verdict.RESET, "keys were left WATCHed")
    session.sent([("EXEC",)])  # (outside MULTI: an error that unwatches nothing)
    session.replied()
    assert session.verdict()[0] is Verdict.RESET
    session.sent([("MULTI",), ("DISCARD",)])
    session.replied()
    session.replied()
    assert session.verdict() == (Verdict.CLEAN, "")
    session.sent([("CLIENT SETNAME", "x")])
    session.replied()
    assert session.verdict() == (Verdict.RESET, "CLIENT SETNAME changed the session")
    session.sent([("CLIENT", "REPLY", "OFF")])
    assert session.verdict()[0] is Verdict.DISCARD
    for sub in ("NO-EVICT", "no-touch"):  # (RESET turns them off only from Redis 7.2)
        session.clear()
        session.sent([("CLIENT", sub, "ON")])
        session.replied()
        verdict, why = session.verdict()
        assert verdict is Verdict.DISCARD and why.startswith(f"CLIENT {sub.upper()} was sent")
    session.clear()
    session.sent_unknown()
    assert session.verdict()[0] is Verdict.DISCARD
    session.clear()
    session.replied()
    assert session.verdict()[0] is Verdict.DISCARD


# ------------------------------------------------------------------ builders: up front, defaults


@pytest.mark.parametrize("front", FRONTS)
def test_a_wrong_password_fails_the_builder(front: str, redis_server: RedisServer) -> None:
    """``create_pool("redis://bob:pw@...")`` fails up front, as the PostgreSQL builders do, with
    redis-py's error, which does not show the password; no connection is left behind."""
    parts = urlsplit(redis_server.url)
    url = urlunsplit(parts._replace(netloc=f"bob:s3cretPW@{parts.hostname}:{parts.port or 6379}"))

    async def main() -> None:
        if front == "asyncio":
            await pk_redis.create_async_pool(url, client_name=redis_server.name)
        else:
            pk_redis.create_pool(url, client_name=redis_server.name)

    with pytest.raises(redis.AuthenticationError) as caught:
        asyncio.run(main())
    error = caught.value
    shown = "".join(str(e) for e in (error, error.__cause__, error.__context__))
    assert "s3cretPW" not in shown
    assert redis_server.wait_clients(0) == []


@pytest.mark.parametrize("front", FRONTS)
def test_an_unreachable_server_fails_the_builder(front: str) -> None:
    async def main() -> None:
        if front == "asyncio":
            await pk_redis.create_async_pool("redis://user:s3cretPW@127.0.0.1:1/0")
        else:
            pk_redis.create_pool("redis://user:s3cretPW@127.0.0.1:1/0")

    with pytest.raises(redis.ConnectionError) as caught:
        asyncio.run(main())
    assert "s3cretPW" not in str(caught.value)


def test_the_builders_default_to_redis_pys_blocking_pool(redis_server: RedisServer) -> None:
    """No options: redis-py's BlockingConnectionPool's max_connections=50 and timeout=20."""
    blocking: Any = redis.BlockingConnectionPool
    default = blocking()
    assert (pk_redis.DEFAULT_OPTIONS.max_size, pk_redis.DEFAULT_OPTIONS.wait_queue_timeout) == (
        default.max_connections,
        default.timeout,
    )
    with pk_redis.create_pool(redis_server.url, client_name=redis_server.name) as pool:
        assert (pool.options.max_size, pool.options.wait_queue_timeout) == (50, 20.0)
        hooks = pool.options.hooks
        assert hooks is not None and hooks.reset is pk_redis.reset

    async def main() -> None:
        options = poolkit.PoolOptions(max_size=3)
        async with await pk_redis.create_async_pool(
            redis_server.url, options=options, client_name=redis_server.name
        ) as pool:
            assert (pool.options.max_size, pool.options.wait_queue_timeout) == (3, None)
            hooks = pool.options.hooks
            assert hooks is not None and hooks.reset is pk_redis.async_reset

    asyncio.run(main())
