"""The domain: one module or package per capability, between the gRPC edge and storage.

Memories (writes and reads), review, retrieval (lanes, embedders, rerankers), context, watch,
audit and quotas. Modules here speak protobuf messages and domain errors; SQL lives in
`brain.server.storage`.
"""
