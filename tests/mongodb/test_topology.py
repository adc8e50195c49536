"""The load-balanced topology (issue 18, point 5): the SDAM events the Load Balancer spec lists on
open and on close, the descriptions they carry, no monitor, and the SDAM spec file
``sdam-load-balanced/discover_load_balancer.json``.

The spec files are found as every spec runner finds its own (``spec_dirs``):
``POOLKIT_SPEC_TESTS`` names the spec-tests folder (or the ``sdam-load-balanced`` folder
itself), else ``../shared/spec-tests`` beside the clone; missing, one test skips saying so
(fails under POOLKIT_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import socket
import sys
import threading
from typing import Any

import pytest

from poolkit.errors import PoolError
from poolkit.mongodb.sdam_events import (
    SdamEvent,
    ServerClosedEvent,
    ServerDescription,
    ServerDescriptionChangedEvent,
    ServerOpeningEvent,
    ServerType,
    TopologyClosedEvent,
    TopologyDescription,
    TopologyDescriptionChangedEvent,
    TopologyListener,
    TopologyOpeningEvent,
    TopologyType,
)
from poolkit.mongodb.topology import (
    LoadBalancedTopology,
    TopologyClosedError,
    normalize_address,
)
from poolkit.mongodb.uri import parse_uri
from services import skip_or_fail
from spec_dirs import find_spec_dir, where_looked

LB = "lb.example:27017"
UNKNOWN = TopologyDescription(topology_type=TopologyType.Unknown, servers=())


def _opened(address: str = LB) -> tuple[LoadBalancedTopology, list[SdamEvent]]:
    events: list[SdamEvent] = []
    topology = LoadBalancedTopology(address, listeners=[events.append])
    topology.open()
    return topology, events


def _kinds(events: list[SdamEvent]) -> list[str]:
    return [type(e).__name__ for e in events]


OPEN_KINDS = [
    "TopologyOpeningEvent",
    "TopologyDescriptionChangedEvent",
    "ServerOpeningEvent",
    "ServerDescriptionChangedEvent",
    "TopologyDescriptionChangedEvent",
]
CLOSE_KINDS = ["ServerClosedEvent", "TopologyDescriptionChangedEvent", "TopologyClosedEvent"]


# ---------------------------------------------------------------------- the event sequences


def test_open_emits_the_spec_sequence_with_its_descriptions() -> None:
    topology, events = _opened()
    tid = topology.topology_id
    unknown_server = ServerDescription(address=LB, server_type=ServerType.Unknown)
    lb_server = ServerDescription(address=LB, server_type=ServerType.LoadBalancer)
    discovering = TopologyDescription(
        topology_type=TopologyType.LoadBalanced, servers=(unknown_server,)
    )
    ready = TopologyDescription(topology_type=TopologyType.LoadBalanced, servers=(lb_server,))
    assert events == [
        TopologyOpeningEvent(topology_id=tid),
        TopologyDescriptionChangedEvent(
            topology_id=tid, previous_description=UNKNOWN, new_description=discovering
        ),
        ServerOpeningEvent(topology_id=tid, address=LB),
        ServerDescriptionChangedEvent(
            topology_id=tid,
            address=LB,
            previous_description=unknown_server,
            new_description=lb_server,
        ),
        TopologyDescriptionChangedEvent(
            topology_id=tid, previous_description=discovering, new_description=ready
        ),
    ]
    assert topology.description == ready
    assert ready.compatible and discovering.compatible and UNKNOWN.compatible


def test_the_load_balancer_has_only_its_address_and_type() -> None:
    topology, _ = _opened()
    (server,) = topology.description.servers
    unset = {
        f.name: getattr(server, f.name)
        for f in dataclasses.fields(server)
        if f.name not in ("address", "server_type")
    }
    assert set(unset.values()) == {None}, unset
    assert (server.address, server.server_type) == (LB, ServerType.LoadBalancer)
    assert server.is_data_bearing
    described = topology.description
    assert (described.set_name, described.logical_session_timeout_minutes) == (None, None)
    assert (described.max_set_version, described.max_election_id) == (None, None)


def test_close_emits_the_spec_sequence_with_its_descriptions() -> None:
    topology, events = _opened()
    ready = topology.description
    del events[:]
    topology.close()
    tid = topology.topology_id
    assert events == [
        ServerClosedEvent(topology_id=tid, address=LB),
        TopologyDescriptionChangedEvent(
            topology_id=tid, previous_description=ready, new_description=UNKNOWN
        ),
        TopologyClosedEvent(topology_id=tid),
    ]
    assert topology.description == UNKNOWN
    assert topology.closed


def test_every_event_carries_the_topologys_id_and_ids_are_unique() -> None:
    first, events = _opened()
    first.close()
    assert {e.topology_id for e in events} == {first.topology_id}
    ids = {LoadBalancedTopology(LB).topology_id for _ in range(50)}
    assert len(ids) == 50 and first.topology_id not in ids


def test_topology_id_is_an_object_id_or_without_bson_24_hex_digits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bson import ObjectId

    assert isinstance(LoadBalancedTopology(LB).topology_id, ObjectId)
    monkeypatch.setitem(sys.modules, "bson", None)  # (importing it now raises ImportError)
    tid = LoadBalancedTopology(LB).topology_id
    assert isinstance(tid, str) and len(tid) == 24
    int(tid, 16)


# ---------------------------------------------------------------------- lifecycle


def test_open_and_close_are_idempotent_and_nothing_follows_close() -> None:
    topology, events = _opened()
    topology.open()
    assert _kinds(events) == OPEN_KINDS
    topology.close()
    topology.close()
    assert _kinds(events) == OPEN_KINDS + CLOSE_KINDS
    with pytest.raises(TopologyClosedError) as opened:
        topology.open()
    with pytest.raises(TopologyClosedError) as selected:
        topology.select_server()
    assert str(opened.value) == "Attempted to open closed topology"
    assert str(selected.value) == "Attempted to select a server from closed topology"
    assert isinstance(selected.value, PoolError) and selected.value.address == LB
    topology.close()
    assert _kinds(events) == OPEN_KINDS + CLOSE_KINDS


def test_close_before_open_closes_without_an_event() -> None:
    events: list[SdamEvent] = []
    topology = LoadBalancedTopology(LB, listeners=[events.append])
    assert topology.description == UNKNOWN and not topology.opened
    topology.close()
    assert events == [] and topology.closed and topology.opened
    with pytest.raises(TopologyClosedError):
        topology.open()
    assert events == []


def test_select_server_returns_the_load_balancer_at_once_and_opens_a_new_topology() -> None:
    events: list[SdamEvent] = []
    topology = LoadBalancedTopology(LB, listeners=[events.append])
    server = topology.select_server()
    assert _kinds(events) == OPEN_KINDS
    assert server == ServerDescription(address=LB, server_type=ServerType.LoadBalancer)
    assert topology.select_server() is server
    assert topology.description.servers == (server,)
    assert _kinds(events) == OPEN_KINDS


def test_context_manager_opens_and_closes() -> None:
    events: list[SdamEvent] = []
    with LoadBalancedTopology(LB, listeners=[events.append]) as topology:
        assert topology.description.topology_type is TopologyType.LoadBalanced
    assert _kinds(events) == OPEN_KINDS + CLOSE_KINDS
    assert "closed" in repr(topology) and LB in repr(topology)


def test_concurrent_opens_and_closes_emit_each_sequence_once() -> None:
    events: list[SdamEvent] = []
    topology = LoadBalancedTopology(LB, listeners=[events.append])
    for step in (topology.open, topology.close):
        barrier = threading.Barrier(8)

        def run(step: Any = step, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            step()

        threads = [threading.Thread(target=run) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert _kinds(events) == OPEN_KINDS + CLOSE_KINDS


# ---------------------------------------------------------------------- no monitor


def test_no_monitor_no_thread_no_socket_no_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the load-balanced topology touched the network")

    for name in ("socket", "create_connection", "getaddrinfo", "gethostbyname"):
        monkeypatch.setattr(socket, name, refuse)
    threads_before = set(threading.enumerate())
    # (an address nothing resolves: .invalid is reserved, RFC 2606)
    topology, events = _opened("no-such-host.invalid:1")
    assert topology.select_server().server_type is ServerType.LoadBalancer
    assert set(threading.enumerate()) == threads_before
    assert topology.monitors_started == 0
    topology.close()
    assert set(threading.enumerate()) == threads_before
    assert _kinds(events) == OPEN_KINDS + CLOSE_KINDS


def test_no_task_on_a_running_loop() -> None:
    async def main() -> tuple[int, int]:
        before = len(asyncio.all_tasks())
        topology, _ = _opened()
        topology.select_server()
        during = len(asyncio.all_tasks())
        topology.close()
        return before, during

    before, during = asyncio.run(main())
    assert before == during == 1  # (main itself)


# ---------------------------------------------------------------------- listeners


def test_a_raising_listener_is_logged_and_the_others_still_get_every_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(event: SdamEvent) -> None:
        raise RuntimeError("listener bug")

    events: list[SdamEvent] = []
    topology = LoadBalancedTopology(LB, listeners=[broken, events.append])
    with caplog.at_level(logging.ERROR, logger="poolkit.events"):
        topology.open()
        topology.close()
    assert _kinds(events) == OPEN_KINDS + CLOSE_KINDS
    logged = [r for r in caplog.records if r.name == "poolkit.events"]
    assert len(logged) == 8
    assert "TopologyOpeningEvent" in logged[0].getMessage()
    assert logged[0].exc_info is not None and "listener bug" in str(logged[0].exc_info[1])


def test_topology_listener_methods_by_event_type() -> None:
    calls: list[str] = []

    class Recorder(TopologyListener):
        def topology_opening(self, event: TopologyOpeningEvent) -> None:
            calls.append("topology_opening")

        def server_description_changed(self, event: ServerDescriptionChangedEvent) -> None:
            calls.append(f"server {event.new_description.server_type}")

        def topology_closed(self, event: TopologyClosedEvent) -> None:
            calls.append("topology_closed")

    with LoadBalancedTopology(LB, listeners=[Recorder()]):
        pass
    assert calls == ["topology_opening", "server LoadBalancer", "topology_closed"]


def test_a_listener_closing_the_topology_sees_its_events_after_the_open_ones() -> None:
    events: list[SdamEvent] = []
    topology: LoadBalancedTopology

    def closer(event: SdamEvent) -> None:
        events.append(event)
        if isinstance(event, TopologyOpeningEvent):
            topology.close()

    topology = LoadBalancedTopology(LB, listeners=[closer])
    topology.open()
    assert _kinds(events) == OPEN_KINDS + CLOSE_KINDS
    assert topology.closed


def test_a_listener_must_be_callable() -> None:
    with pytest.raises(TypeError, match="is not callable"):
        LoadBalancedTopology(LB, listeners=[42])  # type: ignore[list-item]


# ---------------------------------------------------------------------- addresses and URIs


@pytest.mark.parametrize(
    ("given", "normal"),
    [
        ("a", "a:27017"),
        ("LB.Example:27018", "lb.example:27018"),
        ("127.0.0.1:1", "127.0.0.1:1"),
        ("[::1]", "[::1]:27017"),
        ("[::1]:65535", "[::1]:65535"),
        ("/tmp/mongodb-27017.sock", "/tmp/mongodb-27017.sock"),
    ],
)
def test_normalize_address(given: str, normal: str) -> None:
    assert normalize_address(given) == normal
    assert LoadBalancedTopology(given).address == normal


@pytest.mark.parametrize(
    "bad", ["", ":27017", "a:", "a:0", "a:65536", "a:x", "a:²", "::1", "[::1", "[]", "[::1]x"]
)
def test_an_address_that_is_none_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="address"):
        LoadBalancedTopology(bad)


def test_an_address_must_be_a_string() -> None:
    with pytest.raises(TypeError, match="host\\[:port\\]"):
        LoadBalancedTopology(("a", 27017))  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class _URI:
    """A URI object other than parse_uri's: from_uri reads only these two."""

    addresses: list[str]
    load_balanced: bool


