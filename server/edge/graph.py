"""GraphService: thin translation between brain.v1 messages and the graph domain."""

from __future__ import annotations

from brain.authz import caller
from brain.authz._grpc_types import Ctx
from brain.server.domain.graph.reads import Graph
from brain.server.edge.status import timeout_ms, unary
from brain.v1 import graph_pb2, graph_pb2_grpc


class GraphServicer(graph_pb2_grpc.GraphServiceServicer):
    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    @unary
    async def LookupEntity(
        self, request: graph_pb2.LookupEntityRequest, context: Ctx
    ) -> graph_pb2.LookupEntityResponse:
        return await self.graph.lookup(caller(), request, timeout_ms(context))

    @unary
    async def ListNeighbours(
        self, request: graph_pb2.ListNeighboursRequest, context: Ctx
    ) -> graph_pb2.ListNeighboursResponse:
        return await self.graph.neighbours(caller(), request, timeout_ms(context))
