"""The simulated MongoDB load balancer, and HAProxy in front of simulated services, for the
tests of tests/mongodb.

Tests take the fixtures (import them: ``from mongo_services import sim_mongo``; a
``conftest.py`` in tests/mongodb would be a second top-level ``conftest`` module beside
tests/conftest.py):

* ``sim_mongo``: a :class:`~poolkit_sim_mongo.SimMongoServer` of three services on its own
  thread (:class:`Sim`: the server, its thread's handle, and ``call`` to reach it);
* ``mongo``: a pymongo client of it (``loadBalanced=true``), and ``items``: its collection
  ``db.items``;
* ``haproxy_cluster``: HAProxy in TCP mode on 127.0.0.1 in front of three servers of one
  service each, over one shared store, with the PROXY protocol (v2) between them, as real
  deployments put a load balancer in front of mongos processes.

The ``haproxy`` program is taken from PATH or /usr/sbin (Debian's package: ``.ci/run``
installs it; the tests install nothing). Without it the HAProxy tests skip saying why, and fail
under ``POOLKIT_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

import pymongo
import pytest

from debian_packages import program_or_reason
from poolkit.testing import ServerThread
from poolkit_sim_mongo import (
    HAProxy,
    SimMongoServer,
    SimMongoSettings,
    SimMongoStore,
    find_haproxy,
)
from services import skip_or_fail

#: the clients' server selection timeout (ms): the simulator answers at once
SELECTION_MS = 5000

Client = pymongo.MongoClient[dict[str, Any]]
Collection = pymongo.collection.Collection[dict[str, Any]]


@dataclasses.dataclass
class Sim:
    """A running :class:`SimMongoServer` and the thread it runs on."""

    server: SimMongoServer
    thread: ServerThread[SimMongoServer]

    @property
    def uri(self) -> str:
        return self.server.uri

    def store_count(self, namespace: str) -> int:
        """How many documents ``namespace`` holds (the store is safe from any thread)."""
        return len(self.server.store.documents(namespace))

    def call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` run on the server's loop (every server method but ``stats`` must be)."""
        return self.thread.call(fn)


def start_sim(settings: SimMongoSettings | None = None, store: SimMongoStore | None = None) -> Sim:
    server = SimMongoServer(settings, store=store)
    return Sim(server, server.start_in_thread())


@pytest.fixture
def sim_mongo() -> Iterator[Sim]:
    """A simulated load balancer with three services (round robin), on its own thread."""
    sim = start_sim(SimMongoSettings(services=3, seed=18))
    try:
        yield sim
    finally:
        sim.thread.stop()


@pytest.fixture
def mongo(sim_mongo: Sim) -> Iterator[Client]:
    client: Client = pymongo.MongoClient(sim_mongo.uri, serverSelectionTimeoutMS=SELECTION_MS)
    with client:
        yield client


@pytest.fixture
def items(mongo: Client) -> Collection:
    return mongo.db.items


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll ``predicate`` until it holds (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# ---------------------------------------------------------------------- HAProxy


@functools.cache
def _program() -> tuple[str | None, str]:
    """The ``haproxy`` program, or why it is missing (asked once per run)."""
    return program_or_reason("haproxy", find_haproxy)


def haproxy_program() -> str:
    """The ``haproxy`` program, or skip (fail under POOLKIT_REQUIRE_SERVICES=1)."""
    program, missing = _program()
    if program is None:
        skip_or_fail(missing)
        raise AssertionError("not reached")
    return program


@dataclasses.dataclass
class Cluster:
    """HAProxy (``lb``) in front of ``sims``: servers of one service each, one shared store."""

    lb: HAProxy
    sims: list[Sim]
    store: SimMongoStore

    @property
    def uri(self) -> str:
        return self.lb.uri

    def service_of(self, service_id: Any) -> Sim:
        """The server whose (only) service is ``service_id``."""
        for sim in self.sims:
            if sim.server.service_ids == (service_id,):
                return sim
        raise KeyError(service_id)


@pytest.fixture
def haproxy_cluster() -> Iterator[Cluster]:
    """HAProxy in front of three one-service servers (see the module's doc)."""
    program = haproxy_program()
    store = SimMongoStore()
    settings = SimMongoSettings(services=1, proxy_protocol=True)
    sims: list[Sim] = []
    try:
        for _ in range(3):
            sims.append(start_sim(settings, store))
        lb = HAProxy([s.server.address for s in sims], program=program, send_proxy=True)
        with lb:
            yield Cluster(lb, sims, store)
    finally:
        for sim in sims:
            sim.thread.stop()