def test_from_uri_needs_load_balanced_and_one_host() -> None:
    topology = LoadBalancedTopology.from_uri(parse_uri("mongodb://u:p@LB:27018/?loadBalanced=true"))
    assert topology.address == "lb:27018"
    with pytest.raises(ValueError, match="loadBalanced=true"):
        LoadBalancedTopology.from_uri(parse_uri("mongodb://lb/"))
    with pytest.raises(ValueError, match="exactly one host, the URI names 2"):
        LoadBalancedTopology.from_uri(_URI(["a:1", "b:2"], load_balanced=True))


# ---------------------------------------------------------------------- the SDAM spec file


SDAM_DIR = find_spec_dir("sdam-load-balanced", os.environ.get("POOLKIT_SPEC_TESTS"))
SDAM_FILES = sorted(p.name for p in SDAM_DIR.glob("*.json")) if SDAM_DIR.is_dir() else []

#: the SDAM test format's server fields, as ServerDescription names them
_SERVER_FIELDS = {
    "type": "server_type",
    "setName": "set_name",
    "setVersion": "set_version",
    "electionId": "election_id",
    "logicalSessionTimeoutMinutes": "logical_session_timeout_minutes",
    "minWireVersion": "min_wire_version",
    "maxWireVersion": "max_wire_version",
    "topologyVersion": "topology_version",
}
_TOPOLOGY_FIELDS = {
    "topologyType": "topology_type",
    "setName": "set_name",
    "logicalSessionTimeoutMinutes": "logical_session_timeout_minutes",
    "maxSetVersion": "max_set_version",
    "maxElectionId": "max_election_id",
    "compatible": "compatible",
}


