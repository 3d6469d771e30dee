"""The page's HTTP server: one HTML page and a JSON API over one cube.

Reads go to the graph store directly (read-only: the tree, a node's edges) and through
the client (search, a node's history on ``memory.updates``, live updates as server-sent
events). It binds to loopback unless told otherwise: it has no login of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import Callable
from importlib import resources
from typing import Any

from aiohttp import web

from memstream.client.client import MemoryClient, MemoryServiceError
from memstream.history.provenance import NodeNotFound
from memstream.sinks.ports import GraphStore
from memstream.topics.events import MemoryUpdate
from memstream.topics.models import MemoryItem
from memstream.topics.settings import Settings

TREE_TYPES = ("LongTermMemory", "UserMemory", "EpisodicMemory")


def _brief(item: MemoryItem) -> dict[str, Any]:
    md = item.metadata
    return {"id": item.id, "memory": item.memory, "key": md.key, "level": md.hierarchy_level,
            "memory_type": md.memory_type, "type": md.type, "status": md.status,
            "tags": list(md.tags), "updated_at": md.updated_at.isoformat()}


def _update_json(u: MemoryUpdate) -> dict[str, Any]:
    return {"at": u.occurred_at.isoformat(), "action": u.action, "stage": u.stage,
            "node_id": u.node_id, "related_ids": list(u.related_ids), "reason": u.reason}


class UIServer:
    """Serves the page for ``cube_id`` on ``host:port`` (port 0: a free one)."""

    def __init__(self, settings: Settings, client: MemoryClient, graph: GraphStore,
                 user_id: str, cube_id: str) -> None:
        self.settings, self.client, self.graph = settings, client, graph
        self.user_id, self.cube_id = user_id, cube_id
        self._runner: web.AppRunner | None = None
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application()
        app.add_routes([
            web.get("/", self.page),
            web.get("/api/info", self.info),
            web.get("/api/cube", self.cube),
            web.get("/api/node/{node_id}", self.node),
            web.get("/api/search", self.search),
            web.get("/api/events", self.events),
        ])
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server: Any = site._server  # aiohttp keeps the asyncio server private
        sockets = server.sockets if server is not None else []
        bound = sockets[0].getsockname()[1] if sockets else port
        self.url = f"http://{host}:{bound}/"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------------ handlers

    async def page(self, request: web.Request) -> web.Response:
        html = resources.files("memstream.ui").joinpath("page.html").read_text("utf-8")
        return web.Response(text=html, content_type="text/html",
                            headers={"Content-Security-Policy": "default-src 'self'; "
                                     "style-src 'self' 'unsafe-inline'; "
                                     "script-src 'self' 'unsafe-inline'"})

    async def info(self, request: web.Request) -> web.Response:
        return web.json_response({"user_id": self.user_id, "cube_id": self.cube_id,
                                  "data_dir": str(self.settings.data_dir)})

    async def cube(self, request: web.Request) -> web.Response:
        """Activated nodes (no working-memory copies) and the edges between them."""
        cube = await self.graph.export_cube(self.cube_id)
        nodes = [n for n in cube.nodes if n.metadata.memory_type in TREE_TYPES
                 and n.metadata.status == "activated"]
        ids = {n.id for n in nodes}
        edges = [e.model_dump(mode="json") for e in cube.edges
                 if e.source in ids and e.target in ids]
        return web.json_response({"cube_id": self.cube_id, "nodes": [_brief(n) for n in nodes],
                                  "edges": edges})

    async def node(self, request: web.Request) -> web.Response:
        node_id = request.match_info["node_id"]
        item = await self.graph.get_node(self.cube_id, node_id)
        if item is None:
            raise web.HTTPNotFound(text=f"no memory {node_id} in cube {self.cube_id}")
        cube = await self.graph.export_cube(self.cube_id)
        by_id = {n.id: n for n in cube.nodes}
        edges = []
        for e in cube.edges:
            if node_id not in (e.source, e.target):
                continue
            other = by_id.get(e.target if e.source == node_id else e.source)
            edges.append({**e.model_dump(mode="json"),
                          "direction": "out" if e.source == node_id else "in",
                          "other": _brief(other) if other is not None else None})
        try:  # the node's own records, through the provenance index (not the whole log)
            changes = await self.client.memory_history(node_id, self.cube_id)
        except NodeNotFound:
            changes = []
        history = [_update_json(c.update) for c in changes]
        return web.json_response({
            "node": {**_brief(item), "background": item.metadata.background,
                     "created_at": item.metadata.created_at.isoformat(),
                     "session_id": item.metadata.session_id,
                     "confidence": item.metadata.confidence},
            "sources": [s.model_dump(mode="json", exclude_none=True)
                        for s in item.metadata.sources],
            "edges": edges, "history": history})

    async def search(self, request: web.Request) -> web.Response:
        query = request.query.get("q", "").strip()
        if not query:
            return web.json_response({"error": "query: must not be empty"}, status=400)
        try:
            found = await self.client.search(self.user_id, query, cube_id=self.cube_id,
                                             top_k=10)
        except (MemoryServiceError, ValueError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"results": [{**_brief(s.item), "score": s.score}
                                              for s in found]})

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: one per ``memory.updates`` record of the cube, as it comes."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        await response.write(b": connected\n\n")
        with contextlib.suppress(ConnectionResetError, asyncio.CancelledError):
            async for update in self.client.updates(cube_id=self.cube_id):
                data = json.dumps(_update_json(update), ensure_ascii=False)
                await response.write(f"data: {data}\n\n".encode())
        return response


async def serve(settings: Settings, user_id: str, cube_id: str, host: str, port: int,
                on_ready: Callable[[str], None]) -> None:
    """Run the page until Ctrl-C or SIGTERM."""
    from memstream.local.services import status as service_status
    from memstream.sinks.graph.factory import create_graph_store

    graph_uri = settings.graph.uri or (await service_status(settings.data_dir)).graph
    if graph_uri is None:
        raise RuntimeError(f"no graph store: nothing runs in {settings.data_dir}; run "
                           "`memstream up` first or set MEMSTREAM_GRAPH__URI")
    graph = create_graph_store(settings, graph_uri)
    try:
        async with MemoryClient(settings) as client:
            server = UIServer(settings, client, graph, user_id, cube_id)
            on_ready(await server.start(host, port))
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            try:
                await stop.wait()
            finally:
                await server.stop()
    finally:
        await graph.close()
