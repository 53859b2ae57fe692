"""A conversational system reaches its turn's search over MCP (``req.mcp_url``; the ``mcp``
body field of an HTTP service): the same tool, cache and faults as in process, at an address of
the turn's own that ends with the turn."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import replace

import pytest

pytest.importorskip("mcp")

from layerlab.corpus import conversations as cv  # noqa: E402
from layerlab.corpus.build import load  # noqa: E402
from layerlab.faults.scenario import conversation_scenarios  # noqa: E402
from layerlab.harness import conversation as hc  # noqa: E402


@pytest.fixture(scope="module")
def world():
    convs, key = cv.build_from_specs()
    return convs, hc.Setting(load(), key), conversation_scenarios()


@pytest.mark.parametrize("scenario", ["conversation_clean", "foreign_memory"])
def test_searches_over_mcp_are_the_turns_own(targets, world, scenario) -> None:
    convs, setting, scenarios = world
    targets.MCP_SEEN.clear()
    over_mcp = hc.run([hc.target("conversation_targets:mcp_scoped")], convs[:6],
                      [scenarios[scenario]], setting)  # fmt: skip
    in_process = hc.run([hc.target("conversation_targets:scoped_memory")], convs[:6],
                        [scenarios[scenario]], setting)  # fmt: skip
    assert [replace(r, model="-") for r in over_mcp] == [replace(r, model="-") for r in in_process]
    seen = targets.MCP_SEEN
    assert len(seen) == sum(r.searches for r in over_mcp) > 0
    assert all(s["tools"] == ["search"] for s in seen)  # a conversation's tool searches only
    assert len({s["url"] for s in seen}) == len(seen)  # each turn an address of its own


def _status(url: str) -> int:
    """The HTTP status a JSON-RPC ``tools/list`` gets at ``url``."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - 127.0.0.1
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_an_ended_turns_address_is_refused(targets, world) -> None:
    convs, setting, scenarios = world
    kept: list[str] = []
    status: list[tuple[int, int]] = []

    def keep(req):
        url = req.mcp_url
        status.append((_status(kept[-1]) if kept else 0, _status(url)))
        kept.append(url)
        return targets.scoped_memory(req)

    hc.run([hc.System("target", "keep", keep)], convs[:1], [scenarios["conversation_clean"]],
           setting)  # fmt: skip
    assert len(status) == len(convs[0].turns) > 1
    assert status[0][1] == 200 and all(s == (404, 200) for s in status[1:])