def _check_outcome(outcome: dict[str, Any], described: TopologyDescription) -> None:
    servers = described.server_descriptions()
    assert set(servers) == set(outcome["servers"])
    for address, expected in outcome["servers"].items():
        assert set(expected) <= set(_SERVER_FIELDS), f"unknown server fields in {expected}"
        actual = {key: getattr(servers[address], _SERVER_FIELDS[key]) for key in expected}
        assert actual == expected, address
    unknown = set(outcome) - set(_TOPOLOGY_FIELDS) - {"servers"}
    assert not unknown, f"unknown outcome fields {unknown}"
    actual = {key: getattr(described, _TOPOLOGY_FIELDS[key]) for key in outcome if key != "servers"}
    assert actual == {key: value for key, value in outcome.items() if key != "servers"}


def test_sdam_load_balanced_spec_files_present() -> None:
    """The one place that reports the missing spec file: skipped saying why, or failed under
    POOLKIT_REQUIRE_SERVICES=1."""
    if not SDAM_FILES:
        skip_or_fail(
            "the SDAM load-balanced spec test did not run: no *.json spec files in "
            + where_looked("sdam-load-balanced", SDAM_DIR)
        )
    assert "discover_load_balancer.json" in SDAM_FILES


@pytest.mark.spec
@pytest.mark.parametrize("name", [n.removesuffix(".json") for n in SDAM_FILES])
def test_sdam_load_balanced(name: str) -> None:
    spec = json.loads((SDAM_DIR / f"{name}.json").read_text(encoding="utf-8"))
    events: list[SdamEvent] = []
    uri = parse_uri(spec["uri"])
    assert uri.load_balanced, "a load-balanced SDAM test names loadBalanced=true"
    topology = LoadBalancedTopology.from_uri(uri, listeners=[events.append])
    topology.open()
    for phase in spec["phases"]:
        # no monitor: no hello reply can reach a load-balanced topology
        assert not phase.get("responses"), "a load-balanced topology takes no responses"
        assert not phase.get("applicationErrors"), "not supported by this runner"
        _check_outcome(phase["outcome"], topology.description)
    assert _kinds(events) == OPEN_KINDS and topology.monitors_started == 0
    topology.close()
    assert topology.description == UNKNOWN


if not SDAM_FILES:
    # Not collected at all, rather than skipped as "got empty parameter set": the missing file
    # is reported once, by test_sdam_load_balanced_spec_files_present.
    del test_sdam_load_balanced
